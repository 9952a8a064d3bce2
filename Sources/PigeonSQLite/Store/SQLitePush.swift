import GRDB
import PigeonDomain
import PigeonProtocol

/// Push registrations and owed pushes in the embedded store (``PushStore``): a role of its own that borrows the store's
/// single writer and read pool. The single writer serialises every change, so a collection, a claim and a finish never
/// interleave.
public struct SQLitePush: PushStore {
    let store: SQLiteMessageStore

    public func setPushRegistration(_ request: PushRegistrationRequest, data: String?, for device: DeviceIdentity, at now: Int64) async throws {
        try await store.write { db in
            // A pushkey wakes one device: another user's device keeps it (409); the same user's other device (the app
            // reinstalled) loses it.
            let holder = try String.fetchOne(
                db, sql: "SELECT user_id FROM push_registrations WHERE app_id = ? AND pushkey = ?", arguments: [request.appId, request.pushkey])
            if let holder, holder != device.userId { throw PigeonError.pushkeyHeld }
            try db.execute(
                sql: """
                    DELETE FROM push_pending WHERE (user_id, device_id) IN (
                        SELECT user_id, device_id FROM push_registrations
                        WHERE app_id = ? AND pushkey = ? AND user_id = ? AND device_id <> ?)
                    """,
                arguments: [request.appId, request.pushkey, device.userId, device.deviceId])
            try db.execute(
                sql: "DELETE FROM push_registrations WHERE app_id = ? AND pushkey = ? AND user_id = ? AND device_id <> ?",
                arguments: [request.appId, request.pushkey, device.userId, device.deviceId])
            try db.execute(
                sql: """
                    INSERT INTO push_registrations(user_id, device_id, kind, app_id, pushkey, data, updated_at) VALUES (?, ?, ?, ?, ?, at_rest_seal(?), ?)
                    ON CONFLICT(user_id, device_id) DO UPDATE SET
                        kind = excluded.kind, app_id = excluded.app_id, pushkey = excluded.pushkey, data = excluded.data,
                        updated_at = excluded.updated_at
                    """,
                arguments: [device.userId, device.deviceId, request.kind.rawValue, request.appId, request.pushkey, data, now])
        }
    }

    @discardableResult
    public func removePushRegistration(of device: DeviceIdentity) async throws -> Bool {
        try await store.write { db in try Self.removePushRegistration(db, of: device) }
    }

    /// Drops a device's registration and its owed push (also part of a revocation's transaction).
    package static func removePushRegistration(_ db: Database, of device: DeviceIdentity) throws -> Bool {
        try db.execute(sql: "DELETE FROM push_pending WHERE user_id = ? AND device_id = ?", arguments: [device.userId, device.deviceId])
        try db.execute(sql: "DELETE FROM push_registrations WHERE user_id = ? AND device_id = ?", arguments: [device.userId, device.deviceId])
        return db.changesCount > 0
    }

    public func pushRegistration(of device: DeviceIdentity) async throws -> PushRegistrationInfo? {
        try await store.pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT r.kind, r.app_id, r.pushkey, at_rest_open(r.data), r.updated_at, r.last_pushed_at,
                        EXISTS(SELECT 1 FROM push_pending p WHERE p.user_id = r.user_id AND p.device_id = r.device_id)
                    FROM push_registrations r WHERE r.user_id = ? AND r.device_id = ?
                    """,
                arguments: [device.userId, device.deviceId]
            ).map { row in
                PushRegistrationInfo(
                    kind: PushKind(rawValue: row[0]) ?? .other, appId: row[1], pushkey: row[2], data: PushPayload.decodeData(row[3]),
                    updatedAt: row[4], lastPushedAt: row[5], pending: row[6])
            }
        }
    }

    public func collectOwedPushes(
        limit: Int, now: Int64, window: Int64, minInterval: Int64, isOnline: @escaping @Sendable (DeviceIdentity) -> Bool
    ) async throws -> PushCollection? {
        // Nothing stored since the last collection: no write at all (an idle server stays idle).
        let (cursor, head) = try await store.pool.read { db in (try Self.pushCursor(db), try Self.eventHead(db)) }
        guard head > cursor else { return PushCollection(scanned: 0, owed: 0, more: false) }
        return try await store.write { db -> PushCollection in
            let cursor = try Self.pushCursor(db)
            let head = try Self.eventHead(db)
            let upTo = min(head, cursor + Int64(limit))
            var owed = 0
            if upTo > cursor, try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM push_registrations)") == true {
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT e.user_id, r.device_id, e.conversation_id, e.seq, m.stored_at
                        FROM events e
                        JOIN push_registrations r ON r.user_id = e.user_id
                        JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
                        WHERE e.id > ? AND e.id <= ? AND e.type = 'message.new'
                            AND (e.device_id IS NULL OR e.device_id = r.device_id)
                            AND (e.excluded_device_id IS NULL OR e.excluded_device_id != r.device_id)
                            AND m.sender_id != e.user_id AND m.type NOT LIKE 'pigeon.%' AND m.stored_at >= ?
                        ORDER BY e.id
                        """,
                    arguments: [cursor, upTo, now - window])
                let upsert = try db.cachedStatement(
                    sql: """
                        INSERT INTO push_pending(user_id, device_id, conversation_id, seq, stored_at, owed_since, due_at)
                        VALUES (?, ?, ?, ?, ?, ?, MAX(?, COALESCE(
                            (SELECT last_pushed_at FROM push_registrations WHERE user_id = ? AND device_id = ?), 0) + ?))
                        ON CONFLICT(user_id, device_id) DO UPDATE SET
                            conversation_id = excluded.conversation_id, seq = excluded.seq, stored_at = excluded.stored_at
                        WHERE excluded.stored_at >= push_pending.stored_at
                        """)
                for row in rows {
                    let device = DeviceIdentity(userId: row[0], deviceId: row[1])
                    if isOnline(device) { continue }
                    let (conversationId, seq, storedAt): (String, Int64, Int64) = (row[2], row[3], row[4])
                    try upsert.execute(arguments: [
                        device.userId, device.deviceId, conversationId, seq, storedAt, now, now, device.userId, device.deviceId, minInterval,
                    ])
                    owed += 1
                }
            }
            try db.execute(sql: "UPDATE meta SET value = ? WHERE key = 'push_cursor'", arguments: [String(upTo)])
            return PushCollection(scanned: Int(upTo - cursor), owed: owed, more: upTo < head)
        }
    }

    private static func pushCursor(_ db: Database) throws -> Int64 {
        try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'push_cursor'").flatMap { Int64($0) } ?? 0
    }

    private static func eventHead(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'") ?? 0
    }

    public func claimDuePushes(now: Int64, limit: Int, leaseUntil: Int64, node: String, includeBody: Bool) async throws -> [ClaimedPush] {
        // Nothing due: no write (the dispatcher polls).
        guard let due = try await nextPushDue(), due <= now else { return [] }
        return try await store.write { db -> [ClaimedPush] in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT p.user_id, p.device_id, r.kind, r.app_id, r.pushkey, at_rest_open(r.data), r.updated_at, p.conversation_id, p.seq,
                        m.server_id, m.sender_id, m.type, CASE WHEN m.deleted_at IS NULL THEN at_rest_open(m.body) END, p.owed_since, p.attempts
                    FROM push_pending p
                    JOIN push_registrations r ON r.user_id = p.user_id AND r.device_id = p.device_id
                    JOIN messages m ON m.conversation_id = p.conversation_id AND m.seq = p.seq
                    WHERE p.due_at <= ? AND p.claimed_until <= ?
                    ORDER BY p.due_at LIMIT ?
                    """,
                arguments: [now, now, limit])
            let claim = try db.cachedStatement(
                sql: "UPDATE push_pending SET claimed_until = ?, claimed_by = ? WHERE user_id = ? AND device_id = ?")
            var unread: [String: Int] = [:]
            return try rows.map { row in
                let device = DeviceIdentity(userId: row[0], deviceId: row[1])
                try claim.execute(arguments: [leaseUntil, node, device.userId, device.deviceId])
                if unread[device.userId] == nil { unread[device.userId] = try Self.unreadCount(db, of: device.userId) }
                return ClaimedPush(
                    device: device, kind: PushKind(rawValue: row[2]) ?? .other, appId: row[3], pushkey: row[4], data: row[5],
                    registeredAt: row[6], conversationId: row[7], seq: row[8], serverId: row[9], senderId: row[10], messageType: row[11],
                    body: includeBody ? row[12] : nil, unread: unread[device.userId] ?? 0, owedSince: row[13], attempts: row[14])
            }
        }
    }

    /// The user's unread messages over all its conversations (the app's badge): as each conversation's `unreadCount`
    /// (joined conversations only, without the messages hidden from it by a block).
    private static func unreadCount(_ db: Database, of userId: String) throws -> Int {
        try Int.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT COALESCE(SUM((
                        SELECT count(*) FROM messages m
                        WHERE m.conversation_id = me.conversation_id AND m.seq > MAX(me.read_seq, me.joined_seq - 1)
                            AND m.sender_id != me.user_id AND m.type NOT LIKE 'pigeon.%'
                            AND NOT EXISTS (
                                SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = me.user_id))), 0)
                    FROM members me WHERE me.user_id = ? AND me.membership = 'joined'
                    """),
            arguments: [userId]) ?? 0
    }

    public func finishPush(_ push: ClaimedPush, outcome: PushOutcome, now: Int64, minInterval: Int64, node: String) async throws {
        try await store.write { db in
            let key: [(any DatabaseValueConvertible)?] = [push.device.userId, push.device.deviceId]
            switch outcome {
            case .sent, .dropped:
                try db.execute(
                    sql: "DELETE FROM push_pending WHERE user_id = ? AND device_id = ? AND conversation_id = ? AND seq = ?",
                    arguments: StatementArguments(key + [push.conversationId, push.seq]))
                if db.changesCount == 0 {
                    // A newer message came meanwhile: it stays owed, a second after this push when this one went out.
                    try db.execute(
                        sql: """
                            UPDATE push_pending SET claimed_until = 0, claimed_by = NULL, attempts = 0, owed_since = ?, due_at = MAX(due_at, ?)
                            WHERE user_id = ? AND device_id = ?
                            """,
                        arguments: StatementArguments([now, outcome == .sent ? now + minInterval : now] + key))
                }
                if outcome == .sent {
                    try db.execute(
                        sql: "UPDATE push_registrations SET last_pushed_at = ? WHERE user_id = ? AND device_id = ?",
                        arguments: StatementArguments([now] + key))
                }
            case .rejected:
                try db.execute(
                    sql: """
                        DELETE FROM push_pending WHERE (user_id, device_id) IN (
                            SELECT user_id, device_id FROM push_registrations WHERE app_id = ? AND pushkey = ?)
                        """,
                    arguments: [push.appId, push.pushkey])
                try db.execute(sql: "DELETE FROM push_registrations WHERE app_id = ? AND pushkey = ?", arguments: [push.appId, push.pushkey])
            case .retry(let at):
                try db.execute(
                    sql: """
                        UPDATE push_pending SET claimed_until = 0, claimed_by = NULL, attempts = attempts + 1, due_at = ?
                        WHERE user_id = ? AND device_id = ? AND claimed_by = ?
                        """,
                    arguments: StatementArguments([at] + key + [node]))
            }
        }
    }

    public func releasePushClaims(node: String) async throws {
        try await store.write { db in
            try db.execute(sql: "UPDATE push_pending SET claimed_until = 0, claimed_by = NULL WHERE claimed_by = ?", arguments: [node])
        }
    }

    public func pendingPushCount() async throws -> Int {
        try await store.pool.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM push_pending") ?? 0 }
    }

    public func nextPushDue() async throws -> Int64? {
        try await store.pool.read { db in
            // A claimed push is due again when its lease ends (a node that died with it).
            try Int64.fetchOne(db, sql: "SELECT MIN(MAX(due_at, claimed_until)) FROM push_pending")
        }
    }
}
