import GRDB
import PigeonDomain
import PigeonProtocol

/// The webhook outbox's deliveries in the embedded store (``WebhookStore``): a role of its own that borrows the store's
/// single writer and read pool. The events themselves are recorded by the store's own transactions (``SQLiteMessageStore/recordWebhook(_:_:)``).
public struct SQLiteWebhooks: WebhookStore {
    let store: SQLiteMessageStore

    public func claimWebhookEvents(now: Int64, limit: Int, leaseUntil: Int64, node: String) async throws -> [WebhookDelivery] {
        // Nothing due: no write (the dispatcher polls).
        let due = try await store.pool.read { db in try Self.dueHeads(db, now: now, limit: limit) }
        guard !due.isEmpty else { return [] }
        return try await store.write { db -> [WebhookDelivery] in
            let heads = try Self.dueHeads(db, now: now, limit: limit)
            let claim = try db.cachedStatement(sql: "UPDATE webhook_events SET claimed_until = ?, claimed_by = ? WHERE position = ?")
            for head in heads { try claim.execute(arguments: [leaseUntil, node, head.position]) }
            return heads
        }
    }

    /// The heads of their keys that are due and not leased, oldest first.
    private static func dueHeads(_ db: Database, now: Int64, limit: Int) throws -> [WebhookDelivery] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT w.position, w.id, w.type, w.ordering_key, w.created_at, at_rest_open(w.body), w.attempts, w.retry_from FROM webhook_events w
                    WHERE w.state = 0 AND w.next_attempt_at <= ? AND w.claimed_until <= ?
                        AND NOT EXISTS (
                            SELECT 1 FROM webhook_events p WHERE p.state = 0 AND p.ordering_key = w.ordering_key AND p.position < w.position)
                    ORDER BY w.position LIMIT ?
                    """),
            arguments: [now, now, limit]
        ).map { row in
            WebhookDelivery(
                position: row[0], id: row[1], type: row[2], orderingKey: row[3], createdAt: row[4], body: row[5], attempts: row[6], retryFrom: row[7])
        }
    }

    public func completeWebhookEvent(_ event: WebhookDelivery) async throws {
        try await store.write { db in
            try db.execute(sql: "DELETE FROM webhook_events WHERE position = ? AND state = 0", arguments: [event.position])
        }
    }

    public func retryWebhookEvent(_ event: WebhookDelivery, error: String, retryAt: Int64, node: String) async throws {
        try await store.write { db in
            try db.execute(
                sql: """
                    UPDATE webhook_events SET attempts = attempts + 1, next_attempt_at = ?, last_error = ?, claimed_until = 0, claimed_by = NULL
                    WHERE position = ? AND state = 0 AND claimed_by = ?
                    """,
                arguments: [retryAt, error, event.position, node])
            guard db.changesCount == 1 else { return }
            // The key's later events cannot go before it: not due before it either, so that polls skip them.
            try db.execute(
                sql: """
                    UPDATE webhook_events SET next_attempt_at = ?
                    WHERE state = 0 AND ordering_key = ? AND position > ? AND next_attempt_at < ?
                    """,
                arguments: [retryAt, event.orderingKey, event.position, retryAt])
        }
    }

    public func deadLetterWebhookEvent(_ event: WebhookDelivery, error: String, at now: Int64) async throws {
        try await store.write { db in
            try db.execute(
                sql: """
                    UPDATE webhook_events SET state = 1, dead_at = ?, attempts = attempts + 1, last_error = ?, claimed_until = 0, claimed_by = NULL
                    WHERE position = ? AND state = 0
                    """,
                arguments: [now, error, event.position])
        }
    }

    public func releaseWebhookClaims(node: String) async throws {
        try await store.write { db in
            try db.execute(sql: "UPDATE webhook_events SET claimed_until = 0, claimed_by = NULL WHERE claimed_by = ?", arguments: [node])
        }
    }

    public func deadWebhookEvents(limit: Int) async throws -> [DeadWebhookEvent] {
        try await store.pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, type, ordering_key, created_at, dead_at, attempts, last_error, at_rest_open(body) FROM webhook_events
                    WHERE state = 1 ORDER BY dead_at, position LIMIT ?
                    """,
                arguments: [limit]
            ).map { row in
                DeadWebhookEvent(
                    id: row[0], type: row[1], orderingKey: row[2], createdAt: row[3], deadAt: row[4], attempts: row[5], lastError: row[6] ?? "",
                    body: row[7])
            }
        }
    }

    public func replayWebhookEvent(id: String, now: Int64) async throws -> Bool {
        try await store.write { db -> Bool in
            // A new position: behind the events of its key recorded since it died.
            try db.execute(
                sql: """
                    INSERT INTO webhook_events(id, ordering_key, type, created_at, body, next_attempt_at, retry_from)
                    SELECT id, ordering_key, type, created_at, body, ?, ? FROM webhook_events WHERE state = 1 AND id = ?
                    """,
                arguments: [now, now, id])
            guard db.changesCount > 0 else { return false }
            try db.execute(sql: "DELETE FROM webhook_events WHERE state = 1 AND id = ?", arguments: [id])
            return true
        }
    }

    public func webhookStats() async throws -> WebhookStats {
        try await store.pool.read { db in
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT (SELECT count(*) FROM webhook_events WHERE state = 0), (SELECT count(*) FROM webhook_events WHERE state = 1),
                        (SELECT created_at FROM webhook_events WHERE state = 0 ORDER BY position LIMIT 1)
                    """)
            return WebhookStats(pending: row?[0] ?? 0, dead: row?[1] ?? 0, oldestPendingAt: row?[2])
        }
    }
}
