import GRDB
import PigeonProtocol

/// Group chats in the local database (API.md 1.1): the member list from the server's snapshots and from the
/// `pigeon.members` messages in the conversation's order, this user's removal, and the per-member counts of its
/// own messages.
///
/// The member list is known as of a seq: a snapshot (a `Conversation` read from the server) is as of its `lastSeq`, a
/// member change as of its own seq. A snapshot replaces the list unless a later change was applied already; a change
/// is applied unless a snapshot already reflects it. A change that arrives after a later one (a gap filled late) is
/// not applied over it: the conversation is fetched again instead.
extension LocalStore {
    /// Throws ``PigeonClientError/Code-swift.struct/unknownConversation`` when the conversation is not on this device,
    /// ``PigeonClientError/Code-swift.struct/notMember`` when this user is no longer a member,
    /// ``PigeonClientError/Code-swift.struct/invitationPending`` when it is invited and has not accepted.
    func requireMembership(_ db: Database, conversationId: String) throws {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT leftSeq FROM conversations WHERE id = ?"), arguments: [conversationId]) else {
            throw PigeonClientError(.unknownConversation, "conversation \(conversationId) is not on this device")
        }
        if (row[0] as Int64?) != nil {
            throw PigeonClientError(.notMember, "\(userId) is no longer a member of conversation \(conversationId) (removed, or left)")
        }
        if try ownMembership(db, conversationId: conversationId) == .invited {
            throw PigeonClientError(.invitationPending, "\(userId) is invited to conversation \(conversationId): accept the invitation first")
        }
    }

    /// A conversation as the server answered it (a listing, `GET`, a member call's answer, `conversation.created`):
    /// its members as of its `lastSeq`. Without this user among them, this user has left.
    func applySnapshot(_ db: Database, _ conversation: Conversation, outcome: inout ApplyOutcome, watermarksMoved: inout Set<String>) throws {
        let known = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT membersSnapshotSeq, membersChangeSeq FROM conversations WHERE id = ?"), arguments: [conversation.id])
        let snapshotSeq: Int64 = known?[0] ?? 0
        let changeSeq: Int64 = known?[1] ?? 0
        let current = conversation.lastSeq >= snapshotSeq && conversation.lastSeq >= changeSeq
        let membershipBefore = try ownMembership(db, conversationId: conversation.id)
        try db.cachedStatement(sql: """
            INSERT INTO conversations (id, kind, name, createdAt, lastSeq, lastActivityAt) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, createdAt = excluded.createdAt, lastSeq = max(lastSeq, excluded.lastSeq),
                needsFetch = 0
            """).execute(arguments: [
                conversation.id, conversation.kind.rawValue, conversation.name, conversation.createdAt, conversation.lastSeq, conversation.createdAt,
            ])
        let me = conversation.members.first { $0.userId == userId }
        if current {
            try db.cachedStatement(sql: "UPDATE conversations SET name = ?, membersSnapshotSeq = ? WHERE id = ?")
                .execute(arguments: [conversation.name, conversation.lastSeq, conversation.id])
            let present = conversation.members.map(\.userId)
            try db.execute(
                sql: "DELETE FROM members WHERE conversationId = ? AND userId NOT IN (\(databaseQuestionMarks(count: present.count)))",
                arguments: StatementArguments([conversation.id] + present))
            for member in conversation.members {
                try db.cachedStatement(sql: """
                    INSERT INTO members (conversationId, userId, role, joinedSeq, deliveredSeq, readSeq, membership) VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (conversationId, userId) DO UPDATE SET role = excluded.role, joinedSeq = excluded.joinedSeq,
                        deliveredSeq = max(deliveredSeq, excluded.deliveredSeq), readSeq = max(readSeq, excluded.readSeq),
                        membership = excluded.membership
                    """).execute(arguments: [
                        conversation.id, member.userId, member.role.rawValue, member.joinedSeq, member.deliveredSeq, member.readSeq,
                        member.membership.rawValue,
                    ])
            }
            if let me {
                try rejoin(db, conversationId: conversation.id, joinedSeq: me.joinedSeq)
            } else if membershipBefore == .invited {
                // An invitation declined (on another device) or withdrawn: it leaves nothing behind.
                outcome.invitationsGone.append(conversation.id)
            } else {
                try markLeft(db, conversationId: conversation.id, atSeq: conversation.lastSeq)
            }
        } else {
            // This device applied a later change: only the watermarks are news, and an accepted invitation (accepting
            // takes no seq; nobody goes from joined back to invited without a change).
            for member in conversation.members {
                try db.cachedStatement(sql: """
                    UPDATE members SET deliveredSeq = max(deliveredSeq, ?), readSeq = max(readSeq, ?),
                        membership = CASE WHEN ? = 'joined' THEN 'joined' ELSE membership END
                    WHERE conversationId = ? AND userId = ?
                    """).execute(arguments: [member.deliveredSeq, member.readSeq, member.membership.rawValue, conversation.id, member.userId])
            }
        }
        try noteInvitation(db, conversation, before: membershipBefore, outcome: &outcome)
        watermarksMoved.insert(conversation.id)
        outcome.noteConversation(conversation.id)
    }

    /// This user is a member (again) from `joinedSeq` on: nothing older exists for it, so the contiguous seq starts
    /// just below (a member added later would otherwise wait forever for seqs it may not see).
    private func rejoin(_ db: Database, conversationId: String, joinedSeq: Int64) throws {
        try db.cachedStatement(sql: """
            UPDATE conversations SET leftSeq = NULL, contiguousSeq = max(contiguousSeq, ?), lastSeq = max(lastSeq, ?) WHERE id = ?
            """).execute(arguments: [joinedSeq - 1, joinedSeq - 1, conversationId])
    }

    /// This user was removed or left at `seq`: the conversation stays, read-only, without its member list.
    func markLeft(_ db: Database, conversationId: String, atSeq seq: Int64) throws {
        try db.cachedStatement(sql: "UPDATE conversations SET leftSeq = coalesce(leftSeq, ?), needsFetch = 0, addedBy = NULL WHERE id = ?")
            .execute(arguments: [seq, conversationId])
        try db.cachedStatement(sql: "DELETE FROM members WHERE conversationId = ?").execute(arguments: [conversationId])
    }

    /// The server answered 404 for a conversation on this device: this user is not a member (any more).
    func markLeft(conversationId: String) async throws -> PigeonConversation? {
        try await pool.write { db in
            guard try Int.fetchOne(db, sql: "SELECT count(*) FROM conversations WHERE id = ? AND leftSeq IS NULL", arguments: [conversationId]) == 1 else {
                return nil
            }
            try self.markLeft(db, conversationId: conversationId, atSeq: 0)
            return try self.conversation(db, id: conversationId)
        }
    }

    /// A `pigeon.members` message new on this device, at its seq.
    func applyMembersChange(
        _ db: Database, _ change: MembersChange, conversationId: String, seq: Int64, outcome: inout ApplyOutcome, watermarksMoved: inout Set<String>
    ) throws {
        outcome.membersChanges.append((conversationId, change))
        outcome.noteConversation(conversationId)
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT membersSnapshotSeq, membersChangeSeq FROM conversations WHERE id = ?"), arguments: [conversationId])
        else { return }
        let (snapshotSeq, changeSeq): (Int64, Int64) = (row[0], row[1])
        if change.action == .added, change.userIds.contains(userId) {
            try db.cachedStatement(sql: "UPDATE conversations SET addedBy = ? WHERE id = ?").execute(arguments: [change.by, conversationId])
        }
        guard seq > snapshotSeq else { return }
        guard seq > changeSeq else {
            try requestFetch(db, conversationId: conversationId, outcome: &outcome)
            return
        }
        switch change.action {
        case .added:
            // Whether each joined or is only invited (API.md 1.2) is in the conversation, not in the change: read it.
            try requestFetch(db, conversationId: conversationId, outcome: &outcome)
            for member in change.userIds {
                try db.cachedStatement(sql: """
                    INSERT INTO members (conversationId, userId, role, joinedSeq, deliveredSeq, readSeq) VALUES (?, ?, ?, ?, ?, ?)
                    ON CONFLICT (conversationId, userId) DO UPDATE SET role = excluded.role, joinedSeq = excluded.joinedSeq,
                        deliveredSeq = max(deliveredSeq, excluded.deliveredSeq), readSeq = max(readSeq, excluded.readSeq)
                    """).execute(arguments: [conversationId, member, (change.role ?? .member).rawValue, seq, seq - 1, seq - 1])
            }
            if change.userIds.contains(userId) {
                try rejoin(db, conversationId: conversationId, joinedSeq: seq)
                try requestFetch(db, conversationId: conversationId, outcome: &outcome)
            }
        case .removed, .left:
            if change.userIds.contains(userId), try ownMembership(db, conversationId: conversationId) == .invited {
                // Declined (on any device of this user) or withdrawn before it was accepted: gone from the device.
                outcome.invitationsGone.append(conversationId)
            } else if change.userIds.contains(userId) {
                try markLeft(db, conversationId: conversationId, atSeq: seq)
            } else {
                try db.execute(
                    sql: "DELETE FROM members WHERE conversationId = ? AND userId IN (\(databaseQuestionMarks(count: change.userIds.count)))",
                    arguments: StatementArguments([conversationId] + change.userIds))
            }
        case .role:
            if let role = change.role {
                try db.execute(
                    sql: "UPDATE members SET role = ? WHERE conversationId = ? AND userId IN (\(databaseQuestionMarks(count: change.userIds.count)))",
                    arguments: StatementArguments([role.rawValue, conversationId] + change.userIds))
            }
        case .renamed:
            try db.cachedStatement(sql: "UPDATE conversations SET name = ? WHERE id = ?").execute(arguments: [change.name, conversationId])
        }
        try db.cachedStatement(sql: "UPDATE conversations SET membersChangeSeq = ? WHERE id = ?").execute(arguments: [seq, conversationId])
        watermarksMoved.insert(conversationId)
    }

    /// Marks the conversation to be read again from the server (`GET /v1/conversations/{id}`).
    func requestFetch(_ db: Database, conversationId: String, outcome: inout ApplyOutcome) throws {
        try db.cachedStatement(sql: "UPDATE conversations SET needsFetch = 1 WHERE id = ? AND leftSeq IS NULL").execute(arguments: [conversationId])
        if db.changesCount > 0 { outcome.fetchNeeded = true }
    }

    /// Conversations to read again from the server: unknown ones (a message arrived first), this user added to one,
    /// a member change that came out of order.
    func conversationsToFetch() async throws -> [String] {
        try await pool.read { db in
            try String.fetchAll(db, sql: "SELECT id FROM conversations WHERE needsFetch = 1 AND leftSeq IS NULL ORDER BY id")
        }
    }

    /// Conversations on this device that this user is a member of, as far as it knows.
    func memberConversationIds() async throws -> [String] {
        try await pool.read { db in try String.fetchAll(db, sql: "SELECT id FROM conversations WHERE leftSeq IS NULL ORDER BY id") }
    }

    func members(_ db: Database, conversationId: String) throws -> [ConversationMember] {
        try Row.fetchAll(
            db.cachedStatement(sql: "SELECT userId, role, joinedSeq, deliveredSeq, readSeq, membership FROM members WHERE conversationId = ? ORDER BY userId"),
            arguments: [conversationId]
        ).map {
            ConversationMember(
                userId: $0[0], role: MemberRole(rawValue: $0[1]) ?? .member, joinedSeq: $0[2],
                deliveredSeq: $0[3], readSeq: $0[4], membership: MembershipState(rawValue: $0[5]) ?? .joined)
        }
    }

    // MARK: Per-member counts

    /// Recounts this user's messages whose counts may still move (not yet read by all, or never counted), and lets
    /// the counts take their status to ✓✓ and blue ✓✓.
    func refreshRecipients(_ db: Database, conversationId: String, outcome: inout ApplyOutcome) throws {
        let members = try members(db, conversationId: conversationId)
        let candidates = try Row.fetchAll(
            db.cachedStatement(sql: """
                SELECT localId, seq, recipientCount, deliveredCount, readCount, withheldFrom FROM messages
                WHERE conversationId = ? AND isOutgoing = 1 AND seq IS NOT NULL AND type NOT LIKE 'pigeon.%'
                    AND (status IN ('sent', 'stored', 'delivered') OR recipientCount IS NULL)
                ORDER BY seq
                """),
            arguments: [conversationId])
        for row in candidates {
            let stored: RecipientCounts? = (row[2] as Int?).map { RecipientCounts(members: $0, delivered: row[3] ?? 0, read: row[4] ?? 0) }
            try recount(
                db, localId: row[0], seq: row[1], members: members, stored: stored, withheldFrom: Self.withheldColumn(row[5]), outcome: &outcome)
        }
    }

    /// The members a `withheldFrom` column names.
    static func withheldColumn(_ text: String?) -> Set<String> {
        Set(decodeJSON([String].self, text) ?? [])
    }

    /// Records the members the server says this user's message at `localId` is withheld from (none: nothing to do).
    func recordWithheld(_ db: Database, localId: Int64, _ withheldFrom: [String]?) throws {
        guard let withheldFrom, !withheldFrom.isEmpty else { return }
        try db.cachedStatement(sql: "UPDATE messages SET withheldFrom = ? WHERE localId = ?").execute(arguments: [Self.json(withheldFrom.sorted()), localId])
    }

    /// Counts one of this user's stored messages and applies the evidence the counts give.
    func recount(
        _ db: Database, localId: Int64, seq: Int64, members: [ConversationMember], stored: RecipientCounts?, withheldFrom: Set<String>? = nil,
        outcome: inout ApplyOutcome
    ) throws {
        let withheld =
            try withheldFrom
            ?? Self.withheldColumn(String.fetchOne(db.cachedStatement(sql: "SELECT withheldFrom FROM messages WHERE localId = ?"), arguments: [localId]))
        let counts = RecipientCounts.counting(seq: seq, senderId: userId, members: members, withheldFrom: withheld)
        if counts != stored {
            try db.cachedStatement(sql: "UPDATE messages SET recipientCount = ?, deliveredCount = ?, readCount = ? WHERE localId = ?")
                .execute(arguments: [counts.members, counts.delivered, counts.read, localId])
            outcome.noteRecipients(localId)
        }
        if counts.deliveredToAll { outcome.noteStatus(try applyEvidence(db, .deliveredToAll, localId: localId)) }
        if counts.readByAll { outcome.noteStatus(try applyEvidence(db, .readByAll, localId: localId)) }
    }
}
