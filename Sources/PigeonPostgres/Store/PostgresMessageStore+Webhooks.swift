import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// The webhook outbox of the production store (``WebhookStore``): the `webhook_events` table, written by the
/// transactions that commit what each event reports, claimed by any node's dispatcher under a lease.
///
/// Most events ride in the statement that writes a transaction's events (``EventRows/webhooks``, inserted by
/// ``write(_:_:)`` after the partitions' offsets are taken), so that the one-statement batches record them atomically
/// too. Their positions come from a sequence, taken after the locks that order the transactions they report (the
/// conversation's row, the target message's row): the events of one conversation get positions in commit order.
extension PostgresMessageStore {
    /// The dispatcher's side of the webhook outbox.
    public var webhookDeliveries: PostgresWebhooks { PostgresWebhooks(store: self) }

    /// The push role.
    public var push: PostgresPush { PostgresPush(store: self) }

    /// Records `event` (nil: nothing to do) on `connection`, inside its transaction (the device transactions, which
    /// write no other event).
    package static func recordWebhook(
        _ connection: PostgresConnection, _ event: WebhookEventRow?, cipher: AtRestCipher, logger: Logger
    ) async throws {
        guard let event else { return }
        try await connection.query(
            """
            INSERT INTO webhook_events(id, ordering_key, type, created_at, body, next_attempt_at, retry_from)
            VALUES (\(event.id), \(event.orderingKey), \(event.type.rawValue), \(event.createdAt), \(cipher.seal(event.body)), \(event.createdAt), \(event.createdAt))
            """, logger: logger)
    }

    /// The events a message planned into `batch` reports: `message.stored` or `members.changed`; for an edit, its
    /// target as it reads after the batch's change (`message.edited`); for a delete, `message.deleted` by whoever the
    /// delete names. Call after the message and its change to the target are in `batch`.
    package func recordStoredWebhooks(
        into batch: inout BatchWrite, message: BufferedMessage, stored: Message, lifecycle: (serverId: String, newBody: String?)?,
        targets: [String: StoredTarget], at now: Int64
    ) {
        guard webhooks.isOn else { return }
        guard let lifecycle else { return batch.events.webhooks.record(webhooks.stored(stored, at: now)) }
        if lifecycle.newBody == nil {
            batch.events.webhooks.record(
                webhooks.messageDeleted(
                    conversationId: message.conversationId, serverId: lifecycle.serverId, by: MessageLifecycle.deletedBy(message), at: now))
        } else if webhooks.wants(.messageEdited), let edited = batch.current(lifecycle.serverId, in: message.conversationId, stored: targets) {
            batch.events.webhooks.record(webhooks.messageEdited(edited, at: now))
        }
    }

    /// Adds their reactions (as no one in particular sees them) and reply previews to the stored messages that the
    /// batch's edits name, read under their row locks: what `message.edited` carries. Only with `message.edited` on.
    package func decorateEditTargets(_ targets: inout [String: StoredTarget], of messages: [BufferedMessage], _ connection: PostgresConnection)
        async throws
    {
        guard webhooks.wants(.messageEdited) else { return }
        let edited = Set(messages.filter { $0.type == ServerMessageType.edit }.compactMap { try? MessageLifecycle.target(of: $0)?.serverId })
        let keys = edited.compactMap { targets[$0] }.map { ($0.message.conversationId, $0.message.seq) }
        guard !keys.isEmpty else { return }
        var rows: [MessageKey: [ReactionRow]] = [:]
        for try await (conversationId, seq, key, userId, at) in try await connection.query(
            """
            SELECT r.conversation_id, r.seq, r.key, r.user_id, r.at FROM reactions r
            JOIN unnest(\(keys.map { $0.0 })::text[], \(keys.map { $0.1 })::bigint[]) AS k(c, s) ON r.conversation_id = k.c AND r.seq = k.s
            """, logger: logger
        ).decode((String, Int64, String, String, Int64).self) {
            rows[MessageKey(conversationId: conversationId, seq: seq), default: []].append(ReactionRow(key: key, userId: userId, at: at))
        }
        let quoted = edited.compactMap { targets[$0]?.message }.compactMap { message in message.replyTo.map { (message.conversationId, $0) } }
        var previews: [MessageKey: ReplyPreview] = [:]
        if !quoted.isEmpty {
            for try await (conversationId, serverId, senderId, type, body, deleted) in try await connection.query(
                """
                SELECT m.conversation_id, m.server_id, m.sender_id, m.type, m.body, m.deleted_at IS NOT NULL FROM messages m
                JOIN unnest(\(quoted.map { $0.0 })::text[], \(quoted.map { $0.1 })::text[]) AS k(c, i) ON m.server_id = k.i AND m.conversation_id = k.c
                """, logger: logger
            ).decode((String, String, String, String, String, Bool).self) {
                previews[MessageKey(conversationId: conversationId, serverId: serverId)] = ReplyPreview(
                    serverId: serverId, senderId: senderId, type: type, body: try cipher.open(body), deleted: deleted)
            }
        }
        for serverId in edited {
            guard var target = targets[serverId] else { continue }
            let message = target.message
            target.message.reactions = ReactionRules.aggregate(
                rows[MessageKey(conversationId: message.conversationId, seq: message.seq)] ?? [], reader: nil)
            if let replyTo = message.replyTo {
                target.message.replyPreview = previews[MessageKey(conversationId: message.conversationId, serverId: replyTo)]
            }
            targets[serverId] = target
        }
    }

    // MARK: Delivery
}

/// Webhook events to insert with a transaction's other rows, column by column.
package struct WebhookRows {
    package var ids: [String] = []
    package var orderingKeys: [String] = []
    package var types: [String] = []
    package var createdAt: [Int64] = []
    package var bodies: [String] = []

    package var isEmpty: Bool { ids.isEmpty }

    /// Adds `event` (nil: nothing).
    package mutating func record(_ event: WebhookEventRow?) {
        guard let event else { return }
        ids.append(event.id)
        orderingKeys.append(event.orderingKey)
        types.append(event.type.rawValue)
        createdAt.append(event.createdAt)
        bodies.append(event.body)
    }
}

extension BatchWrite {
    /// The message `serverId` of `conversationId` as it reads at this point of the batch (stored in it, or before it
    /// with what the batch did to it since); nil when it is not in the conversation.
    package func current(_ serverId: String, in conversationId: String, stored: [String: PostgresMessageStore.StoredTarget]) -> Message? {
        if let index = messages.index(of: serverId) {
            guard messages.conversationIds[index] == conversationId else { return nil }
            let replyTo = messages.replyTos[index].isEmpty ? nil : messages.replyTos[index]
            return Message(
                serverId: serverId, clientMessageId: messages.clientMessageIds[index], conversationId: conversationId, seq: messages.seqs[index],
                senderId: messages.senderIds[index], senderDeviceId: messages.senderDeviceIds[index], type: messages.types[index],
                body: messages.bodies[index], clientTimestamp: messages.clientTimestamps[index], acceptedAt: messages.acceptedAt[index],
                storedAt: messages.storedAt[index], editedAt: messages.editedAt[index] == 0 ? nil : messages.editedAt[index],
                deletedAt: messages.deletedAt[index] == 0 ? nil : messages.deletedAt[index], replyTo: replyTo,
                replyPreview: replyTo.flatMap { preview(of: $0, in: conversationId, stored: stored) },
                threadRoot: messages.threadRoots[index].isEmpty ? nil : messages.threadRoots[index],
                attachments: messages.deletedAt[index] == 0 ? messages.attachments[index] : [])
        }
        guard let found = stored[serverId], found.conversationId == conversationId else { return nil }
        var message = found.message
        if let index = lifecycle.targetIds.firstIndex(of: serverId) {
            message.body = lifecycle.bodies[index]
            if lifecycle.editedAt[index] != 0 { message.editedAt = lifecycle.editedAt[index] }
            if lifecycle.deletedAt[index] != 0 {
                message.deletedAt = lifecycle.deletedAt[index]
                message.attachments = []
            }
        }
        return message
    }
}
