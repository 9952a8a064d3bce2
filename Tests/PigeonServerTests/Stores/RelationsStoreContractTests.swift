import Foundation
import PigeonDomain
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Reactions, replies and threads (API.md 1.2) as the ``MessageStore`` contract states them, on both stores.
@Suite struct RelationsStoreContractTests {
    typealias Kind = StoreContractTests.Kind

    static func device(_ user: String, _ name: String = "phone") -> DeviceIdentity { DeviceIdentity(userId: user, deviceId: "\(user)-\(name)") }

    /// A processing item of `sender` that may quote a message and be in a thread, or be a delete of `deleting`.
    static func item(
        _ conversation: String, _ sender: String, body: String = "hi", replyTo: String? = nil, threadRoot: String? = nil, deleting: String? = nil
    ) -> ProcessingItem {
        let serverId = Identifiers.uuidV7()
        return ProcessingItem(
            entry: BufferEntry(
                id: serverId,
                message: BufferedMessage(
                    serverId: serverId, conversationId: conversation, senderId: sender, senderDeviceId: "\(sender)-phone", clientMessageId: newId(),
                    type: deleting == nil ? "text" : ServerMessageType.delete,
                    body: deleting.map { MessageLifecycle.deleteText(serverId: $0) } ?? body, clientTimestamp: 1, acceptedAt: WallClock.nowMillis(),
                    replyTo: replyTo, threadRoot: threadRoot),
                attempts: 0),
            isFinalAttempt: false)
    }

    /// Processes `item` alone and answers its serverId, checking it was stored.
    static func store(_ store: any MessageStore, _ item: ProcessingItem, sourceLocation: SourceLocation = #_sourceLocation) async throws -> String {
        let results = try await store.process([item])
        guard case .stored = results[0] else {
            Issue.record("not stored: \(results[0])", sourceLocation: sourceLocation)
            throw TestFailure("not stored")
        }
        return item.entry.message.serverId
    }

    /// The events of `device`'s stream from the start, decoded.
    static func stream(_ store: any MessageStore, _ device: DeviceIdentity) async throws -> [ServerEvent] {
        try await store.events(for: device, after: .start(partitions: store.eventPartitions), limit: 1000).map { event in
            try JSONDecoder().decode(ServerEvent.self, from: Data(event.frame(cursor: "c").utf8))
        }
    }

    static func reactionEvents(_ events: [ServerEvent]) -> [ReactionEvent] {
        events.compactMap { if case .reaction(_, let event) = $0 { event } else { nil } }
    }

    static func expectCode(_ code: ErrorCode, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> Void) async {
        do {
            try await body()
            Issue.record("expected \(code), got success", sourceLocation: sourceLocation)
        } catch let error as PigeonError {
            #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: Kind.allCases) func reactionsAreIdempotentAndEachReaderSeesItsOwn(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: nil).id
            let message = try await Self.store(store, Self.item(conversation, "alice", body: "lunch?"))
            _ = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "👍", action: .add, at: 10)
            let again = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "👍", action: .add, at: 11)
            #expect(again == [Reaction(key: "👍", count: 1, me: true)], "a second add changes nothing")
            _ = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "👍", action: .add, at: 12)
            let bobs = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "party_parrot", action: .add, at: 13)
            #expect(bobs == [Reaction(key: "👍", count: 2, me: true), Reaction(key: "party_parrot", count: 1, me: true)])
            let absent = try await store.react(conversationId: conversation, serverId: message, userId: "carol", key: "👍", action: .remove, at: 14)
            #expect(absent == [Reaction(key: "👍", count: 2, me: false), Reaction(key: "party_parrot", count: 1, me: false)])

            // Every read carries them as its reader sees them; no reader: `me` false everywhere.
            for (reader, expected) in [
                ("alice", [Reaction(key: "👍", count: 2, me: true), Reaction(key: "party_parrot", count: 1, me: false)]),
                ("carol", [Reaction(key: "👍", count: 2, me: false), Reaction(key: "party_parrot", count: 1, me: false)]),
            ] {
                let page = try await store.messages(conversationId: conversation, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: reader)
                #expect(page.messages.map(\.reactions) == [expected], "\(reader)'s history")
                #expect(try await store.conversation(id: conversation, for: reader)?.lastMessage?.reactions == expected, "\(reader)'s lastMessage")
                let stream = try await Self.stream(store, Self.device(reader, "laptop"))
                let new = stream.compactMap { if case .messageNew(_, let message) = $0 { message } else { nil } }
                #expect(new.map(\.reactions) == [expected], "\(reader)'s message.new read back from the log")
            }
            let anonymous = try await store.messages(conversationId: conversation, after: 0, before: nil, limit: 10)
            #expect(anonymous.messages[0].reactions.allSatisfy { !$0.me })

            // Three changes, each one event per member, none for the repeats; never a seq, never unread.
            let carol = Self.reactionEvents(try await Self.stream(store, Self.device("carol")))
            #expect(carol.map(\.action) == [.add, .add, .add])
            #expect(carol.map(\.userId) == ["alice", "bob", "bob"])
            #expect(carol.map(\.key) == ["👍", "👍", "party_parrot"])
            #expect(carol.allSatisfy { $0.reactions.allSatisfy { !$0.me } && $0.serverId == message && $0.conversationId == conversation })
            let alice = Self.reactionEvents(try await Self.stream(store, Self.device("alice", "laptop")))
            #expect(alice.last?.reactions == [Reaction(key: "👍", count: 2, me: true), Reaction(key: "party_parrot", count: 1, me: false)])
            #expect(alice.map(\.at) == [10, 12, 13])
            let read = try #require(try await store.conversation(id: conversation, for: "carol"))
            #expect(read.lastSeq == 1 && read.unreadCount == 1 && read.lastMessage?.serverId == message)
        }
    }

    @Test(arguments: Kind.allCases) func keysAreOrderedByFirstUseAndARemovedLastOneLeavesTheList(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil).id
            let message = try await Self.store(store, Self.item(conversation, "alice"))
            _ = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "❤️", action: .add, at: 5)
            _ = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "😂", action: .add, at: 6)
            var now = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "❤️", action: .add, at: 7)
            #expect(now == [Reaction(key: "❤️", count: 2, me: true), Reaction(key: "😂", count: 1, me: true)], "❤️ first used at 5 by bob")
            now = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "❤️", action: .remove, at: 8)
            #expect(now == [Reaction(key: "😂", count: 1, me: false), Reaction(key: "❤️", count: 1, me: false)], "keys by their oldest holder: ❤️ alice's at 7")
            now = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "❤️", action: .add, at: 9)
            #expect(now == [Reaction(key: "😂", count: 1, me: false), Reaction(key: "❤️", count: 2, me: true)], "❤️'s oldest holder now: alice at 7")
            _ = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "❤️", action: .remove, at: 10)
            now = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "❤️", action: .remove, at: 11)
            #expect(now == [Reaction(key: "😂", count: 1, me: true)], "a key nobody holds is left out")
            let events = Self.reactionEvents(try await Self.stream(store, Self.device("bob")))
            #expect(events.map(\.action) == [.add, .add, .add, .remove, .add, .remove, .remove])
            #expect(events.last?.reactions == [Reaction(key: "😂", count: 1, me: false)])
        }
    }

    @Test(arguments: Kind.allCases) func twoDevicesOfOneUserCountOnceAndTwoUsersCountTwo(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind, nodes: kind == .postgres ? 2 : 1) { stores, _ in
            let (first, second) = (stores[0], stores[stores.count - 1])
            let conversation = try await first.createConversation(creator: "alice", members: ["bob", "carol"], name: nil).id
            let message = try await Self.store(first, Self.item(conversation, "carol"))
            for round in 0..<5 {
                let key = "k\(round)"
                // Each round's key is first used after the previous round's, whichever device's add lands first.
                let at = Int64(10 * round)
                async let phone = first.react(conversationId: conversation, serverId: message, userId: "alice", key: key, action: .add, at: at + 1)
                async let laptop = second.react(conversationId: conversation, serverId: message, userId: "alice", key: key, action: .add, at: at + 2)
                async let bob = second.react(conversationId: conversation, serverId: message, userId: "bob", key: key, action: .add, at: at + 3)
                _ = try await (phone, laptop, bob)
            }
            let page = try await second.messages(conversationId: conversation, after: 0, before: nil, limit: 1, visibleFrom: 0, reader: "alice")
            #expect(page.messages[0].reactions == (0..<5).map { Reaction(key: "k\($0)", count: 2, me: true) })
            let events = Self.reactionEvents(try await Self.stream(first, Self.device("carol")))
            #expect(events.count == 10, "one event per change: alice once and bob once per key")
            #expect(events.last?.reactions == (0..<5).map { Reaction(key: "k\($0)", count: 2, me: false) })
        }
    }

    @Test(arguments: Kind.allCases) func refusedReactionsChangeNothing(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let owner = DeviceIdentity(userId: "alice", deviceId: "alice-phone")
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: "g").id
            let message = try await Self.store(store, Self.item(conversation, "alice"))
            // A member added later cannot see (or react to) what came before it.
            _ = try await store.changeMembership(conversationId: conversation, by: owner, .add(userIds: ["dave"], role: .member), maxMembers: 10)
            let system = try await store.messages(conversationId: conversation, after: 1, before: nil, limit: 1).messages[0]
            #expect(system.type == ServerMessageType.members)
            await Self.expectCode(.notFound) { _ = try await store.react(conversationId: conversation, serverId: message, userId: "dave", key: "👍", action: .add, at: 1) }
            await Self.expectCode(.notFound) { _ = try await store.react(conversationId: conversation, serverId: message, userId: "mallory", key: "👍", action: .add, at: 1) }
            await Self.expectCode(.notFound) { _ = try await store.react(conversationId: conversation, serverId: Identifiers.uuidV7(), userId: "bob", key: "👍", action: .add, at: 1) }
            await Self.expectCode(.conflict) { _ = try await store.react(conversationId: conversation, serverId: system.serverId, userId: "bob", key: "👍", action: .add, at: 1) }
            await Self.expectCode(.notFound) {
                _ = try await store.reactionUsers(conversationId: conversation, serverId: message, reader: "dave", key: nil, after: nil, limit: 10)
            }
            // A user holds at most 20 keys on a message; a message at most 50 distinct keys.
            for index in 0..<ReactionLimits.keysPerUser {
                _ = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "a\(index)", action: .add, at: 2)
            }
            await Self.expectCode(.conflict) { _ = try await store.react(conversationId: conversation, serverId: message, userId: "alice", key: "a99", action: .add, at: 3) }
            for index in 0..<ReactionLimits.keysPerUser {
                _ = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "b\(index)", action: .add, at: 4)
            }
            for index in 0..<(ReactionLimits.keysPerMessage - 2 * ReactionLimits.keysPerUser) {
                _ = try await store.react(conversationId: conversation, serverId: message, userId: "carol", key: "c\(index)", action: .add, at: 5)
            }
            await Self.expectCode(.conflict) { _ = try await store.react(conversationId: conversation, serverId: message, userId: "carol", key: "c99", action: .add, at: 6) }
            let shared = try await store.react(conversationId: conversation, serverId: message, userId: "carol", key: "a0", action: .add, at: 7)
            #expect(shared.count == ReactionLimits.keysPerMessage && shared.first == Reaction(key: "a0", count: 2, me: true), "an existing key is no new key")
            let events = Self.reactionEvents(try await Self.stream(store, Self.device("bob")))
            #expect(events.count == ReactionLimits.keysPerMessage + 1, "the refusals emitted nothing")
            let page = try await store.messages(conversationId: conversation, after: 0, before: nil, limit: 1, visibleFrom: 0, reader: "carol")
            #expect(page.messages[0].reactions == shared)
        }
    }

    @Test(arguments: Kind.allCases) func aDeletedMessageLosesItsReactionsAndALeaverKeepsItsOwn(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: "g").id
            let message = try await Self.store(store, Self.item(conversation, "alice"))
            let other = try await Self.store(store, Self.item(conversation, "alice", body: "second"))
            _ = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "👍", action: .add, at: 1)
            _ = try await store.react(conversationId: conversation, serverId: other, userId: "bob", key: "👍", action: .add, at: 1)
            _ = try await store.changeMembership(conversationId: conversation, by: Self.device("bob"), .remove(userId: "bob"), maxMembers: 10)
            let kept = try await store.react(conversationId: conversation, serverId: message, userId: "carol", key: "👍", action: .add, at: 2)
            #expect(kept == [Reaction(key: "👍", count: 2, me: true)], "bob left; his reaction still counts")
            await Self.expectCode(.notFound) { _ = try await store.react(conversationId: conversation, serverId: message, userId: "bob", key: "❤️", action: .add, at: 3) }
            _ = try await Self.store(store, Self.item(conversation, "alice", deleting: message))
            let page = try await store.messages(conversationId: conversation, after: 0, before: nil, limit: 2, visibleFrom: 0, reader: "carol")
            #expect(page.messages.map(\.reactions) == [[], [Reaction(key: "👍", count: 1, me: false)]], "only the deleted message's are gone")
            await Self.expectCode(.conflict) { _ = try await store.react(conversationId: conversation, serverId: message, userId: "carol", key: "👍", action: .remove, at: 4) }
            let users = try await store.reactionUsers(conversationId: conversation, serverId: message, reader: "carol", key: nil, after: nil, limit: 10)
            #expect(users.users.isEmpty)
        }
    }

    @Test(arguments: Kind.allCases) func reactionUsersArePagedByUserWithEveryKeyOfEach(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol", "dave"], name: "g").id
            let message = try await Self.store(store, Self.item(conversation, "alice"))
            for (user, keys) in [("dave", ["👍"]), ("bob", ["👍", "❤️"]), ("carol", ["❤️"]), ("alice", ["👍"])] {
                for key in keys { _ = try await store.react(conversationId: conversation, serverId: message, userId: user, key: key, action: .add, at: 100) }
            }
            let first = try await store.reactionUsers(conversationId: conversation, serverId: message, reader: "carol", key: nil, after: nil, limit: 2)
            #expect(first.users.map { "\($0.userId) \($0.key)" }.sorted() == ["alice 👍", "bob ❤️", "bob 👍"])
            #expect(first.users.map(\.userId) == ["alice", "bob", "bob"] && first.hasMore && first.users.allSatisfy { $0.at == 100 })
            let rest = try await store.reactionUsers(conversationId: conversation, serverId: message, reader: "carol", key: nil, after: "bob", limit: 2)
            #expect(rest.users.map(\.userId) == ["carol", "dave"] && !rest.hasMore)
            let thumbs = try await store.reactionUsers(conversationId: conversation, serverId: message, reader: "carol", key: "👍", after: nil, limit: 10)
            #expect(thumbs.users.map(\.userId) == ["alice", "bob", "dave"] && thumbs.users.allSatisfy { $0.key == "👍" } && !thumbs.hasMore)
        }
    }

    @Test(arguments: Kind.allCases) func repliesCarryTheirQuoteAndRootsTheirThreadSummary(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, sinks in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: "g").id
            let long = String(repeating: "é", count: 150)
            let root = try await Self.store(store, Self.item(conversation, "alice", body: long))
            let quote = try await Self.store(store, Self.item(conversation, "bob", body: "outside", replyTo: root))
            let replies = [
                try await Self.store(store, Self.item(conversation, "bob", body: "r1", replyTo: root, threadRoot: root)),
                try await Self.store(store, Self.item(conversation, "carol", body: "r2", threadRoot: root)),
                try await Self.store(store, Self.item(conversation, "bob", body: "r3", threadRoot: root)),
            ]
            // Replies in one batch count too, in order.
            let batch = [Self.item(conversation, "alice", body: "r4", threadRoot: root), Self.item(conversation, "alice", body: "r5", threadRoot: root)]
            _ = try await store.process(batch)
            let page = try await store.messages(conversationId: conversation, after: 0, before: nil, limit: 20, visibleFrom: 0, reader: "carol")
            let rootMessage = page.messages[0]
            let thread = try #require(rootMessage.thread)
            #expect(thread.replyCount == 5 && thread.lastReplySenders == ["alice", "bob", "carol"])
            #expect(thread.lastReplyAt == page.messages.last?.storedAt)
            let preview = ReplyPreview(serverId: root, senderId: "alice", type: "text", body: String(repeating: "é", count: 100), deleted: false)
            #expect(page.messages[1].replyTo == root && page.messages[1].threadRoot == nil && page.messages[1].replyPreview == preview)
            #expect(page.messages[2].replyPreview == preview && page.messages[2].threadRoot == root)
            #expect(page.messages[3].replyPreview == nil && page.messages[3].replyTo == nil && page.messages[3].thread == nil)
            // The live message.new of a reply carries its quote.
            let published = try await sinks[0].wait { events in events.contains { $0.payload.contains(quote) } }
            let live = try JSONDecoder().decode(
                ServerEvent.self, from: Data(try #require(published.first { $0.type == "message.new" && $0.payload.contains(quote) }).frame(cursor: "c").utf8))
            guard case .messageNew(_, let liveMessage) = live else { throw TestFailure("not message.new") }
            #expect(liveMessage.replyPreview == preview && liveMessage.reactions.isEmpty && liveMessage.thread == nil)

            // The thread page: root and replies ascending, paged.
            let threadPage = try #require(
                try await store.threadMessages(conversationId: conversation, root: root, after: nil, before: nil, limit: 3, visibleFrom: 0, reader: "bob"))
            #expect(threadPage.root.serverId == root && threadPage.root.thread?.replyCount == 5)
            #expect(threadPage.messages.map(\.body) == ["r3", "r4", "r5"] && threadPage.hasMore)
            let older = try #require(
                try await store.threadMessages(
                    conversationId: conversation, root: root, after: nil, before: threadPage.messages[0].seq, limit: 3, visibleFrom: 0, reader: "bob"))
            #expect(older.messages.map(\.serverId) == Array(replies.prefix(2)) && !older.hasMore)
            let after = try #require(
                try await store.threadMessages(conversationId: conversation, root: root, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "bob"))
            #expect(after.messages.map(\.body) == ["r1", "r2", "r3", "r4", "r5"] && !after.hasMore)
            #expect(try await store.threadMessages(conversationId: conversation, root: newId(), after: nil, before: nil, limit: 3, visibleFrom: 0, reader: "bob") == nil)
            #expect(try await store.threadMessages(conversationId: conversation, root: root, after: nil, before: nil, limit: 3, visibleFrom: 2, reader: "bob") == nil)

            // Deleting replies updates the root's summary; deleting the root keeps its thread and blanks its quotes.
            _ = try await Self.store(store, Self.item(conversation, "alice", deleting: batch[0].entry.message.serverId))
            _ = try await Self.store(store, Self.item(conversation, "alice", deleting: batch[1].entry.message.serverId))
            var summary = try #require(try await store.threadMessages(conversationId: conversation, root: root, after: 0, before: nil, limit: 1, visibleFrom: 0, reader: nil)?.root.thread)
            #expect(summary.replyCount == 3 && summary.lastReplySenders == ["bob", "carol"])
            _ = try await Self.store(store, Self.item(conversation, "alice", deleting: root))
            let afterDelete = try #require(try await store.threadMessages(conversationId: conversation, root: root, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: nil))
            summary = try #require(afterDelete.root.thread)
            #expect(summary.replyCount == 3 && afterDelete.root.deletedAt != nil)
            #expect(afterDelete.messages[0].replyPreview == ReplyPreview(serverId: root, senderId: "alice", type: "text", body: "", deleted: true))
            #expect(try await store.messageTarget(conversationId: conversation, serverId: replies[0])?.threadRoot == root)
        }
    }

    /// A recount after a delete names the three newest distinct senders however many replies the newest one sent.
    @Test(arguments: Kind.allCases) func aRecountedSummaryFindsSendersBehindALongRunOfOne(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: "g").id
            let root = try await Self.store(store, Self.item(conversation, "carol", body: "root"))
            _ = try await store.process([Self.item(conversation, "carol", threadRoot: root), Self.item(conversation, "bob", threadRoot: root)])
            let run = (0..<250).map { _ in Self.item(conversation, "alice", threadRoot: root) }
            _ = try await store.process(run)
            _ = try await Self.store(store, Self.item(conversation, "alice", deleting: run[249].entry.message.serverId))
            let page = try #require(try await store.threadMessages(conversationId: conversation, root: root, after: nil, before: nil, limit: 2, visibleFrom: 0, reader: nil))
            let summary = try #require(page.root.thread)
            #expect(summary.replyCount == 251)
            #expect(summary.lastReplySenders == ["alice", "bob", "carol"])
            #expect(summary.lastReplyAt == page.messages.last?.storedAt)
        }
    }

    @Test(arguments: Kind.allCases) func aReplyWhoseTargetIsGoneIsDeadLetteredWithItsRelations(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil).id
            let elsewhere = try await store.createConversation(creator: "alice", members: ["carol"], name: nil).id
            let foreign = try await Self.store(store, Self.item(elsewhere, "alice"))
            let orphan = Self.item(conversation, "alice", replyTo: foreign, threadRoot: nil)
            let results = try await store.process([orphan])
            guard case .deadLettered = results[0] else { throw TestFailure("expected a dead letter, got \(results[0])") }
            let letter = try #require(try await store.deadLetter(serverId: orphan.entry.message.serverId))
            #expect(letter.replyTo == foreign && letter.threadRoot == nil)
            #expect(try await store.deadLetters(limit: 10).first?.message.replyTo == foreign)
            #expect(try await store.messages(conversationId: conversation, after: 0, before: nil, limit: 10).messages.isEmpty)
        }
    }
}
