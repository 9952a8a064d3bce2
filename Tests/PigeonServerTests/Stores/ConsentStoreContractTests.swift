import Foundation
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``BlockStore`` contract (API.md 1.2, "Consent and blocking") on both stores
/// (``StoreContractTests/withStores(_:nodes:faultInjector:_:)``): what a block hides and from whom, honest watermarks, the
/// strangers limit across nodes, invitations.
@Suite struct ConsentStoreContractTests {
    typealias Kind = StoreContractTests.Kind
    static let alice = DeviceIdentity(userId: "alice", deviceId: "alice-phone")

    static func newSeqs(_ events: [StoredEvent], to user: String, in conversationId: String) -> [Int64] {
        events.filter { $0.type == "message.new" && $0.userId == user && $0.payload.contains(conversationId) }.compactMap { event in
            guard let range = event.payload.range(of: "\"seq\":") else { return nil }
            return Int64(event.payload[range.upperBound...].prefix { $0.isNumber })
        }
    }

    static func receipts(_ events: [StoredEvent], to user: String, of member: String) throws -> [ReceiptEvent] {
        try events.filter { $0.type == "receipt" && $0.userId == user }.compactMap { event in
            guard case .receipt(_, let receipt) = try JSONDecoder().decode(ServerEvent.self, from: Data(event.frame(cursor: "c").utf8)) else { return nil }
            return receipt.userId == member ? receipt : nil
        }
    }

    /// A message of a blocked sender writes no `message.new` for the blocker and is left out of its history, unread
    /// count and last message; the blocker's watermarks, as the blocked sender sees them, stop below it; an unblock
    /// shows what follows, never what was hidden. On PostgreSQL the second batch is planned on the node's caches (the
    /// one-statement path), whose check sends it to the locking path once the block exists.
    @Test(arguments: Kind.allCases) func aBlockedSendersMessagesAreHiddenFromTheBlockerOnlyAndForGood(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, sinks in
            let store = stores[0]
            let group = try await store.createConversation(creator: "bob", members: ["alice", "mallory"], name: "g")
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id, sender: "mallory", device: "m")])) == [1])
            try await store.block("mallory", by: "alice", at: 1_000)
            try await store.block("mallory", by: "alice", at: 2_000)
            #expect(try await store.blocks(of: "alice") == [Block(userId: "mallory", at: 1_000)], "a repeat keeps the first time")
            #expect(try await store.blockers(of: "mallory") == ["alice"])
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id, sender: "mallory", device: "m")])) == [2])
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id, sender: "bob", device: "b")])) == [3])
            let events = try await sinks[0].wait { Self.newSeqs($0, to: "bob", in: group.id).count == 3 }
            #expect(Self.newSeqs(events, to: "alice", in: group.id) == [1, 3], "seq 2 is hidden from alice")
            #expect(Self.newSeqs(events, to: "bob", in: group.id) == [1, 2, 3])
            #expect(try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "alice").messages.map(\.seq) == [1, 3])
            #expect(try await store.messages(conversationId: group.id, after: nil, before: nil, limit: 10, visibleFrom: 0, reader: "alice").messages.map(\.seq) == [1, 3])
            #expect(try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "bob").messages.map(\.seq) == [1, 2, 3])
            // Reacting to, or listing the reactions of, a message hidden from her: not found.
            let hiddenId = try #require(
                try await store.messages(conversationId: group.id, after: 1, before: nil, limit: 1, visibleFrom: 0, reader: "bob").messages.first?.serverId)
            for attempt in 0..<2 {
                do {
                    if attempt == 0 {
                        _ = try await store.react(conversationId: group.id, serverId: hiddenId, userId: "alice", key: "ok", action: .add, at: 1)
                    } else {
                        _ = try await store.reactionUsers(conversationId: group.id, serverId: hiddenId, reader: "alice", key: nil, after: nil, limit: 10)
                    }
                    Issue.record("alice reached a message hidden from her (\(attempt))")
                } catch let error as PigeonError {
                    #expect(error.code == .notFound)
                }
            }
            let seenByAlice = try #require(try await store.conversation(id: group.id, for: "alice"))
            #expect(seenByAlice.unreadCount == 2, "mallory's first and bob's")
            #expect(try await store.conversation(id: group.id, for: "bob")?.unreadCount == 2)

            // Mallory's own copies of seq 2 name alice as withheld (her ticks never count alice for it); no one else's do.
            let stored = try await sinks[0].wait { events in events.contains { $0.type == "message.stored" && $0.payload.contains(#""seq":2"#) } }
            #expect(stored.contains { $0.type == "message.stored" && $0.payload.contains(#""seq":2"#) && $0.payload.contains(#""withheldFrom":["alice"]"#) })
            #expect(!stored.contains { $0.type == "message.stored" && $0.payload.contains(#""seq":3"#) && $0.payload.contains("withheldFrom") })
            let mallorys = try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "mallory").messages
            #expect(mallorys.map(\.withheldFrom) == [nil, ["alice"], nil])
            let bobs = try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "bob").messages
            #expect(bobs.allSatisfy { $0.withheldFrom == nil }, "only the sender's copies say it")

            // alice's delivered watermark moves to 3: every member, mallory too, is shown 3 (mallory's seq 2 stays ✓ for
            // alice's part through its withheldFrom, not through a watermark held below it).
            _ = try await store.recordReceipt(conversationId: group.id, userId: "alice", kind: .delivered, upToSeq: 3)
            let afterReceipt = try await sinks[0].wait { events in events.contains { $0.type == "receipt" && $0.userId == "mallory" } }
            #expect(try Self.receipts(afterReceipt, to: "bob", of: "alice").map(\.upToSeq) == [3])
            #expect(try Self.receipts(afterReceipt, to: "mallory", of: "alice").map(\.upToSeq) == [3])
            let seenByMallory = try #require(try await store.conversation(id: group.id, for: "mallory"))
            #expect(seenByMallory.members.first { $0.userId == "alice" }?.deliveredSeq == 3)
            #expect(try await store.conversation(id: group.id, for: "bob")?.members.first { $0.userId == "alice" }?.deliveredSeq == 3)

            // After the unblock: mallory's next message reaches alice; seq 2 stays hidden (and withheld).
            try await store.unblock("mallory", by: "alice")
            try await store.unblock("mallory", by: "alice")
            #expect(try await store.blocks(of: "alice").isEmpty)
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id, sender: "mallory", device: "m")])) == [4])
            let later = try await sinks[0].wait { Self.newSeqs($0, to: "alice", in: group.id).count == 3 }
            #expect(Self.newSeqs(later, to: "alice", in: group.id) == [1, 3, 4])
            #expect(try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "alice").messages.map(\.seq) == [1, 3, 4])
            _ = try await store.recordReceipt(conversationId: group.id, userId: "alice", kind: .read, upToSeq: 4)
            let read = try await sinks[0].wait { events in (try? Self.receipts(events, to: "bob", of: "alice").count) == 3 }
            #expect(try Self.receipts(read, to: "bob", of: "alice").map(\.upToSeq) == [3, 4, 4])
            #expect(try Self.receipts(read, to: "mallory", of: "alice").map(\.upToSeq) == [3, 4, 4], "her seq 4 reaches blue ✓✓")
            #expect(try await store.conversation(id: group.id, for: "mallory")?.members.first { $0.userId == "alice" }?.readSeq == 4)
            let afterUnblock = try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "mallory")
            #expect(afterUnblock.messages.map(\.withheldFrom) == [nil, ["alice"], nil, nil])
        }
    }

    /// A block made through one node hides what another node stores next, even when that node planned its batch on
    /// warm caches (PostgreSQL's one-statement path refuses it and the locking path reads the block), and typing's
    /// cached block set on the other node is forgotten at once.
    @Test(arguments: Kind.allCases) func aBlockMadeOnOneNodeHoldsOnAnotherAtOnce(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind, nodes: 2) { stores, sinks in
            let (first, second) = (stores[0], stores[stores.count - 1])
            let group = try await first.createConversation(creator: "bob", members: ["alice", "mallory"], name: "g")
            #expect(StoreContractTests.seqs(try await second.process([StoreContractTests.item(conversation: group.id, sender: "mallory", device: "m")])) == [1])
            #expect(StoreContractTests.seqs(try await second.process([StoreContractTests.item(conversation: group.id, sender: "mallory", device: "m")])) == [2])
            #expect(try await second.blockers(of: "mallory").isEmpty)
            try await first.block("mallory", by: "alice", at: 1)
            #expect(StoreContractTests.seqs(try await second.process([StoreContractTests.item(conversation: group.id, sender: "mallory", device: "m")])) == [3])
            #expect(try await second.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "alice").messages.map(\.seq) == [1, 2])
            let sink = sinks[sinks.count - 1]
            let events = try await sink.wait { Self.newSeqs($0, to: "bob", in: group.id).count == 3 }
            #expect(Self.newSeqs(events, to: "alice", in: group.id) == [1, 2])
            let deadline = ContinuousClock.now + .seconds(10)
            while try await second.blockers(of: "mallory").isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(try await second.blockers(of: "mallory") == ["alice"], "the other node's cached block set was forgotten")
        }
    }

    /// A user cannot add a user who blocks it; the strangers a user adds are counted in the store, on every node, and
    /// a creation that would pass the limit creates nothing.
    @Test(arguments: Kind.allCases) func addsOfABlockerAreRefusedAndStrangersAreCountedOnEveryNode(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind, nodes: 2) { stores, _ in
            for store in stores { store.setConsentRules(ConsentRules(invitations: false, strangerAddsPerHour: 3)) }
            let (first, second) = (stores[0], stores[stores.count - 1])
            try await first.block("mallory", by: "alice", at: 1)
            await #expect(throws: PigeonError.self) { try await second.createConversation(creator: "mallory", members: ["alice"], name: nil) }
            do {
                _ = try await second.createConversation(creator: "mallory", members: ["alice", "bob"], name: "g")
                Issue.record("mallory added alice")
            } catch let error as PigeonError {
                #expect(error.code == .forbidden)
            }
            #expect(try await second.conversations(of: "mallory", before: nil, limit: 10).conversations.isEmpty, "nothing was created")

            _ = try await first.createConversation(creator: "zoe", members: ["s1", "s2"], name: "a")
            do {
                _ = try await second.createConversation(creator: "zoe", members: ["s3", "s4"], name: "b")
                Issue.record("zoe passed her strangers limit")
            } catch let error as PigeonError {
                #expect(error.code == .rateLimited)
                #expect((error.retryAfter ?? 0) >= 3_000, "the hour's first add leaves the window in about an hour: \(error.retryAfter ?? 0)")
            }
            #expect(try await second.conversations(of: "zoe", before: nil, limit: 10).conversations.count == 1)
            // Contacts are no strangers: s1 and s2 again, with one stranger more, fit.
            let third = try await second.createConversation(creator: "zoe", members: ["s1", "s2", "s3"], name: "c")
            #expect(third.members.count == 4)
            await #expect(throws: PigeonError.self) {
                try await first.changeMembership(conversationId: third.id, by: DeviceIdentity(userId: "zoe", deviceId: "z"), .add(userIds: ["s4"], role: .member), maxMembers: 10)
            }
            #expect(try await first.members(of: third.id) == ["s1", "s2", "s3", "zoe"])
            // The server API joins anyone, past every limit.
            let api = try await first.createConversation(creator: "zoe", members: ["s5", "s6"], name: "d", admission: .everyoneJoins)
            #expect(api.members.allSatisfy { $0.membership == .joined })
        }
    }

    /// Under invitations, a stranger's add makes an invited member: it gets the creation, no `message.new` and no unread
    /// count, its receipts move nothing, and it is listed among the invitations; once it accepts it is a member like any.
    @Test(arguments: Kind.allCases) func anInvitedMemberGetsNoMessagesUntilItAccepts(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, sinks in
            let store = stores[0]
            store.setConsentRules(ConsentRules(invitations: true, strangerAddsPerHour: 0))
            let group = try await store.createConversation(creator: "alice", members: ["bob"], name: "g")
            #expect(group.members.map(\.membership) == [.joined, .invited])
            #expect(try await store.conversations(of: "bob", before: nil, limit: 10).conversations.isEmpty)
            #expect(try await store.conversations(of: "bob", before: nil, limit: 10, membership: .invited).conversations.map(\.id) == [group.id])
            #expect(try await store.conversations(of: "alice", before: nil, limit: 10).conversations.map(\.id) == [group.id])
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id)])) == [1])
            _ = try await sinks[0].wait { Self.newSeqs($0, to: "alice", in: group.id) == [1] }
            #expect(Self.newSeqs(sinks[0].published, to: "bob", in: group.id).isEmpty)
            #expect(sinks[0].published.contains { $0.type == "conversation.created" && $0.userId == "bob" })
            #expect(try await store.conversation(id: group.id, for: "bob")?.unreadCount == 0)
            #expect(try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: "bob").messages.count == 1)
            let receipt = try await store.recordReceipt(conversationId: group.id, userId: "bob", kind: .delivered, upToSeq: 1)
            #expect(receipt.watermarks.deliveredSeq == 0, "an invited member's watermark waits for its acceptance")

            let accepted = try await store.acceptInvitation(conversationId: group.id, userId: "bob")
            #expect(accepted.members.first { $0.userId == "bob" }?.membership == .joined)
            #expect(accepted.unreadCount == 1)
            let created = try await sinks[0].wait { $0.filter { $0.type == "conversation.created" && $0.userId == "bob" }.count == 2 }
            #expect(created.last { $0.type == "conversation.created" && $0.userId == "bob" }?.payload.contains("\"membership\":\"joined\"") == true)
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id)])) == [2])
            _ = try await sinks[0].wait { Self.newSeqs($0, to: "bob", in: group.id) == [2] }
            #expect(try await store.recordReceipt(conversationId: group.id, userId: "bob", kind: .delivered, upToSeq: 2).watermarks.deliveredSeq == 2)
            // A second accept changes nothing; a non-member's is not_found.
            #expect(try await store.acceptInvitation(conversationId: group.id, userId: "bob").members.count == 2)
            await #expect(throws: PigeonError.self) { try await store.acceptInvitation(conversationId: group.id, userId: "carol") }
            // A later add of a stranger invites it; bob, now a contact of alice's, joins at once.
            let grown = try await store.changeMembership(
                conversationId: (try await store.createConversation(creator: "alice", members: ["bob", "dave"], name: "h")).id, by: Self.alice,
                .add(userIds: ["erin"], role: .member), maxMembers: 10)
            #expect(grown.members.map(\.membership) == [.joined, .joined, .invited, .invited])
        }
    }
}
