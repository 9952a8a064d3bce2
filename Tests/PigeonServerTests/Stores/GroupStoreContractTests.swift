import Foundation
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``MessageStore`` contract of API.md 1.1's membership changes and message edits/deletes, on both stores
/// (``StoreContractTests/withStores(_:nodes:faultInjector:_:)``).
@Suite struct GroupStoreContractTests {
    typealias Kind = StoreContractTests.Kind
    static let alice = DeviceIdentity(userId: "alice", deviceId: "alice-phone")

    /// A processing item for an edit (`newBody`) or delete (nil) of `target` by `sender`.
    static func change(
        _ target: String, in conversation: String, newBody: String?, sender: String = "alice", device: String = "alice-phone", final: Bool = true
    ) -> ProcessingItem {
        var item = StoreContractTests.item(conversation: conversation, sender: sender, device: device, final: final)
        item.entry.message.type = newBody == nil ? ServerMessageType.delete : ServerMessageType.edit
        item.entry.message.body =
            newBody.map { MessageLifecycle.editText(serverId: target, body: $0) } ?? MessageLifecycle.deleteText(serverId: target)
        return item
    }

    /// Every stored `body` text of the conversation, straight from the messages table.
    static func storedBodies(_ store: any MessageStore, _ conversationId: String) async throws -> [String] {
        if let store = store as? SQLiteMessageStore {
            return try await store.pool.read { db in
                try String.fetchAll(db, sql: "SELECT body FROM messages WHERE conversation_id = ? ORDER BY seq", arguments: [conversationId])
            }
        }
        guard let store = store as? PostgresMessageStore else { throw TestFailure("unknown store \(store)") }
        var bodies: [String] = []
        for try await body in try await store.client.query("SELECT body FROM messages WHERE conversation_id = \(conversationId) ORDER BY seq")
            .decode(String.self)
        {
            bodies.append(body)
        }
        return bodies
    }

    @Test(arguments: Kind.allCases) func aMembershipChangeTakesTheNextSeqAndReachesTheMembersBeforeAndAdded(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, sinks in
            let store = stores[0]
            let group = try await store.createConversation(creator: "alice", members: ["bob"], name: "g")
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id)])) == [1])
            let added = try await store.changeMembership(conversationId: group.id, by: Self.alice, .add(userIds: ["carol"], role: .admin), maxMembers: 10)
            #expect(added.lastSeq == 2)
            #expect(added.members.map(\.userId) == ["alice", "bob", "carol"])
            #expect(added.members[2] == ConversationMember(userId: "carol", role: .admin, joinedSeq: 2, deliveredSeq: 1, readSeq: 1))
            // A message processed after it takes the seq after it (the processing cache is not behind the change).
            #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: group.id, sender: "carol", device: "c")])) == [3])
            let removed = try await store.changeMembership(conversationId: group.id, by: Self.alice, .remove(userId: "bob"), maxMembers: 10)
            #expect(removed.members.map(\.userId) == ["alice", "carol"])
            // bob is no longer a member: his message is refused, his receipts and reads are not his.
            let refused = try await store.process([StoreContractTests.item(conversation: group.id, sender: "bob", device: "b", final: true)])
            guard case .deadLettered(let error) = refused[0] else { Issue.record("bob's message was \(refused[0])"); return }
            #expect((error as? PigeonError)?.code == .notFound)
            #expect(try await store.conversation(id: group.id, for: "bob") == nil)
            #expect(try await store.member("bob", of: group.id) == nil)
            #expect(try await store.members(of: group.id) == ["alice", "carol"])
            // Who got which message.new: everyone before the change and the added one; the removed one its removal.
            let events = try await sinks[0].wait { $0.filter { $0.type == "message.new" }.count == 2 + 3 + 3 + 3 }
            func recipients(ofSeq seq: Int64) -> [String] {
                events.filter { $0.type == "message.new" && $0.payload.contains("\"seq\":\(seq),") }.map(\.userId).sorted()
            }
            #expect(recipients(ofSeq: 2) == ["alice", "bob", "carol"])
            #expect(recipients(ofSeq: 3) == ["alice", "bob", "carol"])
            #expect(recipients(ofSeq: 4) == ["alice", "bob", "carol"])
            StoreContractTests.expectGaplessPartitions(events)
            // History from carol's join; the change messages as stored.
            let page = try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10, visibleFrom: 2)
            #expect(page.messages.map(\.seq) == [2, 3, 4])
            #expect(page.messages.map(\.type) == ["pigeon.members", "text", "pigeon.members"])
            let before = try await store.messages(conversationId: group.id, after: nil, before: 4, limit: 1, visibleFrom: 3)
            #expect(before.messages.map(\.seq) == [3] && !before.hasMore)
            // A refused change writes nothing.
            await #expect(throws: PigeonError.self) {
                try await store.changeMembership(
                    conversationId: group.id, by: DeviceIdentity(userId: "bob", deviceId: "b"), .add(userIds: ["dave"], role: .member), maxMembers: 10)
            }
            await #expect(throws: PigeonError.self) {
                try await store.changeMembership(conversationId: group.id, by: Self.alice, .add(userIds: ["d1", "d2"], role: .member), maxMembers: 3)
            }
            #expect(try await store.conversation(id: group.id, for: "alice")?.lastSeq == 4)
        }
    }

    @Test(arguments: Kind.allCases) func anEditReplacesTheTextAndADeleteErasesItWithItsEdits(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let original = StoreContractTests.item(conversation: conversation.id, body: "secret one")
            let target = original.entry.message.serverId
            // The target, its edit (in the same batch: the edit applies to the batch's own row), another message.
            let edit = Self.change(target, in: conversation.id, newBody: "secret two")
            #expect(StoreContractTests.seqs(try await store.process([original, edit])) == [1, 2])
            var messages = try await store.messages(conversationId: conversation.id, after: 0, before: nil, limit: 10)
            #expect(messages.messages[0].body == "secret two" && messages.messages[0].editedAt != nil)
            // A later edit, of a row stored before its batch.
            #expect(StoreContractTests.seqs(try await store.process([Self.change(target, in: conversation.id, newBody: "secret three")])) == [3])
            messages = try await store.messages(conversationId: conversation.id, after: 0, before: nil, limit: 10)
            #expect(messages.messages[0].body == "secret three")
            // The delete, with an edit in its own batch before it.
            let lastEdit = Self.change(target, in: conversation.id, newBody: "secret four")
            let delete = Self.change(target, in: conversation.id, newBody: nil)
            #expect(StoreContractTests.seqs(try await store.process([lastEdit, delete])) == [4, 5])
            let bodies = try await Self.storedBodies(store, conversation.id)
            #expect(!bodies.contains { $0.contains("secret") }, "\(bodies)")
            #expect(bodies[0] == "")
            messages = try await store.messages(conversationId: conversation.id, after: 0, before: nil, limit: 10)
            #expect(messages.messages[0].deletedAt != nil && messages.messages[0].editedAt != nil)
            // The event log renders the rows as they are now.
            let events = try await store.events(
                for: DeviceIdentity(userId: "bob", deviceId: "b"), after: .start(partitions: store.eventPartitions), limit: 100)
            #expect(events.filter { $0.type == "message.new" }.count == 5 && !events.contains { $0.payload.contains("secret") })
            // Redelivered (crash before the buffer's acknowledgement): already stored, not refused for its deleted target.
            #expect(StoreContractTests.seqs(try await store.process([delete])) == [-5])
        }
    }

    /// A message never edited before, then edited and deleted in one batch: it ends edited and deleted, as when the
    /// two come in two batches (PostgreSQL once kept the stored `edited_at`, NULL, when the batch also deleted).
    @Test(arguments: Kind.allCases) func anEditAndADeleteInOneBatchLeaveTheTargetEditedAndDeleted(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let original = StoreContractTests.item(conversation: conversation.id, body: "first")
            let target = original.entry.message.serverId
            #expect(StoreContractTests.seqs(try await store.process([original])) == [1])
            let edit = Self.change(target, in: conversation.id, newBody: "second")
            let delete = Self.change(target, in: conversation.id, newBody: nil)
            #expect(StoreContractTests.seqs(try await store.process([edit, delete])) == [2, 3])
            let stored = try await store.messages(conversationId: conversation.id, after: 0, before: nil, limit: 10).messages
            #expect(stored.map(\.type) == ["text", "pigeon.edit", "pigeon.delete"])
            #expect(stored[0].body == "" && stored[0].editedAt != nil && stored[0].deletedAt != nil, "\(stored[0])")
            #expect(try await Self.storedBodies(store, conversation.id).allSatisfy { !$0.contains("second") && !$0.contains("first") })
        }
    }

    @Test(arguments: Kind.allCases) func aChangeOfAnotherUsersDeletedOrUnknownMessageIsDeadLettered(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: "g")
            let other = try await store.createConversation(creator: "alice", members: ["carol"], name: "h")
            let bobs = StoreContractTests.item(conversation: conversation.id, sender: "bob", device: "b", body: "bob's")
            let elsewhere = StoreContractTests.item(conversation: other.id, body: "elsewhere")
            _ = try await store.process([bobs, elsewhere])
            let bobsId = bobs.entry.message.serverId
            let results = try await store.process([
                Self.change(bobsId, in: conversation.id, newBody: "mine now"),  // another user's
                Self.change(elsewhere.entry.message.serverId, in: conversation.id, newBody: "x"),  // another conversation's
                Self.change(newId(), in: conversation.id, newBody: nil),  // unknown
                Self.change(bobsId, in: conversation.id, newBody: nil, sender: "bob", device: "b"),  // bob deletes his own
                Self.change(bobsId, in: conversation.id, newBody: "again", sender: "bob", device: "b"),  // then edits it
            ])
            func code(_ result: ProcessingResult) -> ErrorCode? {
                if case .deadLettered(let error) = result { (error as? PigeonError)?.code } else { nil }
            }
            #expect(results.map(code) == [.forbidden, .notFound, .notFound, nil, .invalidRequest])
            #expect(StoreContractTests.seqs([results[3]]) == [2])
            let letters = try await store.deadLetters(limit: 10)
            #expect(letters.count == 4)
            #expect(try await Self.storedBodies(store, conversation.id) == ["", MessageLifecycle.deleteText(serverId: bobsId)])
        }
    }

    /// Two nodes on one PostgreSQL store: a change made on one is seen by the other at once for processing (its cached
    /// last seq fails) and within moments for reads (the notification drops its cached member list).
    @Test func anotherNodeSeesAMembershipChange() async throws {
        try await StoreContractTests.withStores(.postgres, nodes: 2) { stores, _ in
            let (one, two) = (stores[0], stores[1])
            let group = try await one.createConversation(creator: "alice", members: ["bob"], name: "g")
            // Node two caches the members and the last seq.
            #expect(StoreContractTests.seqs(try await two.process([StoreContractTests.item(conversation: group.id)])) == [1])
            #expect(try await two.members(of: group.id) == ["alice", "bob"])
            _ = try await one.changeMembership(conversationId: group.id, by: Self.alice, .remove(userId: "bob"), maxMembers: 10)
            let refused = try await two.process([StoreContractTests.item(conversation: group.id, sender: "bob", device: "b", final: true)])
            guard case .deadLettered = refused[0] else { Issue.record("node two stored a removed member's message: \(refused[0])"); return }
            #expect(StoreContractTests.seqs(try await two.process([StoreContractTests.item(conversation: group.id)])) == [3])
            let deadline = ContinuousClock.now + .seconds(5)
            while try await two.members(of: group.id) != ["alice"], ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(try await two.members(of: group.id) == ["alice"])
        }
    }
}
