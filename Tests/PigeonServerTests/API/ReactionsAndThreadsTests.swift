import AsyncHTTPClient
import Foundation
import NIOHTTP1
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md 1.2 "Reactions" and "Replies and threads", through the real HTTP, WebSocket, SSE and sync stack.
@Suite struct ReactionsAndThreadsTests {
    static func react(
        _ client: PigeonTestClient, _ device: TestDevice, _ conversationId: String, _ serverId: String, _ key: String, remove: Bool = false
    ) async throws -> HTTPAnswer {
        let encoded = key.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? key
        return try await client.request(
            remove ? .DELETE : .PUT, "/v1/conversations/\(conversationId)/messages/\(serverId)/reactions/\(encoded)", token: device.token)
    }

    static func reactions(_ answer: HTTPAnswer, sourceLocation: SourceLocation = #_sourceLocation) throws -> [Reaction] {
        #expect(answer.status == 200, "\(answer.text)", sourceLocation: sourceLocation)
        return try answer.decode(ReactionsResponse.self).reactions
    }

    static func sendReply(
        _ client: PigeonTestClient, _ device: TestDevice, _ conversationId: String, body: String, replyTo: String? = nil, threadRoot: String? = nil
    ) async throws -> HTTPAnswer {
        try await client.request(
            .POST, "/v1/conversations/\(conversationId)/messages", token: device.token,
            body: client.json(
                SendMessageRequest(
                    clientMessageId: newId(), type: "text", body: body, clientTimestamp: 1_763_700_000_000, replyTo: replyTo, threadRoot: threadRoot)))
    }

    static func reactionEvents(_ events: [ServerEvent]) -> [ReactionEvent] {
        events.compactMap { if case .reaction(_, let event) = $0 { event } else { nil } }
    }

    @Test func aReactionIsStoredAnsweredAndOnEveryStreamButIsNoMessage() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "lunch?")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let bobCursor = try await client.headCursor(bob)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobSocket.close() } }
            let bobEvents = try await TestSSE.open(port: client.port, token: bob.token)
            defer { Task { await bobEvents.close() } }

            let added = try Self.reactions(try await Self.react(client, alice, conversation.id, sent.serverId, "👍"))
            #expect(added == [Reaction(key: "👍", count: 1, me: true)])
            let live = await bobSocket.firstEvent { if case .reaction = $0 { true } else { false } }
            guard case .reaction(_, let event)? = live else { throw TestFailure("no reaction event on bob's WebSocket") }
            #expect(event.conversationId == conversation.id && event.serverId == sent.serverId && event.userId == "alice" && event.key == "👍")
            #expect(event.action == .add && event.reactions == [Reaction(key: "👍", count: 1, me: false)])
            let pushed = await bobEvents.first { $0.event == "reaction" }
            #expect(Self.reactionEvents([pushed?.serverEvent].compactMap { $0 }).first == event, "the same event over SSE")
            #expect(pushed?.id != nil, "SSE gives it an id: resumable")

            // A second add is answered the same and emits nothing; the removal does.
            #expect(try Self.reactions(try await Self.react(client, alice, conversation.id, sent.serverId, "👍")) == added)
            #expect(try Self.reactions(try await Self.react(client, alice, conversation.id, sent.serverId, "👍", remove: true)).isEmpty)
            #expect(try Self.reactions(try await Self.react(client, alice, conversation.id, sent.serverId, "👍", remove: true)).isEmpty)
            let synced = Self.reactionEvents(try await client.sync(bob, cursor: bobCursor).events)
            #expect(synced.map(\.action) == [.add, .remove], "once per change, in /v1/sync too")

            // Not a message: no seq, no unread, lastMessage as it was.
            _ = try Self.reactions(try await Self.react(client, bob, conversation.id, sent.serverId, "party_parrot"))
            let read = try await client.conversation(bob, conversation.id)
            #expect(read.lastSeq == 1 && read.unreadCount == 1 && read.lastMessage?.serverId == sent.serverId)
            #expect(read.lastMessage?.reactions == [Reaction(key: "party_parrot", count: 1, me: true)])
            let history = try await client.history(alice, conversation.id)
            #expect(history.messages.count == 1 && history.messages[0].reactions == [Reaction(key: "party_parrot", count: 1, me: false)])
            let who = try await client.request(.GET, "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/reactions", token: alice.token)
            #expect(who.status == 200, "\(who.text)")
            let users = try who.decode(ReactionUsersPage.self)
            #expect(users.users.map(\.userId) == ["bob"] && users.users[0].key == "party_parrot" && !users.hasMore)
        }
    }

    @Test func theReactOperationIsAckedOrRefusedOverTheWebSocket() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "hi")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobSocket.close() } }

            let reactId = newId()
            bobSocket.send(.react(conversationId: conversation.id, ReactRequest(serverId: sent.serverId, key: "❤️", action: .add, clientMessageId: reactId)))
            let ack = await bobSocket.first { $0.ack?.clientMessageId == reactId || $0.errorFrame?.clientMessageId == reactId }
            #expect(ack?.ack?.status == .stored && ack?.ack?.serverId == sent.serverId, "\(String(describing: ack))")
            let seen = await aliceSocket.firstEvent { if case .reaction = $0 { true } else { false } }
            #expect(Self.reactionEvents([seen].compactMap { $0 }).first?.reactions == [Reaction(key: "❤️", count: 1, me: false)])

            for (key, serverId, code) in [("not an emoji", sent.serverId, ErrorCode.invalidRequest), ("👍", newId(), .notFound), ("👍", "nope", .invalidRequest)] {
                let id = newId()
                bobSocket.send(.react(conversationId: conversation.id, ReactRequest(serverId: serverId, key: key, action: .add, clientMessageId: id)))
                let refused = await bobSocket.first { $0.errorFrame?.clientMessageId == id || $0.ack?.clientMessageId == id }
                #expect(refused?.errorFrame?.error.code == code, "\(key) \(serverId): \(String(describing: refused))")
            }
            #expect(try await client.history(alice, conversation.id).messages[0].reactions == [Reaction(key: "❤️", count: 1, me: false)])
        }
    }

    /// ❤, ❤️ and ❤ with extra selectors are one key, stored and answered as ❤️; the who-reacted list finds it under
    /// any of them; a key with an invisible override is refused.
    @Test func aReactionKeyIsStoredInOneForm() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob", "carol"], name: "g")
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "hi")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            #expect(try Self.reactions(try await Self.react(client, bob, conversation.id, sent.serverId, "❤")) == [Reaction(key: "❤️", count: 1, me: true)])
            let both = try Self.reactions(try await Self.react(client, carol, conversation.id, sent.serverId, "❤\u{FE0F}\u{FE0F}\u{FE0F}"))
            #expect(both == [Reaction(key: "❤️", count: 2, me: true)])
            let path = "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/reactions?key="
            let users = try await client.request(.GET, path + ("❤".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""), token: alice.token)
            #expect(users.status == 200 && users.text.contains("bob") && users.text.contains("carol"), "\(users.text)")
            expectError(try await Self.react(client, bob, conversation.id, sent.serverId, "👍\u{202E}"), 400, .invalidRequest, "an override")
            #expect(try Self.reactions(try await Self.react(client, bob, conversation.id, sent.serverId, "❤️", remove: true)) == [Reaction(key: "❤️", count: 1, me: false)])
        }
    }

    @Test func badReactionsGetTheirErrorAndChangeNothing() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "g")
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "hi")
            let gone = try await client.sendAccepted(alice, to: conversation.id, body: "oops")
            _ = try await client.waitForCount(alice, conversation.id, 2)
            #expect(try await EditDeleteTests.delete(client, alice, conversation.id, gone.serverId).status == 202)
            let added = try await client.request(.POST, "/v1/conversations/\(conversation.id)/members", token: alice.token, body: #"{"userIds":["dave"]}"#)
            #expect(added.status == 200, "\(added.text)")
            let messages = try await client.waitForCount(alice, conversation.id, 4)
            let system = try #require(messages.first { $0.type == "pigeon.members" })
            let cursor = try await client.headCursor(bob)

            let long = String(repeating: "a", count: 33)
            for key in ["👍👍", "Thumbs", "a b", long, "é", "%FF"] {
                expectError(try await Self.react(client, bob, conversation.id, sent.serverId, key), 400, .invalidRequest, "key \(key)")
            }
            // No key: the path of the who-reacted list, which only reads.
            expectError(try await Self.react(client, bob, conversation.id, sent.serverId, ""), 405, .methodNotAllowed, "no key")
            expectError(try await Self.react(client, bob, conversation.id, "not-a-uuid", "👍"), 400, .invalidRequest, "serverId")
            expectError(try await Self.react(client, bob, conversation.id, newId(), "👍"), 404, .notFound, "unknown message")
            expectError(try await Self.react(client, carol, conversation.id, sent.serverId, "👍"), 404, .notFound, "not a member")
            expectError(try await Self.react(client, bob, conversation.id, gone.serverId, "👍"), 409, .conflict, "deleted")
            expectError(try await Self.react(client, bob, conversation.id, system.serverId, "👍"), 409, .conflict, "pigeon.members")
            let path = "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/reactions"
            for query in ["limit=0", "limit=201", "key=NOPE", "after=a%20b"] {
                expectError(try await client.request(.GET, path + "?" + query, token: bob.token), 400, .invalidRequest, query)
            }
            expectError(try await client.request(.GET, path, token: carol.token), 404, .notFound, "list: not a member")
            #expect(Self.reactionEvents(try await client.sync(bob, cursor: cursor).events).isEmpty, "nothing was emitted")
            #expect(try await client.history(bob, conversation.id).messages.allSatisfy { $0.reactions.isEmpty })
        }
    }

    @Test func aReactionMissedWhileAwayArrivesOnceThroughTheCursor() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "hi")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let cursor = try await client.headCursor(bob)
            // Bob is away: the reactions wait in his log.
            _ = try Self.reactions(try await Self.react(client, alice, conversation.id, sent.serverId, "👍"))
            _ = try Self.reactions(try await Self.react(client, alice, conversation.id, sent.serverId, "🎉"))
            let socket = try await TestWebSocket.connect(port: client.port, token: bob.token, cursor: cursor)
            defer { Task { await socket.close() } }
            let frames = await socket.frames { frame in
                if case .reaction(_, let event)? = frame.event { event.key == "🎉" } else { false }
            }
            let replayed = Self.reactionEvents(frames.compactMap(\.event))
            #expect(replayed.map(\.key) == ["👍", "🎉"])
            #expect(replayed.last?.reactions == [Reaction(key: "👍", count: 1, me: false), Reaction(key: "🎉", count: 1, me: false)])
            let extra = await socket.firstEvent(timeout: .milliseconds(500)) { if case .reaction = $0 { true } else { false } }
            #expect(extra == nil, "each exactly once")
            let synced = try await client.sync(bob, cursor: cursor)
            #expect(Self.reactionEvents(synced.events).map(\.key) == ["👍", "🎉"])
            #expect(Self.reactionEvents(try await client.sync(bob, cursor: synced.cursor).events).isEmpty)
        }
    }

    @Test func repliesCarryTheirQuoteAndThreadsArePagedWithTheirSummary() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let root = try await client.sendAccepted(alice, to: conversation.id, body: "see you at noon at the usual place")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }

            let reply = try await Self.sendReply(client, bob, conversation.id, body: "ok", replyTo: root.serverId, threadRoot: root.serverId)
            #expect(reply.status == 202, "\(reply.text)")
            let live = await aliceSocket.firstEvent { $0.newMessage?.body == "ok" }?.newMessage
            let preview = ReplyPreview(serverId: root.serverId, senderId: "alice", type: "text", body: "see you at noon at the usual place", deleted: false)
            #expect(live?.replyPreview == preview && live?.replyTo == root.serverId && live?.threadRoot == root.serverId)
            // A thread reply over the WebSocket, and a plain quote outside the thread.
            let socketReply = newId()
            aliceSocket.send(
                .send(
                    conversationId: conversation.id,
                    SendMessageRequest(clientMessageId: socketReply, type: "text", body: "great", clientTimestamp: 1, threadRoot: root.serverId)))
            #expect(await aliceSocket.first { $0.ack?.clientMessageId == socketReply } != nil)
            #expect(try await Self.sendReply(client, bob, conversation.id, body: "quoting", replyTo: root.serverId).status == 202)
            let messages = try await client.waitForCount(alice, conversation.id, 4)
            #expect(messages[0].thread?.replyCount == 2 && messages[0].thread?.lastReplySenders == ["alice", "bob"])
            #expect(messages[3].replyPreview == preview && messages[3].threadRoot == nil)

            let page = try await client.request(.GET, "/v1/conversations/\(conversation.id)/threads/\(root.serverId)/messages?limit=1", token: bob.token)
            #expect(page.status == 200, "\(page.text)")
            let thread = try page.decode(ThreadPage.self)
            #expect(thread.root.serverId == root.serverId && thread.messages.map(\.body) == ["great"] && thread.hasMore)
            let all = try await client.request(.GET, "/v1/conversations/\(conversation.id)/threads/\(root.serverId)/messages?after=0", token: bob.token)
            #expect(try all.decode(ThreadPage.self).messages.map(\.body) == ["ok", "great"])
            // Every new field is present on the wire, null when empty.
            let raw = try #require(try await client.request(.GET, "/v1/conversations/\(conversation.id)/messages?after=0", token: bob.token).jsonObject)
            let first = try #require((raw["messages"] as? [[String: Any]])?.first)
            for key in ["reactions", "replyTo", "replyPreview", "threadRoot", "thread"] { #expect(first.keys.contains(key), "\(key)") }
            #expect(first["replyTo"] is NSNull && first["thread"] is [String: Any])
        }
    }

    @Test func badRepliesGetTheirErrorAndStoreNothing() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let other = try await client.createConversation(alice, members: ["carol"])
            let root = try await client.sendAccepted(alice, to: conversation.id, body: "root")
            let gone = try await client.sendAccepted(alice, to: conversation.id, body: "gone")
            let elsewhere = try await client.sendAccepted(alice, to: other.id, body: "elsewhere")
            _ = try await client.waitForCount(alice, conversation.id, 2)
            #expect(try await EditDeleteTests.delete(client, alice, conversation.id, gone.serverId).status == 202)
            _ = try await client.waitForCount(alice, conversation.id, 3)
            let inThread = try await Self.sendReply(client, bob, conversation.id, body: "r", threadRoot: root.serverId)
            let reply = try inThread.decode(SendMessageResponse.self)
            _ = try await client.waitForCount(alice, conversation.id, 4)

            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", replyTo: "nope"), 400, .invalidRequest, "replyTo not a UUID")
            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", threadRoot: "nope"), 400, .invalidRequest, "threadRoot not a UUID")
            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", replyTo: newId()), 404, .notFound, "unknown")
            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", replyTo: elsewhere.serverId), 404, .notFound, "another conversation")
            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", replyTo: gone.serverId), 409, .conflict, "deleted")
            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", threadRoot: gone.serverId), 409, .conflict, "deleted root")
            expectError(try await Self.sendReply(client, bob, conversation.id, body: "x", threadRoot: reply.serverId), 400, .invalidRequest, "nested thread")
            expectError(
                try await client.sendRaw(bob, to: conversation.id, json: #"{"clientMessageId":"\#(newId())","type":"text","body":"x","clientTimestamp":1,"replyTo":7}"#),
                400, .invalidRequest, "replyTo a number")
            let threadPath = "/v1/conversations/\(conversation.id)/threads"
            expectError(try await client.request(.GET, "\(threadPath)/\(newId())/messages", token: bob.token), 404, .notFound, "unknown thread")
            expectError(try await client.request(.GET, "\(threadPath)/nope/messages", token: bob.token), 400, .invalidRequest, "thread id")
            expectError(try await client.request(.GET, "\(threadPath)/\(root.serverId)/messages?after=1&before=3", token: bob.token), 400, .invalidRequest, "both")
            try await Task.sleep(for: .milliseconds(200))
            #expect(try await client.allMessages(alice, conversation.id).count == 4, "nothing refused was stored")
        }
    }
}
