import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonSQLite
import PigeonServer
import PigeonTestSupport
import Testing

/// API.md "Sending": the accept answer, idempotent resends and per-device order.
@Suite struct SendTests {
    /// A switch for `processingFaultInjector`: while it is on, every message fails processing (and stays queued).
    final class Gate: Sendable {
        private let closed = NIOLockedValueBox(true)
        func open() { closed.withLockedValue { $0 = false } }
        var injector: SQLiteMessageStore.FaultInjector {
            { _ in if self.closed.withLockedValue({ $0 }) { throw TestFailure("gate closed") } }
        }
    }

    /// Processing held back by a closed gate, retried quickly once it opens.
    static func gated(_ gate: Gate) -> (inout ServerConfiguration) -> Void {
        { configuration in
            // The processor's retries and dead letters: the separate buffer's path.
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = gate.injector
            configuration.maxAttempts = 100_000
            configuration.retryBaseDelay = .milliseconds(20)
            configuration.maxRetryDelay = .milliseconds(50)
        }
    }

    @Test func acceptAnswerIs202Queued() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let before = nowMillis()
            let answer = try await client.send(alice, to: conversation.id, body: "hello", clientMessageId: clientMessageId)
            #expect(answer.status == 202, "\(answer.text)")
            #expect(answer.headers["content-type"]?.hasPrefix("application/json") == true)
            let response = try answer.decode(SendMessageResponse.self)
            #expect(isLowercaseUUID(response.serverId))
            #expect(response.clientMessageId == clientMessageId)
            #expect(response.status == .queued)
            #expect(response.acceptedAt >= before - 1 && response.acceptedAt <= nowMillis() + 1)
            #expect(Set(answer.jsonObject.map { Array($0.keys) } ?? []) == ["serverId", "clientMessageId", "status", "acceptedAt"])
        }
    }

    @Test func resendWhileQueuedAnswersTheOriginal() async throws {
        let gate = Gate()
        try await withTestServer(configure: Self.gated(gate)) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)

            // Same id, same content, right after the 202 (processing is held, so the message is still queued).
            let again = try await client.send(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            #expect(again.status == 200, "\(again.text)")
            let againResponse = try again.decode(SendMessageResponse.self)
            #expect(againResponse == SendMessageResponse(
                serverId: first.serverId, clientMessageId: clientMessageId, status: .queued, acceptedAt: first.acceptedAt))
            #expect(again.jsonObject?["seq"] == nil, "a queued message has no seq: \(again.text)")

            // Same id, different body and type: still the original.
            let changed = try await client.send(alice, to: conversation.id, body: "changed", clientMessageId: clientMessageId, type: "edited")
            #expect(changed.status == 200, "\(changed.text)")
            #expect(try changed.decode(SendMessageResponse.self) == againResponse)
            #expect(try await client.history(alice, conversation.id).messages.isEmpty)

            gate.open()
            let messages = try await client.waitForCount(alice, conversation.id, 1)
            #expect(messages.count == 1)
            #expect(messages.first?.serverId == first.serverId)
            #expect(messages.first?.body == "original")
            #expect(messages.first?.type == "text")
            #expect(messages.first?.seq == 1)

            // A later message gets seq 2: the resends created nothing in between.
            let marker = try await client.sendAccepted(alice, to: conversation.id, body: "marker")
            let after = try await client.waitForCount(alice, conversation.id, 2)
            #expect(after.map(\.serverId) == [first.serverId, marker.serverId])
            #expect(after.map(\.body) == ["original", "marker"])
            #expect(after.map(\.seq) == [1, 2])
        }
    }

    @Test func resendAfterStoredAnswersStoredWithSeq() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let earlier = try await client.sendAccepted(alice, to: conversation.id, body: "earlier")
            let clientMessageId = newId()
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            // message.stored on the sending device: from now on the message is stored.
            let storedEvent = await socket.firstEvent { $0.stored?.clientMessageId == clientMessageId }?.stored
            #expect(storedEvent?.seq == 2)
            #expect(storedEvent?.serverId == first.serverId)

            let again = try await client.send(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            #expect(again.status == 200, "\(again.text)")
            #expect(try again.decode(SendMessageResponse.self) == SendMessageResponse(
                serverId: first.serverId, clientMessageId: clientMessageId, status: .stored, acceptedAt: first.acceptedAt, seq: 2))

            let changed = try await client.send(alice, to: conversation.id, body: "rewritten", clientMessageId: clientMessageId, type: "other")
            #expect(changed.status == 200, "\(changed.text)")
            #expect(try changed.decode(SendMessageResponse.self) == SendMessageResponse(
                serverId: first.serverId, clientMessageId: clientMessageId, status: .stored, acceptedAt: first.acceptedAt, seq: 2))

            let marker = try await client.sendAccepted(alice, to: conversation.id, body: "marker")
            let messages = try await client.waitForCount(alice, conversation.id, 3)
            #expect(messages.map(\.serverId) == [earlier.serverId, first.serverId, marker.serverId])
            #expect(messages.map(\.body) == ["earlier", "original", "marker"])
            #expect(messages.map(\.type) == ["text", "text", "text"])
            #expect(messages.filter { $0.clientMessageId == clientMessageId }.count == 1)
            await socket.close()
        }
    }

    @Test func sameClientMessageIdFromAnotherDeviceIsAnotherMessage() async throws {
        try await withTestServer { client in
            let laptop = try await client.register("alice", deviceName: "laptop")
            let phone = try await client.register("alice", deviceName: "phone", existing: laptop)
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(laptop, members: ["bob"])
            let clientMessageId = newId()
            let fromLaptop = try await client.sendAccepted(laptop, to: conversation.id, body: "laptop", clientMessageId: clientMessageId)
            let fromPhone = try await client.send(phone, to: conversation.id, body: "phone", clientMessageId: clientMessageId)
            #expect(fromPhone.status == 202, "\(fromPhone.text)")
            let fromBob = try await client.send(bob, to: conversation.id, body: "bob", clientMessageId: clientMessageId)
            #expect(fromBob.status == 202, "\(fromBob.text)")
            let serverIds = [fromLaptop.serverId, try fromPhone.decode(SendMessageResponse.self).serverId,
                             try fromBob.decode(SendMessageResponse.self).serverId]
            #expect(Set(serverIds).count == 3)

            let messages = try await client.waitForCount(bob, conversation.id, 3)
            #expect(messages.map(\.serverId) == serverIds)
            #expect(messages.map(\.body) == ["laptop", "phone", "bob"])
            #expect(messages.map(\.senderDeviceId) == [laptop.deviceId, phone.deviceId, bob.deviceId])
            #expect(messages.allSatisfy { $0.clientMessageId == clientMessageId })
        }
    }

    /// "at any later time … answers 200 with the original serverId": also while the buffer is full. A resend needs no
    /// buffer space, and `503` says "nothing was accepted", which is untrue of a message that was.
    @Test func resendWhileTheBufferIsFullAnswersTheOriginal() async throws {
        let gate = Gate()
        try await withTestServer(configure: { configuration in
            Self.gated(gate)(&configuration)
            configuration.maxBufferedMessages = 1
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            // The buffer is full now (one message, held by the closed gate): a new message is refused…
            expectError(try await client.send(alice, to: conversation.id, body: "new"), 503, .overloaded, "new message")
            // …but the resend of the accepted one is answered from the de-duplication record.
            let again = try await client.send(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            #expect(again.status == 200, "\(again.text)")
            #expect((try? again.decode(SendMessageResponse.self))?.serverId == first.serverId)
            gate.open()
            _ = try await client.waitForCount(alice, conversation.id, 1)
        }
    }

    /// A resend needs no rate budget either: over the per-device rate, a new message gets 429 but the resend of an
    /// accepted one still answers 200 with the original.
    @Test func resendWhileRateLimitedAnswersTheOriginal() async throws {
        try await withTestServer(configure: { configuration in
            configuration.rateLimitPerDevice = 0.01
            configuration.rateLimitBurst = 1
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            expectError(try await client.send(alice, to: conversation.id, body: "new"), 429, .rateLimited, "new message")
            let again = try await client.send(alice, to: conversation.id, body: "original", clientMessageId: clientMessageId)
            #expect(again.status == 200, "\(again.text)")
            #expect((try? again.decode(SendMessageResponse.self))?.serverId == first.serverId)
        }
    }

    @Test func webSocketResendGetsTheSameServerId() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let clientMessageId = newId()
            socket.sendMessage(to: conversation.id, body: "once", clientMessageId: clientMessageId)
            socket.sendMessage(to: conversation.id, body: "twice", clientMessageId: clientMessageId)
            let first = await socket.first { $0.ack != nil }?.ack
            let second = await socket.first { $0.ack != nil }?.ack
            #expect(first?.clientMessageId == clientMessageId)
            #expect(first?.status == .queued)
            #expect(first.map { isLowercaseUUID($0.serverId) } == true)
            #expect(second?.clientMessageId == clientMessageId)
            #expect(second?.serverId == first?.serverId)
            #expect(second?.acceptedAt == first?.acceptedAt)

            // And across transports: an HTTP resend of the same id is the same message.
            let http = try await client.send(alice, to: conversation.id, body: "http", clientMessageId: clientMessageId)
            #expect(http.status == 200, "\(http.text)")
            #expect(try http.decode(SendMessageResponse.self).serverId == first?.serverId)

            let marker = try await client.sendAccepted(alice, to: conversation.id, body: "marker")
            let messages = try await client.waitForCount(alice, conversation.id, 2)
            #expect(messages.map(\.body) == ["once", "marker"])
            #expect(messages.map(\.serverId) == [first?.serverId ?? "", marker.serverId])
            await socket.close()
        }
    }

    @Test func httpSendWhoseIdWasFirstSentOverWebSocketIsAResend() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "http", clientMessageId: clientMessageId)
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            socket.sendMessage(to: conversation.id, body: "ws", clientMessageId: clientMessageId)
            let ack = await socket.first { $0.ack != nil }?.ack
            #expect(ack?.serverId == first.serverId)
            #expect(ack?.acceptedAt == first.acceptedAt)
            await socket.close()
        }
    }

    @Test func messageTypeBoundariesAreAccepted() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let types = ["a", String(repeating: "z", count: 32), "reaction", "app.v2_edit-1", "0"]
            for type in types {
                let answer = try await client.send(alice, to: conversation.id, body: "x", type: type)
                #expect(answer.status == 202, "type \(type): \(answer.text)")
            }
            let messages = try await client.waitForCount(alice, conversation.id, types.count)
            #expect(messages.map(\.type) == types)
        }
    }

    @Test func bodyIsOpaqueAndRoundTripsExactly() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let bodies = [
                "", "  leading and trailing  ", "line\nbreak\ttab", "{\"json\": [1, 2]}", "emoji 🐦 ünïcödé 中文",
                "quote \" backslash \\ slash /", "aGVsbG8gd29ybGQ=", String(repeating: "x", count: 60_000),
            ]
            for body in bodies { try await client.sendAccepted(alice, to: conversation.id, body: body) }
            let messages = try await client.waitForCount(bob, conversation.id, bodies.count)
            #expect(messages.map(\.body) == bodies)
        }
    }

    @Test func requestBodyAtTheLimitIsAccepted() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            func request(padding: Int) -> String {
                "{\"clientMessageId\":\"\(newId())\",\"type\":\"text\",\"clientTimestamp\":1,\"body\":\"\(String(repeating: "a", count: padding))\"}"
            }
            let overhead = request(padding: 0).utf8.count
            let atLimit = request(padding: 65_536 - overhead)
            #expect(atLimit.utf8.count == 65_536)
            let accepted = try await client.sendRaw(alice, to: conversation.id, json: atLimit)
            #expect(accepted.status == 202, "\(accepted.text)")
            let overLimit = request(padding: 65_537 - overhead)
            #expect(overLimit.utf8.count == 65_537)
            expectError(try await client.sendRaw(alice, to: conversation.id, json: overLimit), 413, .payloadTooLarge, "65,537 bytes")
            let messages = try await client.waitForCount(alice, conversation.id, 1)
            #expect(messages.count == 1)
            #expect(messages.first?.body.utf8.count == 65_536 - overhead)
        }
    }
}
