import Foundation
import NIOHTTP1
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.2, "Consent and blocking": blocks, the strangers limit and invitations, through the real HTTP, WebSocket,
/// SSE, sync and push stack, on every test backend.
@Suite struct BlockingTests {
    static func block(_ client: PigeonTestClient, _ device: TestDevice, _ userId: String, remove: Bool = false) async throws -> HTTPAnswer {
        try await client.request(remove ? .DELETE : .PUT, "/v1/blocks/\(userId)", token: device.token)
    }

    static func blocks(_ client: PigeonTestClient, _ device: TestDevice) async throws -> [Block] {
        let answer = try await client.request(.GET, "/v1/blocks", token: device.token)
        guard answer.status == 200 else { throw TestFailure("blocks: \(answer.status) \(answer.text)") }
        return try answer.decode(BlockList.self).blocks
    }

    static func create(_ client: PigeonTestClient, _ device: TestDevice, members: [String], name: String? = "g") async throws -> HTTPAnswer {
        try await client.request(.POST, "/v1/conversations", token: device.token, body: client.json(CreateConversationRequest(members: members, name: name)))
    }

    static func newMessages(_ events: [ServerEvent], in conversationId: String) -> [Message] {
        events.compactMap { if case .messageNew(_, let message) = $0, message.conversationId == conversationId { message } else { nil } }
    }

    // MARK: Routes

    /// The routes: `PUT` and `DELETE` answer `204` and are idempotent, `GET` lists oldest first; a malformed user id or
    /// the caller itself is `400` and changes nothing; no token is `401`.
    @Test func blockRoutesAreIdempotentAndRefuseBadInput() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            #expect(try await Self.block(client, alice, "zed").status == 204)
            let listed = try await Self.blocks(client, alice)
            #expect(listed.map(\.userId) == ["mallory", "zed"])
            #expect(listed.allSatisfy { abs($0.at - nowMillis()) < 60_000 })
            expectError(try await Self.block(client, alice, "alice"), 400, .invalidRequest, "blocking oneself")
            expectError(try await Self.block(client, alice, "bad%20id"), 400, .invalidRequest, "a malformed user id")
            expectError(try await Self.block(client, alice, String(repeating: "x", count: 65)), 400, .invalidRequest, "a user id too long")
            expectError(try await Self.block(client, alice, "alice", remove: true), 400, .invalidRequest, "unblocking oneself")
            expectError(try await client.request(.PUT, "/v1/blocks/mallory"), 401, .unauthorized, "no token")
            expectError(try await client.request(.GET, "/v1/blocks"), 401, .unauthorized, "no token")
            #expect(try await Self.blocks(client, alice).map(\.userId) == ["mallory", "zed"], "nothing changed")
            #expect(try await Self.block(client, alice, "zed", remove: true).status == 204)
            #expect(try await Self.block(client, alice, "zed", remove: true).status == 204)
            #expect(try await Self.blocks(client, alice).map(\.userId) == ["mallory"])
        }
    }

    // MARK: What a block hides

    /// Once alice blocks mallory, in a group both are in: mallory's messages, reactions and typing reach neither
    /// alice's WebSocket nor her SSE stream, nor her sync, history, unread count or last message, while bob gets
    /// everything; mallory's own copies of the hidden messages name alice in `withheldFrom` (✓ for good for her part,
    /// whatever alice's watermarks), and she sees alice's real watermarks. After the unblock, what mallory sends reaches
    /// alice and reaches ✓✓ and blue from her as usual; the hidden messages stay hidden and withheld.
    @Test func aBlockedUsersMessagesReactionsAndTypingNeverReachTheBlocker() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let mallory = try await client.register("mallory")
            let group = try await client.createConversation(bob, members: ["alice", "mallory"], name: "team")
            let before = try await client.sendAccepted(mallory, to: group.id, body: "before the block")
            _ = try await client.waitForCount(alice, group.id, 1)
            let aliceCursor = try await client.headCursor(alice)
            let malloryCursor = try await client.headCursor(mallory)
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }
            let aliceSSE = try await TestSSE.open(port: client.port, token: alice.token)
            defer { Task { await aliceSSE.close() } }
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobSocket.close() } }

            let hidden = try await client.sendAccepted(mallory, to: group.id, body: "you cannot see this")
            #expect(try await client.typing(mallory, group.id, active: true).status == 204)
            #expect(try await ReactionsAndThreadsTests.react(client, mallory, group.id, before.serverId, "👍").status == 200)
            let visible = try await client.sendAccepted(bob, to: group.id, body: "from bob")
            // Bob gets all of it; alice bob's message only, on either stream.
            // (bob's own message comes to his sending device as message.stored.)
            let bobFrames = await bobSocket.frames { frame in frame.event?.stored?.serverId == visible.serverId }
            let bobEvents = bobFrames.compactMap(\.event)
            #expect(Self.newMessages(bobEvents, in: group.id).map(\.serverId) == [hidden.serverId])
            #expect(bobEvents.contains { if case .typing(let typing) = $0 { typing.userId == "mallory" } else { false } })
            #expect(bobEvents.contains { if case .reaction(_, let reaction) = $0 { reaction.userId == "mallory" } else { false } })
            let aliceFrames = await aliceSocket.frames { frame in
                if case .messageNew(_, let message)? = frame.event { message.serverId == visible.serverId } else { false }
            }
            let aliceEvents = aliceFrames.compactMap(\.event) + (await aliceSocket.inbox.drain(for: .milliseconds(300))).compactMap(\.event)
            #expect(Self.newMessages(aliceEvents, in: group.id).map(\.serverId) == [visible.serverId])
            #expect(!aliceEvents.contains { if case .typing = $0 { true } else { false } }, "\(aliceEvents)")
            #expect(!aliceEvents.contains { if case .reaction = $0 { true } else { false } }, "\(aliceEvents)")
            let sseVisible = await aliceSSE.first { $0.serverEvent.map { Self.newMessages([$0], in: group.id).first?.serverId == visible.serverId } ?? false }
            #expect(sseVisible != nil)
            let sseAll = await aliceSSE.events.drain(for: .milliseconds(300))
            #expect(!sseAll.contains { $0.data.contains(hidden.serverId) || $0.event == "typing" || $0.event == "reaction" }, "\(sseAll)")
            // Replayed: sync from before the block, and a new WebSocket from that cursor.
            let synced = try await client.sync(alice, cursor: aliceCursor).events
            #expect(Self.newMessages(synced, in: group.id).map(\.serverId) == [visible.serverId])
            #expect(!synced.contains { if case .reaction = $0 { true } else { false } })
            let replay = try await TestWebSocket.connect(port: client.port, token: alice.token, cursor: aliceCursor)
            defer { Task { await replay.close() } }
            let replayed = await replay.frames { frame in
                if case .messageNew(_, let message)? = frame.event { message.serverId == visible.serverId } else { false }
            }
            #expect(Self.newMessages(replayed.compactMap(\.event), in: group.id).map(\.serverId) == [visible.serverId])
            // History, the conversation's unread count and last message.
            #expect(try await client.allMessages(alice, group.id).map(\.serverId) == [before.serverId, visible.serverId])
            #expect(try await client.allMessages(bob, group.id).count == 3)
            let hiddenLast = try await client.sendAccepted(mallory, to: group.id, body: "the newest, hidden too")
            _ = try await client.waitForCount(bob, group.id, 4)
            let seen = try await client.conversation(alice, group.id)
            #expect(seen.unreadCount == 2, "mallory's message before the block and bob's")
            #expect(seen.lastMessage?.serverId == visible.serverId)
            #expect(try await client.conversations(alice).first?.lastMessage?.serverId == visible.serverId)
            #expect(try await client.conversation(bob, group.id).lastMessage?.serverId == hiddenLast.serverId)

            // Ticks: alice marks everything she has read (seq 4); mallory is shown it, and her own copies of seqs 2 and
            // 4 (her stored events, her history) say they are withheld from alice, so they stay ✓ for alice's part.
            let aliceRead = try await client.receipt(alice, group.id, kind: .read, upToSeq: 4)
            #expect(try aliceRead.decode(ReceiptResponse.self).readSeq == 4, "alice's own watermark is what she asked")
            let malloryEvents = try await client.sync(mallory, cursor: malloryCursor).events
            let storedForMallory = malloryEvents.compactMap { event -> MessageStoredEvent? in
                if case .messageStored(_, let stored) = event { stored } else { nil }
            }
            #expect(storedForMallory.map(\.withheldFrom) == [["alice"], ["alice"]], "\(storedForMallory)")
            let malloryHistory = try await client.allMessages(mallory, group.id)
            #expect(malloryHistory.map(\.withheldFrom) == [nil, ["alice"], nil, ["alice"]])
            #expect(try await client.allMessages(bob, group.id).allSatisfy { $0.withheldFrom == nil }, "only the sender's copies")
            let malloryView = try await client.conversation(mallory, group.id).members.first { $0.userId == "alice" }
            #expect(malloryView?.readSeq == 4)
            #expect(try await client.conversation(bob, group.id).members.first { $0.userId == "alice" }?.readSeq == 4)
            #expect(try await Self.blocks(client, mallory).isEmpty)

            // Unblocked: from now on only.
            #expect(try await Self.block(client, alice, "mallory", remove: true).status == 204)
            let afterward = try await client.sendAccepted(mallory, to: group.id, body: "after the unblock")
            let arrived = await aliceSocket.firstEvent { event in Self.newMessages([event], in: group.id).first?.serverId == afterward.serverId }
            #expect(arrived != nil)
            #expect(try await client.allMessages(alice, group.id).map(\.serverId) == [before.serverId, visible.serverId, afterward.serverId])
            let afterwardSeq = try #require(try await client.allMessages(alice, group.id).last?.seq)
            #expect(try await client.receipt(alice, group.id, kind: .read, upToSeq: afterwardSeq).status == 200)
            #expect(try await client.conversation(mallory, group.id).members.first { $0.userId == "alice" }?.readSeq == afterwardSeq)
            #expect(try await client.allMessages(mallory, group.id).last?.withheldFrom == nil, "after the unblock: blue ✓✓ from alice")
        }
    }

    /// A reply quotes only what its reader may read: a third member's reply to a message hidden from alice by her block
    /// reaches her live, replayed and in history with its quote unavailable (no text), as does a reply to a message
    /// from before carol joined; bob, who saw both, gets the quotes whole. A later message alice may read is quoted
    /// whole to her.
    @Test func aReplyPreviewShowsOnlyWhatItsReaderMayRead() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let mallory = try await client.register("mallory")
            let carol = try await client.register("carol")
            let group = try await client.createConversation(bob, members: ["alice", "mallory"], name: "team")
            let early = try await client.sendAccepted(bob, to: group.id, body: "before carol came")
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            let hidden = try await client.sendAccepted(mallory, to: group.id, body: "secret text of mallory")
            _ = try await client.waitForCount(bob, group.id, 2)
            let added = try await client.request(.POST, "/v1/conversations/\(group.id)/members", token: bob.token, body: #"{"userIds":["carol"]}"#)
            #expect(added.status == 200 || added.status == 204, "\(added.status) \(added.text)")
            let aliceCursor = try await client.headCursor(alice)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }
            let carolSocket = try await TestWebSocket.connect(port: client.port, token: carol.token)
            defer { Task { await carolSocket.close() } }
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobSocket.close() } }

            let quotingHidden = try await ReactionsAndThreadsTests.sendReply(client, bob, group.id, body: "re: that", replyTo: hidden.serverId)
            #expect(quotingHidden.status == 202, "\(quotingHidden.text)")
            let quotingEarly = try await ReactionsAndThreadsTests.sendReply(client, bob, group.id, body: "re: early", replyTo: early.serverId)
            #expect(quotingEarly.status == 202, "\(quotingEarly.text)")
            let quotingHiddenId = try quotingHidden.decode(SendMessageResponse.self).serverId
            let quotingEarlyId = try quotingEarly.decode(SendMessageResponse.self).serverId
            let visible = try await client.sendAccepted(bob, to: group.id, body: "visible")
            try await waitUntil("bob's message is stored") {
                try await client.allMessages(mallory, group.id).contains { $0.serverId == visible.serverId }
            }
            let quotingVisible = try await ReactionsAndThreadsTests.sendReply(client, mallory, group.id, body: "re: visible", replyTo: visible.serverId)
            #expect(quotingVisible.status == 202)

            func previews(_ messages: [Message]) -> [String: ReplyPreview] {
                Dictionary(messages.compactMap { message in message.replyPreview.map { (message.serverId, $0) } }, uniquingKeysWith: { a, _ in a })
            }
            func expectUnavailable(_ preview: ReplyPreview?, _ what: Comment) {
                #expect(preview?.unavailable == true && preview?.body == "" && preview?.deleted == false, what)
            }
            // Live.
            let aliceLive = await aliceSocket.frames { frame in
                if case .messageNew(_, let message)? = frame.event { message.serverId == visible.serverId } else { false }
            }
            let aliceLivePreviews = previews(Self.newMessages(aliceLive.compactMap(\.event), in: group.id))
            expectUnavailable(aliceLivePreviews[quotingHiddenId], "alice's live quote of mallory's hidden message")
            #expect(aliceLivePreviews[quotingEarlyId]?.body == "before carol came", "alice joined before it")
            let carolLive = await carolSocket.frames { frame in
                if case .messageNew(_, let message)? = frame.event { message.replyTo == visible.serverId } else { false }
            }
            let carolLivePreviews = previews(Self.newMessages(carolLive.compactMap(\.event), in: group.id))
            expectUnavailable(carolLivePreviews[quotingEarlyId], "carol's live quote of a message from before she joined")
            expectUnavailable(carolLivePreviews[quotingHiddenId], "carol's live quote of a message from before she joined")
            #expect(carolLivePreviews.values.contains { $0.serverId == visible.serverId && $0.body == "visible" && !$0.unavailable })
            let bobLive = await bobSocket.frames { frame in
                if case .messageNew(_, let message)? = frame.event { message.replyTo == visible.serverId } else { false }
            }
            #expect(previews(Self.newMessages(bobLive.compactMap(\.event), in: group.id)).values.allSatisfy { !$0.unavailable })
            // Replayed and in history.
            let synced = previews(Self.newMessages(try await client.sync(alice, cursor: aliceCursor).events, in: group.id))
            expectUnavailable(synced[quotingHiddenId], "alice's synced quote")
            let aliceHistory = previews(try await client.allMessages(alice, group.id))
            expectUnavailable(aliceHistory[quotingHiddenId], "alice's history")
            #expect(aliceHistory[quotingEarlyId]?.body == "before carol came")
            let carolHistory = previews(try await client.allMessages(carol, group.id))
            expectUnavailable(carolHistory[quotingEarlyId], "carol's history")
            expectUnavailable(carolHistory[quotingHiddenId], "carol's history")
            let bobHistory = previews(try await client.allMessages(bob, group.id))
            #expect(bobHistory[quotingHiddenId]?.body == "secret text of mallory" && bobHistory[quotingEarlyId]?.body == "before carol came")
            // Nothing of the hidden text in any of alice's or carol's answers.
            let aliceRaw = try await client.history(alice, group.id)
            #expect(!"\(aliceRaw)".contains("secret text"))
            let carolRaw = try await client.request(.GET, "/v1/conversations/\(group.id)/messages?after=0&limit=500", token: carol.token)
            #expect(!carolRaw.text.contains("secret text") && !carolRaw.text.contains("before carol came"), "\(carolRaw.text)")
            #expect(carolRaw.text.contains(#""unavailable":true"#))
        }
    }

    /// A blocked user's edit of a message the blocker could read never reaches her in any form: her history, her last
    /// message, a replay of the original message and another member's quote of it keep the text she was shown (bob gets
    /// the edit); after the unblock, the next edit reaches her; a delete erases every kept version.
    @Test func aBlockedUsersEditOfAnOldMessageNeverReachesTheBlocker() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let mallory = try await client.register("mallory")
            let group = try await client.createConversation(bob, members: ["alice", "mallory"], name: "team")
            let aliceCursor = try await client.headCursor(alice)
            let old = try await client.sendAccepted(mallory, to: group.id, body: "the original words")
            let other = try await client.sendAccepted(mallory, to: group.id, body: "another one")
            _ = try await client.waitForCount(alice, group.id, 2)
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            #expect(try await EditDeleteTests.edit(client, mallory, group.id, old.serverId, body: "rewritten secret").status == 202)
            #expect(try await EditDeleteTests.edit(client, mallory, group.id, other.serverId, body: "rewritten too").status == 202)
            try await waitUntil("bob reads both edits") {
                let messages = try await client.allMessages(bob, group.id)
                return messages.first { $0.serverId == old.serverId }?.body == "rewritten secret"
                    && messages.first { $0.serverId == other.serverId }?.body == "rewritten too"
            }
            #expect(try await EditDeleteTests.edit(client, mallory, group.id, old.serverId, body: "rewritten twice").status == 202)
            try await waitUntil("bob reads the second edit") {
                try await client.allMessages(bob, group.id).first { $0.serverId == old.serverId }?.body == "rewritten twice"
            }

            let history = try await client.allMessages(alice, group.id)
            let seen = history.first { $0.serverId == old.serverId }
            #expect(seen?.body == "the original words" && seen?.editedAt == nil, "\(String(describing: seen))")
            #expect(try await client.conversation(alice, group.id).lastMessage?.body == "another one")
            #expect(try await client.conversations(alice).first?.lastMessage?.body == "another one")
            let replayed = Self.newMessages(try await client.sync(alice, cursor: aliceCursor).events, in: group.id)
            #expect(replayed.map(\.body) == ["the original words", "another one"], "\(replayed.map(\.body))")
            // A quote of it by bob: alice reads her version, live and in history; bob the edited one.
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }
            let reply = try await ReactionsAndThreadsTests.sendReply(client, bob, group.id, body: "what?", replyTo: old.serverId)
            let replyId = try reply.decode(SendMessageResponse.self).serverId
            let live = await aliceSocket.firstEvent { Self.newMessages([$0], in: group.id).first?.serverId == replyId }
            #expect(Self.newMessages(live.map { [$0] } ?? [], in: group.id).first?.replyPreview?.body == "the original words")
            _ = try await client.waitForCount(bob, group.id, 3)
            #expect(try await client.allMessages(alice, group.id).first { $0.serverId == replyId }?.replyPreview?.body == "the original words")
            #expect(try await client.allMessages(bob, group.id).first { $0.serverId == replyId }?.replyPreview?.body == "rewritten twice")
            let raw = try await client.request(.GET, "/v1/conversations/\(group.id)/messages?after=0&limit=500", token: alice.token)
            #expect(!raw.text.contains("rewritten"), "\(raw.text)")

            // A delete (hidden from alice too) erases what she kept: the message reads deleted, without text.
            #expect(try await EditDeleteTests.delete(client, mallory, group.id, other.serverId).status == 202)
            try await waitUntil("the delete is stored") {
                try await client.allMessages(bob, group.id).first { $0.serverId == other.serverId }?.deletedAt != nil
            }
            let deleted = try await client.allMessages(alice, group.id).first { $0.serverId == other.serverId }
            #expect(deleted?.deletedAt != nil && deleted?.body == "", "\(String(describing: deleted))")

            // Unblocked: the next edit reaches alice, and her history reads it.
            #expect(try await Self.block(client, alice, "mallory", remove: true).status == 204)
            #expect(try await EditDeleteTests.edit(client, mallory, group.id, old.serverId, body: "said in the open").status == 202)
            try await waitUntil("alice reads the open edit") {
                try await client.allMessages(alice, group.id).first { $0.serverId == old.serverId }?.body == "said in the open"
            }
        }
    }

    /// A blocked user's message sends the blocker no push; another member's does.
    @Test func aBlockedUsersMessageSendsTheBlockerNoPush() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: PushTests.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let mallory = try await client.register("mallory")
            try await PushTests.registerPush(client, alice, pushkey: "alice-phone")
            let group = try await client.createConversation(bob, members: ["alice", "mallory"], name: "team")
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            _ = try await client.sendAccepted(mallory, to: group.id, body: "hidden")
            _ = try await client.waitForCount(bob, group.id, 1)
            try await PushTests.expectStill(gateway, 0)
            let visible = try await client.sendAccepted(bob, to: group.id, body: "visible")
            try await waitUntil("bob's message was pushed") { gateway.received.count >= 1 }
            try await PushTests.expectStill(gateway, 1)
            #expect(gateway.received.first?.eventId == visible.serverId)
            #expect(gateway.received.first?.unread == 1, "the hidden message is not counted")
        }
    }

    /// A blocked user's add of the blocker, at creation or later, is `403` and creates nothing.
    @Test func aBlockedUserCannotAddTheBlocker() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let mallory = try await client.register("mallory")
            _ = try await client.register("bob")
            #expect(try await Self.block(client, alice, "mallory").status == 204)
            expectError(try await Self.create(client, mallory, members: ["alice"], name: nil), 403, .forbidden, "a direct conversation")
            expectError(try await Self.create(client, mallory, members: ["bob", "alice"]), 403, .forbidden, "a group")
            #expect(try await client.conversations(mallory).isEmpty, "nothing was created")
            let group = try await client.createConversation(mallory, members: ["bob"], name: "g")
            let add = try await client.request(.POST, "/v1/conversations/\(group.id)/members", token: mallory.token, body: #"{"userIds":["alice"]}"#)
            expectError(add, 403, .forbidden, "a member add")
            #expect(add.text.contains("does not accept invitations from you"))
            #expect(try await client.conversation(mallory, group.id).members.map(\.userId) == ["bob", "mallory"])
            #expect(try await client.conversations(alice).isEmpty)
            // alice may still add mallory herself.
            #expect(try await Self.create(client, alice, members: ["mallory"], name: nil).status == 201)
        }
    }

    // MARK: Strangers

    /// At most `--stranger-adds-per-hour` (50) strangers an hour: the 51st is `429` with `Retry-After`, and a request
    /// that would pass the limit creates nothing; a fresh account asking for 999 strangers at once gets `429`.
    @Test func theStrangersLimitRefusesThe51stStrangerAnd999AtOnce() async throws {
        try await withTestServer { client in
            let probe = try await client.register("probe")
            let strangers = (1...999).map { "s\($0)" }
            expectError(try await Self.create(client, probe, members: strangers), 429, .rateLimited, "999 strangers")
            #expect(try await client.conversations(probe).isEmpty)

            let adder = try await client.register("adder")
            expectError(try await Self.create(client, adder, members: Array(strangers.prefix(60))), 429, .rateLimited, "60 strangers")
            #expect(try await Self.create(client, adder, members: Array(strangers.prefix(50))).status == 201)
            let over = try await Self.create(client, adder, members: ["s51"], name: nil)
            expectError(over, 429, .rateLimited, "the 51st stranger")
            #expect((over.headers["retry-after"].flatMap(Int.init) ?? 0) > 3_000, "the hour's first add leaves the window in about an hour")
            // Contacts are no strangers.
            #expect(try await Self.create(client, adder, members: ["s1", "s2"]).status == 201)
            #expect(try await client.conversations(adder).count == 2)
        }
    }

    /// `--stranger-adds-per-hour 0` lifts the limit.
    @Test func noStrangersLimitWhenItIsZero() async throws {
        try await withTestServer(configure: { $0.appBackend.strangerAddsPerHour = 0 }) { client in
            let adder = try await client.register("adder")
            #expect(try await Self.create(client, adder, members: (1...200).map { "s\($0)" }).status == 201)
        }
    }

    // MARK: Invitations

    /// A re-invitation after a decline counts against the strangers limit again: with a limit of 3, mallory invites
    /// bob, he declines, twice more; the fourth invitation in the hour is `429` and creates nothing. Adding the same
    /// user twice while the first invitation stands still counts once.
    @Test func reinvitingAfterADeclineCountsAgainstTheStrangersLimit() async throws {
        try await withTestServer(configure: { configuration in
            configuration.appBackend.consent = .invites
            configuration.appBackend.strangerAddsPerHour = 3
        }) { client in
            let mallory = try await client.register("mallory")
            let bob = try await client.register("bob")
            _ = try await client.register("carol")
            let standing = try await client.createConversation(mallory, members: ["carol"], name: "one")
            _ = try await client.createConversation(mallory, members: ["carol"], name: "two")
            #expect(standing.members.first { $0.userId == "carol" }?.membership == .invited, "carol counted once, not twice")
            for round in 1...2 {
                let group = try await client.createConversation(mallory, members: ["bob"], name: "again \(round)")
                let declined = try await client.request(.POST, "/v1/conversations/\(group.id)/decline", token: bob.token)
                #expect(declined.status == 204, "\(declined.text)")
            }
            let refused = try await Self.create(client, mallory, members: ["bob"], name: "once more")
            expectError(refused, 429, .rateLimited, "a fourth stranger add in the hour: carol, bob, bob again")
            #expect(try await client.request(.GET, "/v1/conversations?membership=invited", token: bob.token).decode(ConversationList.self)
                .conversations.isEmpty)
        }
    }

    /// `--consent invites`: a stranger's add invites. The invited user's devices get `conversation.created`, and may read
    /// the history, but get no `message.new`, no push and no unread count, and the conversation is among its
    /// invitations only; a message waits ✓ for it. Accepting makes it a member like any; declining leaves.
    @Test func invitationsWaitForAcceptanceAndDeclineLeaves() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: { configuration in
            PushTests.pushing(to: gateway)(&configuration)
            configuration.appBackend.consent = .invites
        }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let bobPhone = try await client.register("bob", existing: bob)
            try await PushTests.registerPush(client, bobPhone, pushkey: "bob-phone")
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobSocket.close() } }

            let group = try await client.createConversation(alice, members: ["bob", "carol"], name: "party")
            #expect(group.members.map(\.membership) == [.joined, .invited, .invited])
            let created = await bobSocket.firstEvent { if case .conversationCreated(_, let c) = $0 { c.id == group.id } else { false } }
            #expect(created != nil)
            let sent = try await client.sendAccepted(alice, to: group.id, body: "hello")
            _ = try await client.waitForCount(alice, group.id, 1)
            let early = await bobSocket.inbox.drain(for: .milliseconds(500)).compactMap(\.event)
            #expect(Self.newMessages(early, in: group.id).isEmpty, "\(early)")
            try await PushTests.expectStill(gateway, 0)
            #expect(try await client.allMessages(bob, group.id).map(\.serverId) == [sent.serverId], "an invited member reads the history")
            #expect(try await client.conversation(bob, group.id).unreadCount == 0)
            #expect(try await client.conversations(bob).isEmpty, "the default list shows joined conversations only")
            let invitations = try await client.request(.GET, "/v1/conversations?membership=invited", token: bob.token)
            #expect(try invitations.decode(ConversationList.self).conversations.map(\.id) == [group.id])
            expectError(try await client.request(.GET, "/v1/conversations?membership=maybe", token: bob.token), 400, .invalidRequest, "membership")
            // ✓, not ✓✓: bob's delivered watermark does not move while he is invited.
            _ = try await client.receipt(bob, group.id, kind: .delivered, upToSeq: 1)
            #expect(try await client.conversation(alice, group.id).members.first { $0.userId == "bob" }?.deliveredSeq == 0)

            // An invited member reads, but sends and reacts only once it accepts (and nothing is stored meanwhile).
            expectError(try await client.send(bob, to: group.id, body: "too early"), 403, .forbidden, "an invited member's send")
            let reaction = try await client.request(
                .PUT, "/v1/conversations/\(group.id)/messages/\(sent.serverId)/reactions/ok", token: bob.token)
            expectError(reaction, 403, .forbidden, "an invited member's reaction")
            #expect(try await client.allMessages(alice, group.id).count == 1)

            let accepted = try await client.request(.POST, "/v1/conversations/\(group.id)/accept", token: bob.token)
            #expect(accepted.status == 200, "\(accepted.text)")
            #expect(try accepted.decode(Conversation.self).members.first { $0.userId == "bob" }?.membership == .joined)
            #expect(try await client.conversations(bob).map(\.id) == [group.id])
            let next = try await client.sendAccepted(alice, to: group.id, body: "welcome")
            _ = try await client.sendAccepted(bob, to: group.id, body: "thanks")
            let arrived = await bobSocket.firstEvent { Self.newMessages([$0], in: group.id).first?.serverId == next.serverId }
            #expect(arrived != nil, "a member like any once accepted")
            try await waitUntil("the accepted member's offline phone was pushed") { gateway.received.count >= 1 }
            #expect(gateway.received.first?.eventId == next.serverId)

            expectError(try await client.request(.POST, "/v1/conversations/\(group.id)/decline", token: bob.token), 409, .conflict, "a joined member")
            #expect(try await client.request(.POST, "/v1/conversations/\(group.id)/decline", token: carol.token).status == 204)
            let members = try await client.conversation(alice, group.id).members.map(\.userId)
            #expect(members == ["alice", "bob"])
            let left = try await client.allMessages(alice, group.id).last
            #expect(left?.type == "pigeon.members" && left?.body.contains("\"left\"") == true)
            expectError(try await client.request(.POST, "/v1/conversations/\(group.id)/accept", token: carol.token), 404, .notFound, "after declining")
        }
    }

    /// An invited member gets only its invitation until it accepts: none of a stranger's live reactions, typing or
    /// receipts reach it (they did: 100 reaction events for 100 toggles); once it accepts, they do. A device's
    /// reactions are rate-limited.
    @Test func anInvitedMemberGetsOnlyItsInvitation() async throws {
        try await withTestServer(configure: { configuration in
            configuration.appBackend.consent = .invites
            configuration.abuseLimits.reactionBurst = 20
            configuration.abuseLimits.reactionsPerSecond = 0.01
        }) { client in
            let mallory = try await client.register("mallory")
            let alice = try await client.register("alice")
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceSocket.close() } }
            let conversation = try await client.createConversation(mallory, members: ["alice"])
            #expect(conversation.members.first { $0.userId == "alice" }?.membership == .invited)
            _ = await aliceSocket.firstEvent { if case .conversationCreated = $0 { true } else { false } }
            let sent = try await client.sendAccepted(mallory, to: conversation.id, body: "hi")
            _ = try await client.waitForCount(mallory, conversation.id, 1)
            var limited = 0
            for index in 0..<30 {
                let answer = try await ReactionsAndThreadsTests.react(client, mallory, conversation.id, sent.serverId, "👍", remove: index % 2 == 1)
                if answer.status == 429 { limited += 1 } else { #expect(answer.status == 200, "\(answer.text)") }
            }
            #expect(limited == 10, "a device's reactions past its burst of 20 are refused 429 (\(limited))")
            _ = try await client.typing(mallory, conversation.id, active: true)
            _ = try await client.receipt(mallory, conversation.id, kind: .read, upToSeq: 1)
            // The probe's answer comes after anything queued for alice before it.
            try await aliceSocket.waitUntilLive()
            let seen = await aliceSocket.inbox.drain(for: .milliseconds(500))
            let leaked = seen.compactMap(\.event).filter {
                switch $0 {
                case .reaction, .receipt, .typing: true
                default: false
                }
            }
            #expect(leaked.isEmpty, "an invited member got \(leaked.count) live events: \(leaked.prefix(3))")

            // Accepted: a member like any.
            #expect(try await client.request(.POST, "/v1/conversations/\(conversation.id)/accept", token: alice.token).status == 200)
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await socket.close() } }
            _ = try await client.typing(mallory, conversation.id, active: true)
            #expect(await socket.firstEvent { $0.typing?.userId == "mallory" } != nil, "typing reaches a joined member")
        }
    }
}
