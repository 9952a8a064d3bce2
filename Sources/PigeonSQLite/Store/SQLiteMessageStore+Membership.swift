import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Membership changes: adds, removals, roles and renames, each with its `pigeon.members` message.
extension SQLiteMessageStore {
    struct MembershipWrite: Sendable {
        var members: [String]
        var events: [StoredEvent]
    }

    public func changeMembership(
        conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int, admission: MemberAdmission
    ) async throws -> Conversation {
        let written = try await write(
            { [self, membersCache] db -> MembershipWrite? in
                guard let row = try Row.fetchOne(db, sql: "SELECT kind, name, last_seq FROM conversations WHERE id = ?", arguments: [conversationId])
                else { throw PigeonError.conversationNotFound }
                let members = try Self.conversationMembers(db, conversationId)
                var plan = try MembershipPlan(
                    operation, by: actor.userId, kind: ConversationKind(rawValue: row[0]) ?? .group, name: row[1],
                    members: members, lastSeq: row[2], maxMembers: maxMembers)
                guard !plan.isEmpty else { return nil }
                let now = WallClock.nowMillis()
                let admitted = try admit(db, plan.added.map(\.userId), by: actor.userId, admission: admission, now: now)
                plan.admit(admitted, before: members)
                // Processing later in this group commit must read the new list from the tables, not the cache.
                membersCache.changed(conversationId, members: nil)
                for member in plan.added {
                    try db.execute(
                        sql: """
                            INSERT INTO members(conversation_id, user_id, role, joined_seq, delivered_seq, read_seq, membership)
                            VALUES (?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            conversationId, member.userId, member.role.rawValue, member.joinedSeq, member.deliveredSeq, member.readSeq,
                            member.membership.rawValue,
                        ])
                }
                for userId in plan.removed {
                    if members.contains(where: { $0.userId == userId && $0.membership == .invited }) {
                        try db.execute(
                            sql: """
                                UPDATE stranger_adds SET added = \(ConsentRules.endedInvitationKey)
                                WHERE added = ? AND adder IN (SELECT user_id FROM members WHERE conversation_id = ?)
                                """,
                            arguments: [userId, conversationId])
                    }
                    try db.execute(sql: "DELETE FROM members WHERE conversation_id = ? AND user_id = ?", arguments: [conversationId, userId])
                }
                for (userId, role) in plan.roles {
                    try db.execute(
                        sql: "UPDATE members SET role = ? WHERE conversation_id = ? AND user_id = ?", arguments: [role.rawValue, conversationId, userId])
                }
                if let name = plan.name {
                    try db.execute(sql: "UPDATE conversations SET name = ? WHERE id = ?", arguments: [name, conversationId])
                }
                let payloads = EventPayload()
                var events: [StoredEvent] = []
                for (message, change) in zip(plan.messages(conversationId: conversationId, actor: actor, now: now), plan.changes) {
                    try Self.insertMessage(db, message, targetId: nil)
                    try Self.recordWebhook(db, webhooks.stored(message, at: now))
                    let payload = payloads.messageNew(message)
                    for recipient in change.recipients {
                        events.append(
                            try Self.insertEvent(
                                db, type: "message.new", userId: recipient, deviceId: nil, excludedDeviceId: nil, payload: payload, at: now,
                                message: (conversationId, message.seq)))
                    }
                }
                try db.execute(
                    sql: "UPDATE conversations SET last_seq = ?, updated_at = MAX(updated_at, ?) WHERE id = ?",
                    arguments: [plan.lastSeq, now, conversationId])
                return MembershipWrite(members: plan.membersAfter.map(\.userId), events: events)
            },
            afterCommit: { [fanout, membersCache] written in
                guard let written else { return }
                membersCache.changed(conversationId, members: written.members)
                fanout.publish(written.events)
            })
        if actor.userId == SystemSender.service {
            // The server API's actor is no member: it sees the conversation as the operator does.
            guard let conversation = try await conversation(id: conversationId) else { throw PigeonError.conversationNotFound }
            return conversation
        }
        if written == nil, try await member(actor.userId, of: conversationId) == nil { throw PigeonError.conversationNotFound }
        guard let conversation = try await pool.read({ db in try Self.conversationView(db, id: conversationId, for: actor.userId) }) else {
            throw PigeonError.conversationNotFound
        }
        return conversation
    }
}
