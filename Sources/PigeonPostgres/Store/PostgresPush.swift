import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Push registrations and owed pushes in PostgreSQL (``PushStore``): a role of its own that borrows the store's pool;
/// every change is one transaction, claims under a lease (`FOR UPDATE SKIP LOCKED`), so nodes share the work.
public struct PostgresPush: PushStore {
    let store: PostgresMessageStore
    private var logger: Logger { store.logger }
    private var eventPartitions: Int { store.eventPartitions }

    public func setPushRegistration(_ request: PushRegistrationRequest, data: String?, for device: DeviceIdentity, at now: Int64) async throws {
        do {
            let sealed = store.cipher.seal(data)
            try await store.transaction { connection in
                try await Self.setPushRegistration(connection, request, data: sealed, for: device, at: now, logger: logger)
            }
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            // Another user's device registered the pushkey between the check and the insert: the unique index holds it.
            throw PigeonError.pushkeyHeld
        }
    }

    private static func setPushRegistration(
        _ connection: PostgresConnection, _ request: PushRegistrationRequest, data: String?, for device: DeviceIdentity, at now: Int64,
        logger: Logger
    ) async throws {
        // `data` is sealed already (encryption at rest). A pushkey wakes one device: another user's device keeps it
        // (409); the same user's other device (the app reinstalled) loses it. Only this user's rows are deleted, so a race leaves the unique index to refuse.
        for try await holder in try await connection.query(
            "SELECT user_id FROM push_registrations WHERE app_id = \(request.appId) AND pushkey = \(request.pushkey)", logger: logger
        ).decode(String.self) where holder != device.userId {
            throw PigeonError.pushkeyHeld
        }
        try await connection.query(
            """
            DELETE FROM push_pending p USING push_registrations r
            WHERE p.user_id = r.user_id AND p.device_id = r.device_id AND r.app_id = \(request.appId) AND r.pushkey = \(request.pushkey)
                AND r.user_id = \(device.userId) AND r.device_id <> \(device.deviceId)
            """, logger: logger)
        try await connection.query(
            """
            DELETE FROM push_registrations WHERE app_id = \(request.appId) AND pushkey = \(request.pushkey)
                AND user_id = \(device.userId) AND device_id <> \(device.deviceId)
            """, logger: logger)
        try await connection.query(
            """
            INSERT INTO push_registrations(user_id, device_id, kind, app_id, pushkey, data, updated_at)
            VALUES (\(device.userId), \(device.deviceId), \(request.kind.rawValue), \(request.appId), \(request.pushkey), \(data), \(now))
            ON CONFLICT (user_id, device_id) DO UPDATE SET
                kind = EXCLUDED.kind, app_id = EXCLUDED.app_id, pushkey = EXCLUDED.pushkey, data = EXCLUDED.data,
                updated_at = EXCLUDED.updated_at
            """, logger: logger)
    }

    @discardableResult
    public func removePushRegistration(of device: DeviceIdentity) async throws -> Bool {
        try await store.transaction { connection in try await Self.removePushRegistration(connection, of: device, logger: logger) }
    }

    /// Drops a device's registration and its owed push (also part of a revocation's transaction).
    @discardableResult
    package static func removePushRegistration(_ connection: PostgresConnection, of device: DeviceIdentity, logger: Logger) async throws -> Bool {
        try await connection.query(
            "DELETE FROM push_pending WHERE user_id = \(device.userId) AND device_id = \(device.deviceId)", logger: logger)
        var removed = false
        for try await _ in try await connection.query(
            "DELETE FROM push_registrations WHERE user_id = \(device.userId) AND device_id = \(device.deviceId) RETURNING 1", logger: logger
        ).decode(Int32.self) {
            removed = true
        }
        return removed
    }

    public func pushRegistration(of device: DeviceIdentity) async throws -> PushRegistrationInfo? {
        var info: PushRegistrationInfo?
        for try await (kind, appId, pushkey, data, updatedAt, lastPushedAt, pending) in try await store.client.query(
            """
            SELECT r.kind, r.app_id, r.pushkey, r.data, r.updated_at, r.last_pushed_at,
                EXISTS(SELECT 1 FROM push_pending p WHERE p.user_id = r.user_id AND p.device_id = r.device_id)
            FROM push_registrations r WHERE r.user_id = \(device.userId) AND r.device_id = \(device.deviceId)
            """, logger: logger
        ).decode((String, String, String, String?, Int64, Int64?, Bool).self) {
            info = PushRegistrationInfo(
                kind: PushKind(rawValue: kind) ?? .other, appId: appId, pushkey: pushkey, data: PushPayload.decodeData(try store.cipher.open(data)),
                updatedAt: updatedAt, lastPushedAt: lastPushedAt, pending: pending)
        }
        return info
    }

    public func collectOwedPushes(
        limit: Int, now: Int64, window: Int64, minInterval: Int64, isOnline: @escaping @Sendable (DeviceIdentity) -> Bool
    ) async throws -> PushCollection? {
        let partitions = eventPartitions
        let logger = logger
        return try await store.transaction { connection -> PushCollection? in
            var cursor: [Int64]?
            for try await offsets in try await connection.query(
                "SELECT offsets FROM push_cursor WHERE id = 1 FOR UPDATE SKIP LOCKED", logger: logger
            ).decode([Int64].self) {
                cursor = offsets
            }
            guard let cursor else { return nil }  // another node is collecting
            var heads = [Int64](repeating: 0, count: partitions)
            for try await (part, offset) in try await connection.query(
                "SELECT part, last_offset FROM event_partitions WHERE part < \(partitions)", logger: logger
            ).decode((Int32, Int64).self) {
                heads[Int(part)] = offset
            }
            guard cursor.count == partitions else {
                // The log was repartitioned: its old positions mean nothing now; pushes start from its head.
                try await connection.query("UPDATE push_cursor SET offsets = \(heads) WHERE id = 1", logger: logger)
                return PushCollection(scanned: 0, owed: 0, more: false)
            }
            let perPartition = Int64(max(1, limit / partitions))
            let upTo = zip(cursor, heads).map { after, head in min(head, after + perPartition) }
            guard upTo != cursor else { return PushCollection(scanned: 0, owed: 0, more: false) }
            var owed: [(device: DeviceIdentity, conversationId: String, seq: Int64, storedAt: Int64)] = []
            for try await (userId, deviceId, conversationId, seq, storedAt) in try await connection.query(
                """
                SELECT e.user_id, r.device_id, e.conversation_id, e.seq, m.stored_at
                FROM unnest(\((0..<partitions).map { Int32($0) })::integer[], \(cursor)::bigint[], \(upTo)::bigint[]) AS t(part, after, head)
                JOIN events e ON e.part = t.part AND e.id > t.after AND e.id <= t.head
                JOIN push_registrations r ON r.user_id = e.user_id
                JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
                WHERE e.type = 'message.new'
                    AND (e.device_id IS NULL OR e.device_id = r.device_id)
                    AND (e.excluded_device_id IS NULL OR e.excluded_device_id <> r.device_id)
                    AND m.sender_id <> e.user_id AND m.type NOT LIKE 'pigeon.%' AND m.stored_at >= \(now - window)
                """, logger: logger
            ).decode((String, String, String, Int64, Int64).self) {
                let device = DeviceIdentity(userId: userId, deviceId: deviceId)
                if !isOnline(device) { owed.append((device, conversationId, seq, storedAt)) }
            }
            // One row per device, the newest message (the partitions' orders say nothing of each other).
            var newest: [DeviceIdentity: (conversationId: String, seq: Int64, storedAt: Int64)] = [:]
            for push in owed {
                if let known = newest[push.device], (known.storedAt, known.seq) > (push.storedAt, push.seq) { continue }
                newest[push.device] = (push.conversationId, push.seq, push.storedAt)
            }
            if !newest.isEmpty {
                let rows = Array(newest)
                try await connection.query(
                    """
                    INSERT INTO push_pending(user_id, device_id, conversation_id, seq, stored_at, owed_since, due_at)
                    SELECT c.u, c.d, c.c, c.s, c.t, \(now), GREATEST(\(now), COALESCE(r.last_pushed_at, 0) + \(minInterval))
                    FROM unnest(\(rows.map(\.key.userId))::text[], \(rows.map(\.key.deviceId))::text[], \(rows.map(\.value.conversationId))::text[],
                        \(rows.map(\.value.seq))::bigint[], \(rows.map(\.value.storedAt))::bigint[]) AS c(u, d, c, s, t)
                    JOIN push_registrations r ON r.user_id = c.u AND r.device_id = c.d
                    ON CONFLICT (user_id, device_id) DO UPDATE SET
                        conversation_id = EXCLUDED.conversation_id, seq = EXCLUDED.seq, stored_at = EXCLUDED.stored_at
                    WHERE EXCLUDED.stored_at >= push_pending.stored_at
                    """, logger: logger)
            }
            try await connection.query("UPDATE push_cursor SET offsets = \(upTo) WHERE id = 1", logger: logger)
            let scanned = zip(cursor, upTo).reduce(0) { $0 + Int($1.1 - $1.0) }
            return PushCollection(scanned: scanned, owed: newest.count, more: upTo != heads)
        }
    }

    public func claimDuePushes(now: Int64, limit: Int, leaseUntil: Int64, node: String, includeBody: Bool) async throws -> [ClaimedPush] {
        guard let due = try await nextPushDue(), due <= now else { return [] }
        let logger = logger
        return try await store.transaction { connection -> [ClaimedPush] in
            typealias Row = (String, String, String, String, String, String?, Int64, String, Int64, String, String, String, String?, Int64, Int32)
            var rows: [Row] = []
            for try await row in try await connection.query(
                """
                WITH c AS (
                    UPDATE push_pending p SET claimed_until = \(leaseUntil), claimed_by = \(node)
                    FROM (SELECT user_id, device_id FROM push_pending WHERE due_at <= \(now) AND claimed_until <= \(now)
                          ORDER BY due_at LIMIT \(limit) FOR UPDATE SKIP LOCKED) d
                    WHERE p.user_id = d.user_id AND p.device_id = d.device_id
                    RETURNING p.*)
                SELECT c.user_id, c.device_id, r.kind, r.app_id, r.pushkey, r.data, r.updated_at, c.conversation_id, c.seq,
                    m.server_id, m.sender_id, m.type, CASE WHEN m.deleted_at IS NULL THEN m.body END, c.owed_since, c.attempts
                FROM c
                JOIN push_registrations r ON r.user_id = c.user_id AND r.device_id = c.device_id
                JOIN messages m ON m.conversation_id = c.conversation_id AND m.seq = c.seq
                """, logger: logger
            ).decode(Row.self) {
                rows.append(row)
            }
            guard !rows.isEmpty else { return [] }
            let users = Array(Set(rows.map(\.0)))
            var unread: [String: Int] = [:]
            for try await (userId, count) in try await connection.query(
                """
                SELECT me.user_id, count(m.seq) FROM members me
                JOIN messages m ON m.conversation_id = me.conversation_id AND m.seq > GREATEST(me.read_seq, me.joined_seq - 1)
                    AND m.sender_id <> me.user_id AND m.type NOT LIKE 'pigeon.%'
                    AND NOT EXISTS (
                        SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = me.user_id)
                WHERE me.user_id = ANY(\(users)) AND me.membership = 'joined' GROUP BY me.user_id
                """, logger: logger
            ).decode((String, Int64).self) {
                unread[userId] = Int(count)
            }
            return try rows.map { row in
                try ClaimedPush(
                    device: DeviceIdentity(userId: row.0, deviceId: row.1), kind: PushKind(rawValue: row.2) ?? .other, appId: row.3,
                    pushkey: row.4, data: store.cipher.open(row.5), registeredAt: row.6, conversationId: row.7, seq: row.8, serverId: row.9, senderId: row.10,
                    messageType: row.11, body: includeBody ? store.cipher.open(row.12) : nil, unread: unread[row.0] ?? 0, owedSince: row.13, attempts: Int(row.14))
            }
        }
    }

    public func finishPush(_ push: ClaimedPush, outcome: PushOutcome, now: Int64, minInterval: Int64, node: String) async throws {
        let (userId, deviceId) = (push.device.userId, push.device.deviceId)
        let logger = logger
        try await store.transaction { connection in
            switch outcome {
            case .sent, .dropped:
                var deleted = false
                for try await _ in try await connection.query(
                    """
                    DELETE FROM push_pending WHERE user_id = \(userId) AND device_id = \(deviceId)
                        AND conversation_id = \(push.conversationId) AND seq = \(push.seq) RETURNING 1
                    """, logger: logger
                ).decode(Int32.self) {
                    deleted = true
                }
                if !deleted {
                    // A newer message came meanwhile: it stays owed, a second after this push when this one went out.
                    try await connection.query(
                        """
                        UPDATE push_pending SET claimed_until = 0, claimed_by = NULL, attempts = 0, owed_since = \(now),
                            due_at = GREATEST(due_at, \(outcome == .sent ? now + minInterval : now))
                        WHERE user_id = \(userId) AND device_id = \(deviceId)
                        """, logger: logger)
                }
                if outcome == .sent {
                    try await connection.query(
                        "UPDATE push_registrations SET last_pushed_at = \(now) WHERE user_id = \(userId) AND device_id = \(deviceId)",
                        logger: logger)
                }
            case .rejected:
                try await connection.query(
                    """
                    DELETE FROM push_pending p USING push_registrations r
                    WHERE p.user_id = r.user_id AND p.device_id = r.device_id AND r.app_id = \(push.appId) AND r.pushkey = \(push.pushkey)
                    """, logger: logger)
                try await connection.query(
                    "DELETE FROM push_registrations WHERE app_id = \(push.appId) AND pushkey = \(push.pushkey)", logger: logger)
            case .retry(let at):
                try await connection.query(
                    """
                    UPDATE push_pending SET claimed_until = 0, claimed_by = NULL, attempts = attempts + 1, due_at = \(at)
                    WHERE user_id = \(userId) AND device_id = \(deviceId) AND claimed_by = \(node)
                    """, logger: logger)
            }
        }
    }

    public func releasePushClaims(node: String) async throws {
        try await store.client.query("UPDATE push_pending SET claimed_until = 0, claimed_by = NULL WHERE claimed_by = \(node)", logger: logger)
    }

    public func pendingPushCount() async throws -> Int {
        var count = 0
        for try await value in try await store.client.query("SELECT count(*) FROM push_pending", logger: logger).decode(Int64.self) {
            count = Int(value)
        }
        return count
    }

    public func nextPushDue() async throws -> Int64? {
        var due: Int64?
        for try await value in try await store.client.query(
            "SELECT MIN(GREATEST(due_at, claimed_until)) FROM push_pending", logger: logger
        ).decode(Int64?.self) {
            due = value
        }
        return due
    }
}
