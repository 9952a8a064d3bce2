import Foundation
import GRDB
@testable import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// What the SDK makes of API.md 1.2's consent without a server: invitations recorded from events and kept apart,
/// accepted and declined; seqs the server never shows this user (a blocked user's messages) passed over; and the
/// local database of the previous PigeonKit migrated with its data.
@Suite struct ConsentApplyTests {
    typealias Apply = GroupLifecycleApplyTests

    static func invitation(_ id: String, lastSeq: Int64 = 1, me: MembershipState = .invited, joinedSeq: Int64 = 0) -> Conversation {
        Conversation(
            id: id, name: "Crew", createdAt: 1, lastSeq: lastSeq,
            members: [
                ConversationMember(userId: "carol", role: .owner, deliveredSeq: lastSeq, readSeq: lastSeq),
                ConversationMember(userId: "alice", joinedSeq: joinedSeq, deliveredSeq: 0, readSeq: 0, membership: me),
            ])
    }

    @Test func anInvitationIsKeptApartUntilAcceptedAndNothingCanBeSentThere() async throws {
        let device = try Apply.openDevice("alice")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        try await client.apply([.event(.conversationCreated(cursor: "c0", conversation: Self.invitation(id)))])

        #expect(try client.conversations().isEmpty, "the default list holds joined conversations only")
        let invitations = try client.invitations()
        #expect(invitations.map(\.id) == [id])
        #expect(invitations.first?.invitedBy == "carol" && invitations.first?.isInvitation == true && invitations.first?.name == "Crew")
        #expect(await eventually { device.events.contains { if case .invitationReceived(let c) = $0 { c.id == id } else { false } } })
        let refused = #expect(throws: PigeonClientError.self) { try client.send("hi", to: id) }
        #expect(refused?.code == .invitationPending)
        #expect(try await client.store.gaps().isEmpty, "no history is fetched for an invitation")
        #expect(try await client.store.pendingReceipts().isEmpty, "nor acknowledged")

        // The same snapshot again (a catch-up) announces nothing new.
        try await client.apply([.conversations([Self.invitation(id)])])

        // Accepted (on another device of alice's): a member like any, its history due.
        try await client.apply([.conversations([Self.invitation(id, lastSeq: 1, me: .joined)])])
        #expect(try client.invitations().isEmpty)
        #expect(try client.conversations().map(\.id) == [id])
        #expect(try client.conversation(id: id)?.invitedBy == nil)
        #expect(await eventually { device.events.contains { if case .invitationAccepted(let c) = $0 { c.id == id && !c.isInvitation } else { false } } })
        // Events are recorded in order: the second snapshot, before the acceptance, announced nothing new.
        #expect(device.events.filter { if case .invitationReceived = $0 { true } else { false } }.count == 1)
        #expect(try await client.store.gaps().map(\.conversationId) == [id], "now its history is fetched")
        _ = try client.send("hi", to: id)
    }

    /// Added to a group later: the `by` of the change names the sender, and a declined (or withdrawn) invitation
    /// leaves nothing, not even when the change that removed this user arrives again.
    @Test func anInvitationNamesWhoAddedAndADeclinedOneLeavesNothing() async throws {
        let device = try Apply.openDevice("alice")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        let added = Apply.message(4, in: id, type: ServerMessageType.members, from: "dave", body: Apply.json(MembersChange(action: .added, userIds: ["alice"], by: "dave")))
        try await client.apply([.event(.messageNew(cursor: "c1", message: added))])
        try await client.apply([.conversations([Self.invitation(id, lastSeq: 4, joinedSeq: 4)])])
        #expect(try client.invitations().first?.invitedBy == "dave", "the member who added alice, not the owner")
        #expect(try client.conversations().isEmpty)

        let left = Apply.message(5, in: id, type: ServerMessageType.members, from: "alice", body: Apply.json(MembersChange(action: .left, userIds: ["alice"], by: "alice")))
        try await client.apply([.event(.messageNew(cursor: "c2", message: left))])
        #expect(try client.conversation(id: id) == nil, "declined on another device: gone")
        #expect(try client.invitations().isEmpty && client.conversations().isEmpty)
        #expect(await eventually { device.events.contains { if case .invitationRemoved(id) = $0 { true } else { false } } })
        #expect(!device.received.contains { $0.conversationId == id && $0.seq == 5 }, "nothing announced from it")

        try await client.apply([.event(.messageNew(cursor: "c3", message: left))])
        #expect(try client.conversation(id: id) == nil, "the removal heard again brings no empty conversation back")
    }

    /// A page lists every seq the server shows this user after the seq asked from: the seqs it skips (a blocked
    /// user's messages) are passed over, so what follows is announced and acknowledged; without that proof (a
    /// message that came live after a gap) nothing is passed over.
    @Test func seqsAPageProvesHiddenArePassedOver() async throws {
        let device = try Apply.openDevice("alice")
        let client = device.client
        let id = UUID().uuidString.lowercased()
        let members = ["alice", "bob", "mallory"].map { ConversationMember(userId: $0, deliveredSeq: 0, readSeq: 0) }
        try await client.apply([.event(.conversationCreated(cursor: "c0", conversation: Conversation(id: id, name: "g", createdAt: 1, lastSeq: 0, members: members)))])
        let one = Apply.message(1, in: id, from: "bob", body: "one")
        let three = Apply.message(3, in: id, from: "bob", body: "three")
        let five = Apply.message(5, in: id, from: "bob", body: "five")
        try await client.apply([.event(.messageNew(cursor: "c1", message: one)), .event(.messageNew(cursor: "c2", message: three))])
        #expect(try client.conversation(id: id)?.contiguousSeq == 1, "seq 2 is missing: a gap")
        #expect(await eventually { device.received.map(\.seq) == [1] })

        // A page that proves nothing keeps the gap.
        try await client.apply([.history(conversationId: id, [three])])
        #expect(try client.conversation(id: id)?.contiguousSeq == 1)

        // The page after 1 lists 3 and 5 (and says there is no more, with 6 known last): 2, 4 and 6 are not this user's to see.
        try await client.apply([.event(.conversationCreated(cursor: "c3", conversation: Conversation(id: id, name: "g", createdAt: 1, lastSeq: 6, members: members)))])
        try await client.apply([.history(conversationId: id, [three, five], after: 1, coveredThrough: 6)])
        #expect(try client.conversation(id: id)?.contiguousSeq == 6)
        #expect(await eventually { device.received.map(\.seq) == [1, 3, 5] }, "announced once each, in order")
        #expect(try await client.store.gaps().isEmpty)
        #expect(try await client.store.pendingReceipts().contains { $0.kind == .delivered && $0.upToSeq == 6 })

        // A proof from above the contiguous seq proves nothing below it.
        let nine = Apply.message(9, in: id, from: "bob", body: "nine")
        try await client.apply([.history(conversationId: id, [nine], after: 7, coveredThrough: 9)])
        #expect(try client.conversation(id: id)?.contiguousSeq == 6, "7 is unaccounted for")
    }

    /// A database of the previous PigeonKit (schema v5): opened, it is migrated in place and keeps its conversation,
    /// members and messages; every member counts as joined.
    @Test func aDatabaseOfThePreviousSchemaIsMigratedWithItsData() async throws {
        let path = makeTemporaryDirectory() + "/pigeon.sqlite"
        let queue = try DatabaseQueue(path: path)
        try LocalDatabase.migrator.migrate(queue, upTo: "v5")
        let id = UUID().uuidString.lowercased()
        try await queue.write { db in
            try db.execute(sql: "INSERT INTO device (id, userId, deviceId, needsFullSync) VALUES (1, 'alice', 'd-alice', 0)")
            try db.execute(
                sql: "INSERT INTO conversations (id, kind, name, createdAt, lastSeq, contiguousSeq, lastActivityAt) VALUES (?, 'group', 'Crew', 1, 1, 1, 5)", arguments: [id])
            try db.execute(sql: "INSERT INTO members (conversationId, userId, role, deliveredSeq, readSeq) VALUES (?, 'alice', 'owner', 1, 1), (?, 'bob', 'member', 1, 0)", arguments: [id, id])
            try db.execute(sql: """
                INSERT INTO messages (conversationId, clientMessageId, serverId, seq, senderId, senderDeviceId, type, body, clientTimestamp, storedAt, isOutgoing, status)
                VALUES (?, 'c0ffee00-0000-4000-8000-000000000002', 's-1', 1, 'bob', 'd-bob', 'text', 'from before the upgrade', 1, 2, 0, 'read')
                """, arguments: [id])
        }
        try queue.close()

        let device = try TestDevice.open(
            credentials: PigeonClient.Credentials(userId: "alice", deviceId: "d-alice", token: "unused"), serverURL: URL(string: "http://127.0.0.1:9")!,
            databasePath: path)
        #expect(device.client.localDatabaseRecovery == nil, "migrated, not rebuilt")
        let conversation = try #require(try device.client.conversations().first)
        #expect(conversation.id == id && conversation.name == "Crew" && !conversation.isInvitation)
        #expect(conversation.members.map(\.userId) == ["alice", "bob"] && conversation.members.allSatisfy { $0.membership == .joined })
        #expect(try device.allMessages(in: id).map(\.body) == ["from before the upgrade"])
        #expect(try device.client.search("upgrade").count == 1)
        #expect(try device.client.invitations().isEmpty && device.client.blockedUsers().isEmpty)
        let versions = try await DatabaseQueue(path: path).read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(versions.contains("v6"))
    }
}
