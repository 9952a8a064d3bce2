import GRDB
import PigeonProtocol

/// Consent and blocking in the local database (API.md 1.2): this user's invitations (a conversation whose member row
/// for this user is `invited`), who sent each, and the users this user blocked, as the server last listed them.
///
/// An invitation is kept apart from the conversations: ``LocalStore/conversations()`` leaves it out, no history is
/// fetched and no receipt is sent for it until it is accepted. A declined or withdrawn invitation leaves nothing on
/// the device.
extension LocalStore {
    /// SQL that holds for a conversation `c` this user is invited to; takes this user's id as its one argument.
    static let isInvitation = "EXISTS (SELECT 1 FROM members i WHERE i.conversationId = c.id AND i.userId = ? AND i.membership = 'invited')"

    /// This user's membership of a conversation, `nil` when it has no member row there (unknown, or left).
    func ownMembership(_ db: Database, conversationId: String) throws -> MembershipState? {
        try String.fetchOne(
            db.cachedStatement(sql: "SELECT membership FROM members WHERE conversationId = ? AND userId = ?"), arguments: [conversationId, userId]
        ).flatMap(MembershipState.init(rawValue:))
    }

    /// After a snapshot: notes an invitation new on the device, or one accepted (on any device of this user). An
    /// invitation made at the conversation's creation comes from its creator, the owner; one made later from the
    /// `by` of the change that added this user (``applyMembersChange``, or read by the engine when it was missed).
    func noteInvitation(_ db: Database, _ conversation: Conversation, before: MembershipState?, outcome: inout ApplyOutcome) throws {
        let after = try ownMembership(db, conversationId: conversation.id)
        if after == .invited, before != .invited {
            let me = conversation.members.first { $0.userId == userId }
            if me?.joinedSeq == 0, let owner = conversation.members.first(where: { $0.role == .owner }) {
                try db.cachedStatement(sql: "UPDATE conversations SET addedBy = coalesce(addedBy, ?) WHERE id = ?").execute(arguments: [owner.userId, conversation.id])
            }
            if !outcome.invitationsReceived.contains(conversation.id) { outcome.invitationsReceived.append(conversation.id) }
        } else if before == .invited, after == .joined {
            if !outcome.invitationsAccepted.contains(conversation.id) { outcome.invitationsAccepted.append(conversation.id) }
        }
    }

    /// Removes the invitations the batch found declined or withdrawn (``ApplyOutcome/invitationsGone``) with
    /// everything they held, and forgets what the batch would otherwise announce of them.
    func removeGoneInvitations(_ db: Database, outcome: inout ApplyOutcome, touched: inout Set<String>, watermarksMoved: inout Set<String>) throws {
        guard !outcome.invitationsGone.isEmpty else { return }
        let gone = Set(outcome.invitationsGone)
        for id in gone {
            try db.cachedStatement(sql: "DELETE FROM conversations WHERE id = ?").execute(arguments: [id])
            touched.remove(id)
            watermarksMoved.remove(id)
        }
        outcome.received.removeAll { gone.contains($0.conversationId) }
        outcome.statusChanged.removeAll { gone.contains($0.conversationId) }
        outcome.conversationsChanged.removeAll { gone.contains($0) }
        outcome.membersChanges.removeAll { gone.contains($0.conversationId) }
        outcome.invitationsReceived.removeAll { gone.contains($0) }
        outcome.typing.removeAll { gone.contains($0.conversationId) }
    }

    /// The invitation `conversationId` is gone on the server (declined here, or the server answered `404`): removed
    /// from the device. Whether there was one to remove (a conversation this user joined is left alone).
    func removeInvitation(conversationId: String) async throws -> Bool {
        try await pool.write { db in
            guard try self.ownMembership(db, conversationId: conversationId) == .invited else { return false }
            try db.cachedStatement(sql: "DELETE FROM conversations WHERE id = ?").execute(arguments: [conversationId])
            return true
        }
    }

    /// This user's invitations, newest first.
    func invitations() throws -> [PigeonConversation] {
        try pool.read { db in
            try String.fetchAll(
                db, sql: "SELECT id FROM conversations c WHERE leftSeq IS NULL AND \(Self.isInvitation) ORDER BY createdAt DESC, id", arguments: [userId]
            ).compactMap { try self.conversation(db, id: $0) }
        }
    }

    /// Invitations that do not know who sent them yet, with the seq that added this user (its change names the sender).
    func invitationsWithoutSender() async throws -> [(conversationId: String, joinedSeq: Int64)] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT c.id, i.joinedSeq FROM conversations c JOIN members i ON i.conversationId = c.id AND i.userId = ?
                    WHERE i.membership = 'invited' AND c.addedBy IS NULL AND c.leftSeq IS NULL ORDER BY c.id
                    """,
                arguments: [userId]
            ).map { ($0[0], $0[1]) }
        }
    }

    /// Records who added this user to the conversation; returns the conversation when it is (still) an invitation.
    func setInvitationSender(conversationId: String, userId sender: String) async throws -> PigeonConversation? {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE conversations SET addedBy = coalesce(addedBy, ?) WHERE id = ?").execute(arguments: [sender, conversationId])
            guard try self.ownMembership(db, conversationId: conversationId) == .invited else { return nil }
            return try self.conversation(db, id: conversationId)
        }
    }

    // MARK: Blocks

    /// The users this user blocked, as the server last listed them, by user id.
    func blockedUsers() throws -> [BlockedUser] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT userId, blockedAt FROM blocks ORDER BY userId").map { BlockedUser(userId: $0[0], blockedAt: $0[1]) }
        }
    }

    /// Replaces the local list with the server's; whether it changed.
    @discardableResult
    func replaceBlockedUsers(_ users: [BlockedUser]) async throws -> Bool {
        try await pool.write { db in
            let before = try Row.fetchAll(db, sql: "SELECT userId, blockedAt FROM blocks ORDER BY userId").map { BlockedUser(userId: $0[0], blockedAt: $0[1]) }
            let after = users.sorted { $0.userId < $1.userId }
            guard before != after else { return false }
            try db.execute(sql: "DELETE FROM blocks")
            for user in after {
                try db.execute(sql: "INSERT OR REPLACE INTO blocks (userId, blockedAt) VALUES (?, ?)", arguments: [user.userId, user.blockedAt])
            }
            return true
        }
    }
}
