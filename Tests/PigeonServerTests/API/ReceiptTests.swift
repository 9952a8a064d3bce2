import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md "Receipts: watermarks".
@Suite struct ReceiptTests {
    /// alice and bob; alice has sent five stored messages.
    static func setUp(_ client: PigeonTestClient) async throws -> (alice: TestDevice, bob: TestDevice, conversation: Conversation) {
        let alice = try await client.register("alice")
        let bob = try await client.register("bob")
        let conversation = try await client.createConversation(alice, members: ["bob"])
        for index in 1...5 { try await client.sendAccepted(alice, to: conversation.id, body: "m\(index)") }
        _ = try await client.waitForCount(alice, conversation.id, 5)
        return (alice, bob, conversation)
    }

    func expectWatermarks(
        _ answer: HTTPAnswer, delivered: Int64, read: Int64, _ context: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(answer.status == 200, "\(context): \(answer.status) \(answer.text)", sourceLocation: sourceLocation)
        let watermarks = try? answer.decode(ReceiptResponse.self)
        #expect(watermarks == ReceiptResponse(deliveredSeq: delivered, readSeq: read), "\(context): \(answer.text)", sourceLocation: sourceLocation)
    }

    func member(_ conversation: Conversation, _ userId: String) -> ConversationMember? {
        conversation.members.first { $0.userId == userId }
    }

    @Test func watermarksOnlyMoveUp() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 3), delivered: 3, read: 0, "delivered 3")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 2), delivered: 3, read: 0, "delivered 2")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 0), delivered: 3, read: 0, "delivered 0")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 2), delivered: 3, read: 2, "read 2")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 1), delivered: 3, read: 2, "read 1")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 2), delivered: 3, read: 2, "read 2 again")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 5), delivered: 5, read: 2, "delivered 5")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 4), delivered: 5, read: 4, "read 4")
            let seen = try await client.conversation(alice, conversation.id)
            #expect(member(seen, "bob") == ConversationMember(userId: "bob", deliveredSeq: 5, readSeq: 4))
            #expect(member(seen, "alice") == ConversationMember(userId: "alice", role: .owner, deliveredSeq: 0, readSeq: 0))
            #expect(try await client.conversation(bob, conversation.id).members == seen.members, "every member sees the same watermarks")
            #expect(try await client.conversations(alice).first { $0.id == conversation.id } == seen)
        }
    }

    @Test func upToSeqBeyondLastSeqIsClamped() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 100), delivered: 5, read: 0, "delivered 100")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: Int64.max), delivered: 5, read: 5, "read max")
            let seen = try await client.conversation(alice, conversation.id)
            #expect(seen.lastSeq == 5)
            #expect(member(seen, "bob") == ConversationMember(userId: "bob", deliveredSeq: 5, readSeq: 5))
            // A clamped watermark still moves on once there are more messages.
            try await client.sendAccepted(alice, to: conversation.id, body: "m6")
            _ = try await client.waitForCount(bob, conversation.id, 6)
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 6), delivered: 6, read: 5, "delivered 6")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 7), delivered: 6, read: 6, "read 7")
        }
    }

    @Test func readImpliesDelivered() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 3), delivered: 3, read: 3, "read 3")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 2), delivered: 3, read: 3, "delivered 2")
            let seen = try await client.conversation(alice, conversation.id)
            #expect(member(seen, "bob") == ConversationMember(userId: "bob", deliveredSeq: 3, readSeq: 3))
        }
    }

    @Test func receiptEventsReachEveryMemberDevice() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let bobPhone = try await client.register("bob", existing: bob)
            var sockets: [TestWebSocket] = []
            for device in [alice, bob, bobPhone] { sockets.append(try await TestWebSocket.connect(port: client.port, token: device.token)) }
            let before = nowMillis()
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 2), delivered: 2, read: 0, "delivered 2")
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 4), delivered: 4, read: 4, "read 4")
            for (index, socket) in sockets.enumerated() {
                let delivered = await socket.firstEvent { $0.receipt?.kind == .delivered && $0.receipt?.upToSeq == 2 }?.receipt
                #expect(delivered?.userId == "bob", "socket \(index)")
                #expect(delivered?.conversationId == conversation.id, "socket \(index)")
                #expect(delivered.map { $0.at >= before - 1 && $0.at <= nowMillis() + 1 } == true, "socket \(index)")
                let read = await socket.firstEvent { $0.receipt?.kind == .read }?.receipt
                #expect(read?.userId == "bob", "socket \(index)")
                #expect(read?.upToSeq == 4, "socket \(index)")
                #expect(read?.conversationId == conversation.id, "socket \(index)")
            }
            for socket in sockets { await socket.close() }
        }
    }

    @Test func aNoOpReceiptEmitsNoEvent() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let cursor = try await client.headCursor(alice)
            _ = try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 3)
            _ = try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 2)
            _ = try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 3)
            _ = try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 1)
            _ = try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 0)
            _ = try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 4)
            let events = try await client.sync(alice, cursor: cursor).events.compactMap(\.receipt)
            #expect(events.map(\.kind) == [.delivered, .read, .delivered])
            #expect(events.map(\.upToSeq) == [3, 1, 4])
            #expect(events.allSatisfy { $0.userId == "bob" && $0.conversationId == conversation.id })
        }
    }

    @Test func receiptsOverWebSocket() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            bobSocket.send(.receipt(conversationId: conversation.id, ReceiptRequest(kind: .delivered, upToSeq: 5)))
            bobSocket.send(.receipt(conversationId: conversation.id, ReceiptRequest(kind: .read, upToSeq: 4)))
            let read = await aliceSocket.firstEvent { $0.receipt?.kind == .read }?.receipt
            #expect(read?.userId == "bob")
            #expect(read?.upToSeq == 4)
            let delivered = await bobSocket.firstEvent { $0.receipt?.kind == .delivered && $0.receipt?.upToSeq == 5 }?.receipt
            #expect(delivered?.userId == "bob")
            let seen = try await client.conversation(alice, conversation.id)
            #expect(member(seen, "bob") == ConversationMember(userId: "bob", deliveredSeq: 5, readSeq: 4))

            // A lower one is a no-op, not an error.
            let cursor = try await client.headCursor(alice)
            bobSocket.send(.receipt(conversationId: conversation.id, ReceiptRequest(kind: .read, upToSeq: 1)))
            bobSocket.send(.receipt(conversationId: conversation.id, ReceiptRequest(kind: .read, upToSeq: 5)))
            let next = await aliceSocket.firstEvent { $0.receipt?.kind == .read && $0.receipt?.upToSeq == 5 }?.receipt
            #expect(next?.userId == "bob")
            #expect(try await client.sync(alice, cursor: cursor).events.compactMap(\.receipt).map(\.upToSeq) == [5])
            #expect(await bobSocket.inbox.drain(for: .milliseconds(200)).compactMap(\.errorFrame).isEmpty)

            // Invalid ones get error frames and change nothing.
            bobSocket.sendRaw("{\"op\":\"receipt\",\"conversationId\":\"\(conversation.id)\",\"kind\":\"seen\",\"upToSeq\":5}")
            #expect(await bobSocket.first { $0.errorFrame != nil }?.errorFrame?.error.code == .invalidRequest)
            bobSocket.send(.receipt(conversationId: conversation.id, ReceiptRequest(kind: .read, upToSeq: -1)))
            #expect(await bobSocket.first { $0.errorFrame != nil }?.errorFrame?.error.code == .invalidRequest)
            #expect(member(try await client.conversation(alice, conversation.id), "bob") == ConversationMember(userId: "bob", deliveredSeq: 5, readSeq: 5))
            await aliceSocket.close()
            await bobSocket.close()
        }
    }

    @Test func invalidReceiptsAre400AndChangeNothing() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            _ = try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 2)
            let before = try await client.conversation(alice, conversation.id)
            let cursor = try await client.headCursor(alice)
            let path = "/v1/conversations/\(conversation.id)/receipts"
            for body in [
                "{\"kind\":\"seen\",\"upToSeq\":3}", "{\"kind\":\"READ\",\"upToSeq\":3}", "{\"kind\":\"\",\"upToSeq\":3}",
                "{\"kind\":\"read\",\"upToSeq\":-1}", "{\"kind\":\"delivered\",\"upToSeq\":-100}", "{\"kind\":\"read\",\"upToSeq\":\"3\"}",
                "{\"kind\":\"read\"}", "{\"kind\":null,\"upToSeq\":3}",
            ] {
                expectError(try await client.request(.POST, path, token: bob.token, body: body), 400, .invalidRequest, body)
            }
            #expect(try await client.conversation(alice, conversation.id) == before)
            #expect(try await client.sync(alice, cursor: cursor).events.isEmpty)
        }
    }

    @Test func receiptWithNoMessagesStaysAtZero() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            expectWatermarks(try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 10), delivered: 0, read: 0, "read 10 of nothing")
            let seen = try await client.conversation(alice, conversation.id)
            #expect(seen.lastSeq == 0)
            #expect(member(seen, "bob") == ConversationMember(userId: "bob", deliveredSeq: 0, readSeq: 0))
        }
    }
}
