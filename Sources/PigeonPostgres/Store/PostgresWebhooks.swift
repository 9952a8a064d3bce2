import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// The webhook outbox's deliveries in PostgreSQL (``WebhookStore``): a role of its own that borrows the store's pool. The
/// events are recorded by the store's own statements (``PostgresMessageStore/recordWebhook(_:_:cipher:logger:)`` and the batch
/// statement's `hooks`).
public struct PostgresWebhooks: WebhookStore {
    let store: PostgresMessageStore
    private var logger: Logger { store.logger }

    public func claimWebhookEvents(now: Int64, limit: Int, leaseUntil: Int64, node: String) async throws -> [WebhookDelivery] {
        // `SKIP LOCKED`: nodes claiming at once take different heads instead of waiting for each other.
        var claimed: [WebhookDelivery] = []
        for try await (position, id, type, key, createdAt, body, attempts, retryFrom) in try await store.client.query(
            """
            WITH due AS (
                SELECT w.position FROM webhook_events w
                WHERE w.state = 0 AND w.next_attempt_at <= \(now) AND w.claimed_until <= \(now)
                    AND NOT EXISTS (
                        SELECT 1 FROM webhook_events p WHERE p.state = 0 AND p.ordering_key = w.ordering_key AND p.position < w.position)
                ORDER BY w.position LIMIT \(limit)
                FOR UPDATE SKIP LOCKED)
            UPDATE webhook_events w SET claimed_until = \(leaseUntil), claimed_by = \(node)
            FROM due WHERE w.position = due.position AND w.claimed_until <= \(now)
            RETURNING w.position, w.id, w.type, w.ordering_key, w.created_at, w.body, w.attempts, w.retry_from
            """, logger: logger
        ).decode((Int64, String, String, String, Int64, String, Int32, Int64).self) {
            claimed.append(
                WebhookDelivery(
                    position: position, id: id, type: type, orderingKey: key, createdAt: createdAt, body: try store.cipher.open(body), attempts: Int(attempts),
                    retryFrom: retryFrom))
        }
        return claimed.sorted { $0.position < $1.position }
    }

    public func completeWebhookEvent(_ event: WebhookDelivery) async throws {
        try await store.client.query("DELETE FROM webhook_events WHERE position = \(event.position) AND state = 0", logger: logger)
    }

    public func retryWebhookEvent(_ event: WebhookDelivery, error: String, retryAt: Int64, node: String) async throws {
        try await store.client.query(
            """
            WITH failed AS (
                UPDATE webhook_events SET attempts = attempts + 1, next_attempt_at = \(retryAt), last_error = \(error), claimed_until = 0,
                    claimed_by = NULL
                WHERE position = \(event.position) AND state = 0 AND claimed_by = \(node)
                RETURNING ordering_key, position)
            UPDATE webhook_events w SET next_attempt_at = \(retryAt)
            FROM failed f
            WHERE w.state = 0 AND w.ordering_key = f.ordering_key AND w.position > f.position AND w.next_attempt_at < \(retryAt)
            """, logger: logger)
    }

    public func deadLetterWebhookEvent(_ event: WebhookDelivery, error: String, at now: Int64) async throws {
        try await store.client.query(
            """
            UPDATE webhook_events SET state = 1, dead_at = \(now), attempts = attempts + 1, last_error = \(error), claimed_until = 0,
                claimed_by = NULL
            WHERE position = \(event.position) AND state = 0
            """, logger: logger)
    }

    public func releaseWebhookClaims(node: String) async throws {
        try await store.client.query("UPDATE webhook_events SET claimed_until = 0, claimed_by = NULL WHERE claimed_by = \(node)", logger: logger)
    }

    public func deadWebhookEvents(limit: Int) async throws -> [DeadWebhookEvent] {
        var dead: [DeadWebhookEvent] = []
        for try await (id, type, key, createdAt, deadAt, attempts, lastError, body) in try await store.client.query(
            """
            SELECT id, type, ordering_key, created_at, dead_at, attempts, last_error, body FROM webhook_events
            WHERE state = 1 ORDER BY dead_at, position LIMIT \(limit)
            """, logger: logger
        ).decode((String, String, String, Int64, Int64, Int32, String?, String).self) {
            dead.append(
                DeadWebhookEvent(
                    id: id, type: type, orderingKey: key, createdAt: createdAt, deadAt: deadAt, attempts: Int(attempts), lastError: lastError ?? "",
                    body: try store.cipher.open(body)))
        }
        return dead
    }

    public func replayWebhookEvent(id: String, now: Int64) async throws -> Bool {
        try await store.transaction { connection -> Bool in
            // A new position (from the sequence): behind the events of its key recorded since it died.
            var replayed = false
            for try await _ in try await connection.query(
                """
                WITH gone AS (DELETE FROM webhook_events WHERE state = 1 AND id = \(id) RETURNING id, ordering_key, type, created_at, body)
                INSERT INTO webhook_events(id, ordering_key, type, created_at, body, next_attempt_at, retry_from)
                SELECT id, ordering_key, type, created_at, body, \(now), \(now) FROM gone
                RETURNING position
                """, logger: logger
            ).decode(Int64.self) {
                replayed = true
            }
            return replayed
        }
    }

    public func webhookStats() async throws -> WebhookStats {
        for try await (pending, dead, oldest) in try await store.client.query(
            """
            SELECT (SELECT count(*) FROM webhook_events WHERE state = 0), (SELECT count(*) FROM webhook_events WHERE state = 1),
                (SELECT created_at FROM webhook_events WHERE state = 0 ORDER BY position LIMIT 1)
            """, logger: logger
        ).decode((Int64, Int64, Int64?).self) {
            return WebhookStats(pending: Int(pending), dead: Int(dead), oldestPendingAt: oldest)
        }
        return WebhookStats(pending: 0, dead: 0, oldestPendingAt: nil)
    }
}
