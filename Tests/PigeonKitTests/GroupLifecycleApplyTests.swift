import Foundation
import NIOConcurrencyHelpers
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// What the SDK makes of API.md 1.1's `pigeon.*` messages and of the members' watermarks, without a server: decoded
/// events and history pages are applied to a client's database as the network side would apply them (persist, then
/// announce), and the pure parts (``RecipientCounts``, ``MessageRevision``, ``ConfirmedRevision``) are driven directly.
@Suite struct GroupLifecycleApplyTests {
    // MARK: Pure parts

    @Test func recipientCountsCountTheMembersAtTheSeqOtherThanTheSender() {
        func member(_ user: String, joined: Int64 = 0, delivered: Int64, read: Int64) -> ConversationMember {
            ConversationMember(userId: user, joinedSeq: joined, deliveredSeq: delivered, readSeq: read)
        }
        let members = [
            member("alice", delivered: 10, read: 10),
            member("bob", delivered: 7, read: 5),
            member("carol", delivered: 4, read: 4),
            member("dave", joined: 6, delivered: 8, read: 5),
            member("erin", delivered: 3, read: 6),
        ]
        // (seq, members counted, delivered, read), independently worked out: alice is the sender; dave counts from
        // seq 6 on; erin's read watermark (6) is above her delivered one (3): read implies delivered.
        let table: [(Int64, Int, Int, Int)] = [
            (1, 3, 3, 3), (3, 3, 3, 3), (4, 3, 3, 3), (5, 3, 2, 2), (6, 4, 3, 1), (7, 4, 2, 0), (8, 4, 1, 0), (9, 4, 0, 0),
        ]
        for (seq, total, delivered, read) in table {
            let counts = RecipientCounts.counting(seq: seq, senderId: "alice", members: members)
            #expect(counts == RecipientCounts(members: total, delivered: delivered, read: read), "seq \(seq)")
            #expect(counts.deliveredToAll == (delivered == total))
            #expect(counts.readByAll == (read == total))
        }
        #expect(!RecipientCounts.counting(seq: 1, senderId: "alice", members: [members[0]]).deliveredToAll, "nobody else: never ✓✓")
    }

    @Test func anEditReplacesTheTextADeletionErasesItForGood() {
        let original = MessageRevision(body: "hello")
        let edited = original.applying(.edit(body: "hello world", at: 5))
        #expect(edited == MessageRevision(body: "hello world", editedAt: 5))
        let deleted = edited.applying(.delete(at: 7))
        #expect(deleted == MessageRevision(body: "", editedAt: 5, deletedAt: 7))
        #expect(deleted.applying(.edit(body: "back?", at: 9)) == deleted, "a deleted message is never edited")
        #expect(deleted.applying(.delete(at: 9)) == deleted, "the first deletion's time stays")
        #expect(original.showing(pending: [.edit(body: "a", at: 1), .edit(body: "b", at: 2)]) == MessageRevision(body: "b", editedAt: 2))
        #expect(original.showing(pending: []) == original)
    }

    @Test func confirmedChangesApplyInSeqOrderWhateverOrderTheyArriveIn() {
        var confirmed = ConfirmedRevision(revision: MessageRevision(body: "v1"), changeSeq: 3)
        var changed = confirmed.apply(.edit(body: "v3", at: 30), seq: 9)
        #expect(changed)
        changed = confirmed.apply(.edit(body: "v2", at: 20), seq: 8)
        #expect(!changed, "an older edit arriving late changes nothing")
        #expect(confirmed.revision.body == "v3" && confirmed.changeSeq == 9)
        changed = confirmed.apply(.edit(body: "v0", at: 1), seq: 2)
        #expect(!changed, "a change the copy already reflects")
        changed = confirmed.apply(.delete(at: 40), seq: 7)
        #expect(changed, "a deletion always wins, even one that arrives late")
        #expect(confirmed.revision == MessageRevision(body: "", editedAt: 30, deletedAt: 40))
        changed = confirmed.apply(.edit(body: "v4", at: 50), seq: 12)
        #expect(!changed)
    }

    // MARK: Applied to a client's database

    @Test func memberChangesEditsAndDeletionsAreAppliedAndAnnounced() async throws {
        let device = try Self.openDevice("alice")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        var seq: Int64 = 0
        func next(_ type: String = "text", from sender: String, device senderDevice: String? = nil, body: String) -> Message {
            seq += 1
            return Self.message(seq, in: id, type: type, from: sender, device: senderDevice ?? "d-\(sender)", body: body)
        }
        let created = Conversation(
            id: id, name: "team", createdAt: 1, lastSeq: 0,
            members: ["alice", "bob", "carol"].map { ConversationMember(userId: $0, role: $0 == "alice" ? .owner : .member, deliveredSeq: 0, readSeq: 0) })
        try await client.apply([.event(.conversationCreated(cursor: "c0", conversation: created))])

        // One of alice's messages, sent from her other device: counted against bob and carol.
        let mine = next(from: "alice", device: "alice-phone", body: "dinner at eight")
        try await client.apply([.event(.messageNew(cursor: "c1", message: mine))])
        var own = try #require(device.all(in: id).first)
        #expect(own.isOutgoing && own.recipients == RecipientCounts(members: 2, delivered: 0, read: 0))
        try await client.apply([.event(.receipt(cursor: "c2", ReceiptEvent(conversationId: id, userId: "bob", kind: .delivered, upToSeq: 1, at: 1)))])
        own = try #require(try client.message(localId: own.localId))
        #expect(own.recipients == RecipientCounts(members: 2, delivered: 1, read: 0))
        #expect(own.status == .stored, "✓✓ needs carol too")
        #expect(await eventually { device.events.contains { if case .recipientsChanged(let m) = $0 { m.localId == own.localId && m.recipients?.delivered == 1 } else { false } } })

        // Dave joins at seq 2: he does not count for seq 1, so carol's receipt makes it ✓✓.
        let added = next(ServerMessageType.members, from: "alice", body: Self.json(MembersChange(action: .added, userIds: ["dave"], by: "alice")))
        try await client.apply([.event(.messageNew(cursor: "c3", message: added))])
        var conversation = try #require(try client.conversation(id: id))
        let dave = try #require(conversation.members.first { $0.userId == "dave" })
        #expect(dave.joinedSeq == 2 && dave.deliveredSeq == 1 && dave.readSeq == 1 && dave.role == .member)
        #expect(await eventually { device.events.contains { if case .membersChanged(let c, let change) = $0 { c.id == id && change.action == .added } else { false } } })
        #expect(await eventually { device.received.last?.kind == .membersChange(MembersChange(action: .added, userIds: ["dave"], by: "alice")) }, "announced in its place")
        try await client.apply([.event(.receipt(cursor: "c4", ReceiptEvent(conversationId: id, userId: "carol", kind: .delivered, upToSeq: 2, at: 2)))])
        own = try #require(try client.message(localId: own.localId))
        #expect(own.status == .delivered && own.recipients == RecipientCounts(members: 2, delivered: 2, read: 0))

        // Carol is removed: bob alone has to read it.
        try await client.apply([.event(.receipt(cursor: "c5", ReceiptEvent(conversationId: id, userId: "bob", kind: .read, upToSeq: 2, at: 3)))])
        #expect(try client.message(localId: own.localId)?.status == .delivered)
        let removed = next(ServerMessageType.members, from: "alice", body: Self.json(MembersChange(action: .removed, userIds: ["carol"], by: "alice")))
        try await client.apply([.event(.messageNew(cursor: "c6", message: removed))])
        own = try #require(try client.message(localId: own.localId))
        #expect(own.status == .read, "a removed member no longer counts")
        #expect(own.recipients == RecipientCounts(members: 1, delivered: 1, read: 1))
        #expect(try client.conversation(id: id)?.members.map(\.userId) == ["alice", "bob", "dave"])

        // Bob's message, edited, then deleted.
        let typo = next(from: "bob", body: "see you at the statoin")
        try await client.apply([.event(.messageNew(cursor: "c7", message: typo))])
        let target = try #require(device.all(in: id).last)
        #expect(try client.search("statoin", in: id).map(\.localId) == [target.localId])
        let edit = next(ServerMessageType.edit, from: "bob", body: Self.json(EditBody(serverId: typo.serverId, body: "see you at the station")))
        try await client.apply([.event(.messageNew(cursor: "c8", message: edit))])
        var edited = try #require(try client.message(localId: target.localId))
        #expect(edited.body == "see you at the station" && edited.editedAt == edit.storedAt && edited.deletedAt == nil)
        #expect(try client.search("statoin", in: id).isEmpty, "not found by the words it lost")
        #expect(try client.search("station", in: id).map(\.localId) == [target.localId])
        #expect(try client.search("serverId").isEmpty, "a pigeon.* body is not indexed")
        #expect(await eventually { device.events.contains { if case .messageEdited(let m) = $0 { m.localId == target.localId } else { false } } })
        #expect(try !device.all(in: id).contains { $0.isChange }, "the edit is not listed as a message")
        #expect(await eventually { device.received.count == 4 } && !device.received.contains { $0.isChange }, "nor announced as one")
        let delete = next(ServerMessageType.delete, from: "bob", body: Self.json(DeleteBody(serverId: typo.serverId)))
        try await client.apply([.event(.messageNew(cursor: "c9", message: delete))])
        edited = try #require(try client.message(localId: target.localId))
        #expect(edited.body == "" && edited.deletedAt == delete.storedAt)
        #expect(try client.search("station", in: id).isEmpty, "a deleted message is found by no word")
        #expect(await eventually { device.events.contains { if case .messageDeleted(let m) = $0 { m.localId == target.localId } else { false } } })
        let editRow = try #require(Self.changes(device, in: id).first { $0.type == ServerMessageType.edit })
        #expect(editRow.kind == .edit(target: .init(serverId: typo.serverId, localId: target.localId), body: ""), "its edits' text is erased too")

        // Renamed; unread counts leave the server's messages out.
        let renamed = next(ServerMessageType.members, from: "bob", body: Self.json(MembersChange(action: .renamed, userIds: [], name: "Trip", by: "bob")))
        try await client.apply([.event(.messageNew(cursor: "c10", message: renamed))])
        conversation = try #require(try client.conversation(id: id))
        #expect(conversation.name == "Trip")
        #expect(conversation.unreadCount == 1, "bob's message only, not his edit, deletion or rename")
        #expect(await eventually { device.events.contains { if case .conversationRenamed(let c, _) = $0 { c.name == "Trip" } else { false } } })

        // Alice is removed: the conversation stays, read-only, without members.
        let out = next(ServerMessageType.members, from: "bob", body: Self.json(MembersChange(action: .removed, userIds: ["alice"], by: "bob")))
        try await client.apply([.event(.messageNew(cursor: "c11", message: out))])
        conversation = try #require(try client.conversation(id: id))
        #expect(conversation.leftAtSeq == out.seq && conversation.members.isEmpty && !conversation.isMember)
        #expect(try device.all(in: id).count == 6, "her copy stays: 1 message of hers, bob's, 4 member changes")
        #expect(await eventually { device.events.contains { if case .leftConversation(let c, let change) = $0 { c.id == id && change.userIds == ["alice"] } else { false } } })
        let refused = #expect(throws: PigeonClientError.self) { try client.send("still there?", to: id) }
        #expect(refused?.code == .notMember)
    }

    @Test func changesThatArriveBeforeTheirTargetOrOutOfOrderEndInTheLatestText() async throws {
        let device = try Self.openDevice("alice")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        let created = Conversation(id: id, name: nil, createdAt: 1, lastSeq: 0, members: [
            ConversationMember(userId: "alice", deliveredSeq: 0, readSeq: 0), ConversationMember(userId: "bob", deliveredSeq: 0, readSeq: 0),
        ])
        try await client.apply([.event(.conversationCreated(cursor: "c0", conversation: created))])
        let target = Self.message(1, in: id, from: "bob", body: "one")
        let second = Self.message(2, in: id, type: ServerMessageType.edit, from: "bob", body: Self.json(EditBody(serverId: target.serverId, body: "two")))
        let third = Self.message(3, in: id, type: ServerMessageType.edit, from: "bob", body: Self.json(EditBody(serverId: target.serverId, body: "three")))
        // The newest edit comes live, the rest with the gap's fetch (the target as the server had it then: "two").
        try await client.apply([.event(.messageNew(cursor: "c3", message: third))])
        #expect(try device.all(in: id).isEmpty)
        var copy = target
        copy.body = "two"
        copy.editedAt = second.storedAt
        try await client.apply([.history(conversationId: id, [copy, second])])
        let shown = try #require(device.all(in: id).first)
        #expect(shown.body == "three" && shown.editedAt == third.storedAt)
        #expect(try client.conversation(id: id)?.contiguousSeq == 3)
        #expect(try client.search("two").isEmpty && client.search("three").count == 1)
    }

    @Test func aMemberAddedLaterStartsAtItsJoinedSeqAndFetchesTheConversation() async throws {
        let device = try Self.openDevice("carol")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        let added = Self.message(
            12, in: id, type: ServerMessageType.members, from: "alice",
            body: Self.json(MembersChange(action: .added, userIds: ["carol"], role: .member, by: "alice")))
        try await client.apply([.event(.messageNew(cursor: "c12", message: added))])
        var conversation = try #require(try client.conversation(id: id))
        #expect(conversation.contiguousSeq == 12 && conversation.lastSeq == 12, "nothing before seq 12 is waited for")
        #expect(await eventually { device.received.map(\.seq) == [12] })
        // The snapshot the engine then fetches: carol joined at 12, alice and bob are founders.
        let snapshot = Conversation(id: id, name: "club", createdAt: 1, lastSeq: 13, members: [
            ConversationMember(userId: "alice", role: .owner, deliveredSeq: 13, readSeq: 13),
            ConversationMember(userId: "bob", deliveredSeq: 12, readSeq: 9),
            ConversationMember(userId: "carol", joinedSeq: 12, deliveredSeq: 11, readSeq: 11),
        ])
        try await client.apply([.conversations([snapshot])])
        conversation = try #require(try client.conversation(id: id))
        #expect(conversation.kind == .group && conversation.name == "club" && conversation.members.count == 3)
        #expect(conversation.contiguousSeq == 12 && conversation.lastSeq == 13, "seq 13 is now a gap to fetch")
        // A member change the snapshot already reflects is not applied again over it.
        let stale = Self.message(
            13, in: id, type: ServerMessageType.members, from: "alice", body: Self.json(MembersChange(action: .role, userIds: ["bob"], role: .admin, by: "alice")))
        try await client.apply([.history(conversationId: id, [stale])])
        #expect(try client.conversation(id: id)?.members.first { $0.userId == "bob" }?.role == .member, "the snapshot at 13 is newer")
    }

    @Test func anOwnEditShowsAtOnceIsConfirmedWhenStoredAndRevertedWhenItFails() async throws {
        let device = try Self.openDevice("alice")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        let created = Conversation(id: id, name: nil, createdAt: 1, lastSeq: 0, members: [
            ConversationMember(userId: "alice", deliveredSeq: 0, readSeq: 0), ConversationMember(userId: "bob", deliveredSeq: 0, readSeq: 0),
        ])
        let original = Self.message(1, in: id, from: "alice", device: "alice-laptop", body: "the meeting is at nine")
        try await client.apply([.event(.conversationCreated(cursor: "c0", conversation: created)), .event(.messageNew(cursor: "c1", message: original))])
        let target = try #require(device.all(in: id).first)

        let edit = try client.edit(localId: target.localId, body: "the meeting is at ten")
        #expect(edit.status == .pending && edit.kind == .edit(target: .init(serverId: original.serverId, localId: target.localId), body: "the meeting is at ten"))
        #expect(try client.message(localId: target.localId)?.body == "the meeting is at ten", "shown at once")
        #expect(try client.message(localId: target.localId)?.editedAt == edit.clientTimestamp)
        #expect(try client.search("ten").count == 1 && client.search("nine").isEmpty)
        #expect(try client.unsentMessages().map(\.localId) == [edit.localId], "the edit waits in the outbox")
        #expect(try device.all(in: id).map(\.localId) == [target.localId])

        // Refused at processing: the text is back, and the failure is announced.
        try await client.apply([.event(.messageFailed(cursor: "c2", MessageFailedEvent(
            conversationId: id, serverId: "s-edit-1", clientMessageId: edit.clientMessageId, error: ErrorDetail(code: .forbidden, message: "not yours"))))])
        #expect(try client.message(localId: target.localId)?.body == "the meeting is at nine")
        #expect(try client.message(localId: target.localId)?.editedAt == nil)
        #expect(try client.search("nine").count == 1 && client.search("ten").isEmpty)
        #expect(try client.message(localId: edit.localId)?.status == .failed)
        #expect(await eventually { device.events.contains {
            if case .messageChangeFailed(let change, let message) = $0 {
                change.localId == edit.localId && change.failure?.code == .forbidden && message.body == "the meeting is at nine"
            } else {
                false
            }
        } })

        // A second try shows again, and once stored the text is the confirmed one.
        let retried = try client.retry(localId: edit.localId)
        #expect(try client.message(localId: target.localId)?.body == "the meeting is at ten")
        try await client.apply([.event(.messageStored(cursor: "c3", MessageStoredEvent(
            conversationId: id, serverId: "s-edit-2", clientMessageId: retried.clientMessageId, seq: 2, storedAt: 5_000, recipientsOnline: 1)))])
        let confirmed = try #require(try client.message(localId: target.localId))
        #expect(confirmed.body == "the meeting is at ten" && confirmed.editedAt == 5_000, "the server's time once stored")
        #expect(try client.message(localId: edit.localId)?.status == .stored)
        #expect(try client.unsentMessages().isEmpty)

        // A deletion: erased at once; an edit of a deleted message is refused locally.
        _ = try client.delete(localId: target.localId)
        #expect(try client.message(localId: target.localId)?.body == "")
        #expect(try client.search("ten").isEmpty)
        #expect(throws: PigeonClientError.self) { try client.edit(localId: target.localId, body: "again") }
        let membersChange = Self.message(
            3, in: id, type: ServerMessageType.members, from: "alice", body: Self.json(MembersChange(action: .renamed, userIds: [], name: "x", by: "alice")))
        try await client.apply([.event(.messageNew(cursor: "c4", message: membersChange))])
        let changeRow = try #require(device.all(in: id).last)
        let notEditable = #expect(throws: PigeonClientError.self) { try client.edit(localId: changeRow.localId, body: "x") }
        #expect(notEditable?.code == .invalidArgument)
    }

    // MARK: Helpers

    static func openDevice(_ userId: String) throws -> TestDevice {
        let credentials = PigeonClient.Credentials(userId: userId, deviceId: "d-\(userId)", token: "unused")
        return try TestDevice.open(credentials: credentials, serverURL: URL(string: "http://127.0.0.1:9")!, databasePath: makeTemporaryDirectory() + "/db.sqlite")
    }

    static func message(_ seq: Int64, in conversationId: String, type: String = "text", from sender: String, device: String? = nil, body: String) -> Message {
        Message(
            serverId: "s-\(conversationId.prefix(8))-\(seq)", clientMessageId: UUID().uuidString.lowercased(), conversationId: conversationId, seq: seq,
            senderId: sender, senderDeviceId: device ?? "d-\(sender)", type: type, body: body, clientTimestamp: seq * 1_000,
            acceptedAt: seq * 1_000 + 1, storedAt: seq * 1_000 + 2)
    }

    static func json(_ value: some Encodable) -> String {
        String(decoding: try! JSONEncoder().encode(value), as: UTF8.self)
    }

    /// The edits and deletions of a conversation on a device (not listed by its pages): read one by one.
    static func changes(_ device: TestDevice, in conversationId: String) throws -> [PigeonMessage] {
        try (1...200).compactMap { try device.client.message(localId: Int64($0)) }.filter { $0.conversationId == conversationId && $0.isChange }
    }
}

extension TestDevice {
    /// The listed messages of a conversation, oldest first.
    func all(in conversationId: String) throws -> [PigeonMessage] { try allMessages(in: conversationId) }
}
