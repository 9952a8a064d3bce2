import GRDB
import PigeonDomain
import PigeonProtocol

/// The webhook outbox of the embedded store: the `webhook_events` table, written by the transactions that commit what
/// each event reports (``recordWebhook(_:_:)``); ``SQLiteWebhooks`` reads and changes it for the dispatcher. The single
/// writer serialises every change, so events of one key are recorded in commit order.
extension SQLiteMessageStore {
    /// The dispatcher's side of the webhook outbox.
    public var webhookDeliveries: SQLiteWebhooks { SQLiteWebhooks(store: self) }

    /// The push role.
    public var push: SQLitePush { SQLitePush(store: self) }

    /// Records `event` (nil: the type is not enabled, nothing to do) in the transaction of `db`.
    static func recordWebhook(_ db: Database, _ event: WebhookEventRow?) throws {
        guard let event else { return }
        try db.cachedStatement(
            sql: """
                INSERT INTO webhook_events(id, ordering_key, type, created_at, body, next_attempt_at, retry_from)
                VALUES (?, ?, ?, ?, at_rest_seal(?), ?, ?)
                """
        ).execute(arguments: [event.id, event.orderingKey, event.type.rawValue, event.createdAt, event.body, event.createdAt, event.createdAt])
    }

    /// The events a message stored with its seq reports: `message.stored` or `members.changed`; for an edit, its
    /// target as it now reads (`message.edited`); for a delete, `message.deleted` by whoever the delete names. Call
    /// after the message and what it does to its target are written.
    func recordStoredWebhooks(
        _ db: Database, message: BufferedMessage, stored: Message, lifecycle: (serverId: String, newBody: String?)?, at now: Int64
    ) throws {
        guard webhooks.isOn else { return }
        guard let lifecycle else { return try Self.recordWebhook(db, webhooks.stored(stored, at: now)) }
        if lifecycle.newBody == nil {
            try Self.recordWebhook(
                db,
                webhooks.messageDeleted(
                    conversationId: message.conversationId, serverId: lifecycle.serverId, by: MessageLifecycle.deletedBy(message), at: now))
        } else if webhooks.wants(.messageEdited) {
            var target = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE server_id = ? AND conversation_id = ?"),
                arguments: [lifecycle.serverId, message.conversationId]
            ).map { Self.message($0, from: 0) }
            try Self.decorate(db, &target, reader: nil)
            if let edited = target.first { try Self.recordWebhook(db, webhooks.messageEdited(edited, at: now)) }
        }
    }

    // MARK: Delivery
}
