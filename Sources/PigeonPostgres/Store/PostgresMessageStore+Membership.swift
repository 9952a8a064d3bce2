import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Membership changes, and what the accept path of an edit, a delete, a reply or a reaction reads of its target.
extension PostgresMessageStore {
    // MARK: Membership changes

    /// Under the conversation's row lock (the one processing takes), so a change and a batch of the conversation are
    /// ordered: the change's `pigeon.members` messages take the next seqs, and a batch that planned on this node's
    /// cached last seq fails its check and re-reads the members under the lock.
    public func changeMembership(
        conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int, admission: MemberAdmission
    ) async throws -> Conversation {
        let (membersAfter, committed) = try await transaction { connection -> ([String]?, [StoredEvent]) in
            var found: (kind: String, name: String?, lastSeq: Int64)?
            for try await row in try await connection.query(
                "SELECT kind, name, last_seq FROM conversations WHERE id = \(conversationId) FOR UPDATE", logger: logger
            ).decode((String, String?, Int64).self) {
                found = row
            }
            guard let found else { throw PigeonError.conversationNotFound }
            var members: [ConversationMember] = []
            for try await row in try await connection.query(
                "SELECT \(unescaped: Self.memberColumns) FROM members WHERE conversation_id = \(conversationId) ORDER BY user_id", logger: logger
            ).decode(MemberTuple.self) {
                members.append(Self.member(row))
            }
            var plan = try MembershipPlan(
                operation, by: actor.userId, kind: ConversationKind(rawValue: found.kind) ?? .group, name: found.name, members: members,
                lastSeq: found.lastSeq, maxMembers: maxMembers)
            guard !plan.isEmpty else { return (nil, []) }
            let now = WallClock.nowMillis()
            let admitted = try await admit(connection, plan.added.map(\.userId), by: actor.userId, admission: admission, now: now)
            plan.admit(admitted, before: members)
            if !plan.added.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO members(conversation_id, user_id, role, joined_seq, delivered_seq, read_seq, membership)
                    SELECT \(conversationId), u, r, j, j - 1, j - 1, s
                    FROM unnest(\(plan.added.map(\.userId))::text[], \(plan.added.map(\.role.rawValue))::text[], \(plan.added.map(\.joinedSeq))::bigint[],
                        \(plan.added.map(\.membership.rawValue))::text[])
                        AS t(u, r, j, s)
                    """, logger: logger)
            }
            let declined = plan.removed.filter { userId in members.contains { $0.userId == userId && $0.membership == .invited } }
            if !declined.isEmpty {
                try await connection.query(
                    """
                    UPDATE stranger_adds SET added = \(unescaped: ConsentRules.endedInvitationKey)
                    WHERE added = ANY(\(declined)) AND adder IN (SELECT user_id FROM members WHERE conversation_id = \(conversationId))
                    """, logger: logger)
            }
            if !plan.removed.isEmpty {
                try await connection.query(
                    "DELETE FROM members WHERE conversation_id = \(conversationId) AND user_id = ANY(\(plan.removed))", logger: logger)
            }
            for (userId, role) in plan.roles {
                try await connection.query(
                    "UPDATE members SET role = \(role.rawValue) WHERE conversation_id = \(conversationId) AND user_id = \(userId)", logger: logger)
            }
            if let name = plan.name {
                try await connection.query("UPDATE conversations SET name = \(name) WHERE id = \(conversationId)", logger: logger)
            }
            let payloads = EventPayload()
            let part = partition(of: conversationId)
            var batch = BatchWrite(now: now)
            batch.lastSeqs[conversationId] = plan.lastSeq
            for (message, change) in zip(plan.messages(conversationId: conversationId, actor: actor, now: now), plan.changes) {
                batch.messages.append(message)
                batch.events.webhooks.record(webhooks.stored(message, at: now))
                let rendered = payloads.messageNew(message)
                for recipient in change.recipients {
                    batch.events.append(
                        type: "message.new", userId: recipient, payload: nil, at: now, partition: part,
                        message: (conversationId, message.seq, rendered))
                }
            }
            return (plan.membersAfter.map(\.userId), try await write(batch, connection))
        }
        if let membersAfter {
            membersCache.changed(conversationId, members: membersAfter)
            forgetLastSeqs([conversationId])
            watermarkCache.withLockedValue { cache in
                for key in cache.keys where key.conversationId == conversationId { cache[key] = nil }
            }
            fanout.publish(committed)
            await fanout.announceMembersChange(conversationId)
        } else if actor.userId != SystemSender.service, try await member(actor.userId, of: conversationId) == nil {
            throw PigeonError.conversationNotFound
        }
        if actor.userId == SystemSender.service {
            // The server API's actor is no member: it sees the conversation as the operator does.
            guard let conversation = try await conversation(id: conversationId) else { throw PigeonError.conversationNotFound }
            return conversation
        }
        guard let conversation = try await conversationView(id: conversationId, for: actor.userId) else { throw PigeonError.conversationNotFound }
        return conversation
    }

    // MARK: Targets of edits, deletes, replies and reactions

    public func messageTarget(conversationId: String, serverId: String) async throws -> MessageTarget? {
        for try await (senderId, type, deleted, seq, threadRoot) in try await client.query(
            """
            SELECT sender_id, type, deleted_at IS NOT NULL, seq, thread_root FROM messages
            WHERE server_id = \(serverId) AND conversation_id = \(conversationId)
            """, logger: logger
        ).decode((String, String, Bool, Int64, String?).self) {
            return MessageTarget(senderId: senderId, type: type, deleted: deleted, seq: seq, threadRoot: threadRoot)
        }
        return nil
    }

    public func storedMessage(senderId: String, deviceId: String, clientMessageId: String) async throws -> SendMessageResponse? {
        for try await (serverId, acceptedAt, seq) in try await client.query(
            """
            SELECT server_id, accepted_at, seq FROM messages
            WHERE sender_id = \(senderId) AND sender_device_id = \(deviceId) AND client_message_id = \(clientMessageId)
            """, logger: logger
        ).decode((String, Int64, Int64).self) {
            return SendMessageResponse(serverId: serverId, clientMessageId: clientMessageId, status: .stored, acceptedAt: acceptedAt, seq: seq)
        }
        return nil
    }
}
