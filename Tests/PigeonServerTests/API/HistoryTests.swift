import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md "History and gap recovery": paging after and before a seq.
@Suite struct HistoryTests {
    /// alice and bob with `count` stored messages "m1" … from alice.
    static func setUp(_ client: PigeonTestClient, count: Int) async throws -> (alice: TestDevice, bob: TestDevice, conversation: Conversation) {
        let alice = try await client.register("alice")
        let bob = try await client.register("bob")
        let conversation = try await client.createConversation(alice, members: ["bob"])
        let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
        for index in 1...count { socket.sendMessage(to: conversation.id, body: "m\(index)") }
        _ = try await client.waitForCount(alice, conversation.id, count)
        await socket.close()
        return (alice, bob, conversation)
    }

    func expectPage(
        _ client: PigeonTestClient, _ device: TestDevice, _ conversationId: String, _ query: String, seqs: ClosedRange<Int64>?,
        hasMore: Bool, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let answer = try await client.request(.GET, "/v1/conversations/\(conversationId)/messages?\(query)", token: device.token)
        #expect(answer.status == 200, "\(query): \(answer.text)", sourceLocation: sourceLocation)
        guard let page = try? answer.decode(MessagePage.self) else {
            Issue.record("\(query): \(answer.text)", sourceLocation: sourceLocation)
            return
        }
        let expected = seqs.map { Array($0) } ?? []
        #expect(page.messages.map(\.seq) == expected, "\(query)", sourceLocation: sourceLocation)
        #expect(page.messages.map(\.body) == expected.map { "m\($0)" }, "\(query)", sourceLocation: sourceLocation)
        #expect(page.hasMore == hasMore, "\(query) hasMore", sourceLocation: sourceLocation)
        #expect(Set(answer.jsonObject.map { Array($0.keys) } ?? []) == ["messages", "hasMore"], "\(query)", sourceLocation: sourceLocation)
    }

    @Test func afterPagesAscendWithHasMore() async throws {
        try await withTestServer { client in
            let (_, bob, conversation) = try await Self.setUp(client, count: 12)
            let c = conversation.id
            try await expectPage(client, bob, c, "after=0&limit=5", seqs: 1...5, hasMore: true)
            try await expectPage(client, bob, c, "after=5&limit=5", seqs: 6...10, hasMore: true)
            try await expectPage(client, bob, c, "after=10&limit=5", seqs: 11...12, hasMore: false)
            try await expectPage(client, bob, c, "after=7&limit=5", seqs: 8...12, hasMore: false)
            try await expectPage(client, bob, c, "after=6&limit=5", seqs: 7...11, hasMore: true)
            try await expectPage(client, bob, c, "after=12&limit=5", seqs: nil, hasMore: false)
            try await expectPage(client, bob, c, "after=1000&limit=5", seqs: nil, hasMore: false)
            try await expectPage(client, bob, c, "after=0&limit=1", seqs: 1...1, hasMore: true)
            try await expectPage(client, bob, c, "after=11&limit=1", seqs: 12...12, hasMore: false)
            try await expectPage(client, bob, c, "after=0&limit=500", seqs: 1...12, hasMore: false)
            try await expectPage(client, bob, c, "after=0", seqs: 1...12, hasMore: false)
        }
    }

    @Test func beforePagesGiveThePageJustBeforeAscending() async throws {
        try await withTestServer { client in
            let (alice, _, conversation) = try await Self.setUp(client, count: 12)
            let c = conversation.id
            try await expectPage(client, alice, c, "before=13&limit=5", seqs: 8...12, hasMore: true)
            try await expectPage(client, alice, c, "before=8&limit=5", seqs: 3...7, hasMore: true)
            try await expectPage(client, alice, c, "before=3&limit=5", seqs: 1...2, hasMore: false)
            try await expectPage(client, alice, c, "before=6&limit=5", seqs: 1...5, hasMore: false)
            try await expectPage(client, alice, c, "before=7&limit=5", seqs: 2...6, hasMore: true)
            try await expectPage(client, alice, c, "before=1&limit=5", seqs: nil, hasMore: false)
            try await expectPage(client, alice, c, "before=1000&limit=3", seqs: 10...12, hasMore: true)
            try await expectPage(client, alice, c, "before=2&limit=1", seqs: 1...1, hasMore: false)
            try await expectPage(client, alice, c, "before=13", seqs: 1...12, hasMore: false)
        }
    }

    @Test func withoutAfterOrBeforeTheNewestPage() async throws {
        try await withTestServer { client in
            let (alice, _, conversation) = try await Self.setUp(client, count: 105)
            let c = conversation.id
            try await expectPage(client, alice, c, "limit=5", seqs: 101...105, hasMore: true)
            try await expectPage(client, alice, c, "limit=105", seqs: 1...105, hasMore: false)
            // Default limit is 100.
            try await expectPage(client, alice, c, "", seqs: 6...105, hasMore: true)
            try await expectPage(client, alice, c, "after=0", seqs: 1...100, hasMore: true)
            try await expectPage(client, alice, c, "before=106", seqs: 6...105, hasMore: true)
        }
    }

    @Test func emptyConversationHasAnEmptyPage() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            for query in ["", "after=0", "before=5&limit=10", "limit=500"] {
                let page = try await client.history(alice, conversation.id, query: query)
                #expect(page == MessagePage(messages: [], hasMore: false), "\(query)")
            }
        }
    }

    @Test func badPagingParametersAre400() async throws {
        try await withTestServer { client in
            let (alice, _, conversation) = try await Self.setUp(client, count: 3)
            for query in [
                "limit=501", "limit=0", "limit=-1", "limit=abc", "limit=", "limit=1.5", "limit=100000000000000000000", "after=0&limit=501",
                "after=abc", "after=-1", "after=1.5", "before=abc", "before=-3", "after=0&before=3", "after=1&before=2&limit=5",
            ] {
                let answer = try await client.request(.GET, "/v1/conversations/\(conversation.id)/messages?\(query)", token: alice.token)
                expectError(answer, 400, .invalidRequest, query)
            }
            try await expectPage(client, alice, conversation.id, "after=0&limit=500", seqs: 1...3, hasMore: false)
        }
    }

    @Test func messagesCarryEveryFieldAsSentAndAccepted() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice", deviceName: "laptop")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let answer = try await client.sendRaw(
                alice, to: conversation.id,
                json: "{\"clientMessageId\":\"\(clientMessageId)\",\"type\":\"reaction\",\"body\":\"👍 target\",\"clientTimestamp\":1763700000123}")
            #expect(answer.status == 202)
            let accepted = try answer.decode(SendMessageResponse.self)
            let messages = try await client.waitForCount(bob, conversation.id, 1)
            let message = try #require(messages.first)
            #expect(message.serverId == accepted.serverId)
            #expect(message.clientMessageId == clientMessageId)
            #expect(message.conversationId == conversation.id)
            #expect(message.seq == 1)
            #expect(message.senderId == "alice")
            #expect(message.senderDeviceId == alice.deviceId)
            #expect(message.type == "reaction")
            #expect(message.body == "👍 target")
            #expect(message.clientTimestamp == 1_763_700_000_123)
            #expect(message.acceptedAt == accepted.acceptedAt)
            #expect(message.storedAt >= message.acceptedAt)
            #expect(message.storedAt <= nowMillis() + 1)
            let raw = try await client.request(.GET, "/v1/conversations/\(conversation.id)/messages?after=0", token: bob.token)
            let first = ((raw.jsonObject?["messages"] as? [Any])?.first as? [String: Any]).map { Set($0.keys) }
            #expect(first == [
                "serverId", "clientMessageId", "conversationId", "seq", "senderId", "senderDeviceId", "type", "body", "clientTimestamp",
                "acceptedAt", "storedAt", "reactions", "replyTo", "replyPreview", "threadRoot", "thread", "attachments",
            ])
        }
    }
}
