import GRDB
import PigeonDomain
import PigeonProtocol

extension SQLiteMessageStore {
    // MARK: Devices

    public func registerDevice(userId: String, name: String?, tokenHash: String, rule: DeviceRegistrationRule) async throws -> DeviceIdentity {
        let deviceId = Identifiers.uuidV4()
        let now = WallClock.nowMillis()
        _ = try await write { [webhooks] db in
            // One writer at a time: the counts cannot change before the insert commits.
            let row = try Row.fetchOne(
                db, sql: "SELECT COUNT(*), COALESCE(SUM(revoked_at IS NULL OR revoked_at >= ?), 0) FROM devices WHERE user_id = ?",
                arguments: [rule.revokedSince, userId])
            if let refusal = rule.refusal(everHad: row?[0] ?? 0, active: row?[1] ?? 0) { throw refusal }
            try db.execute(
                sql: "INSERT INTO devices(user_id, id, name, token_hash, created_at, last_seen_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [userId, deviceId, name, tokenHash, now, now])
            try Self.recordWebhook(db, webhooks.device(.deviceRegistered, DeviceIdentity(userId: userId, deviceId: deviceId), at: now))
        }
        return DeviceIdentity(userId: userId, deviceId: deviceId)
    }

    public func device(tokenHash: String) async throws -> DeviceIdentity? {
        try await pool.read { db in
            try Row.fetchOne(
                db.cachedStatement(sql: "SELECT user_id, id FROM devices WHERE token_hash = ?"), arguments: [tokenHash]
            ).map { DeviceIdentity(userId: $0[0], deviceId: $0[1]) }
        }
    }

    public func devices(of userId: String) async throws -> [DeviceRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT id, name, created_at, last_seen_at FROM devices WHERE user_id = ? AND revoked_at IS NULL
                    ORDER BY created_at, id
                    """,
                arguments: [userId]
            ).map { DeviceRecord(deviceId: $0[0], name: $0[1], createdAt: $0[2], lastSeenAt: $0[3]) }
        }
    }

    public func revokeDevice(_ device: DeviceIdentity, at revokedAt: Int64) async throws -> DeviceRevocation? {
        try await write { [webhooks] db in
            try db.execute(
                sql: """
                    UPDATE devices SET revoked_at = ?, last_revoked_at = ?, token_hash = NULL
                    WHERE user_id = ? AND id = ? AND revoked_at IS NULL
                    """,
                arguments: [revokedAt, revokedAt, device.userId, device.deviceId])
            guard db.changesCount == 1 else { return nil }
            // A revoked device is woken no more (API.md 1.1): its push registration goes with it.
            _ = try SQLitePush.removePushRegistration(db, of: device)
            try Self.recordWebhook(db, webhooks.device(.deviceRevoked, device, at: revokedAt))
            return DeviceRevocation(device: device, revokedAt: revokedAt)
        }
    }

    public func recordDevicesSeen(_ seen: [DeviceIdentity: Int64]) async throws {
        guard !seen.isEmpty else { return }
        try await write { db in
            let statement = try db.cachedStatement(
                sql: "UPDATE devices SET last_seen_at = MAX(last_seen_at, ?) WHERE user_id = ? AND id = ?")
            for (device, at) in seen {
                try statement.execute(arguments: [at, device.userId, device.deviceId])
            }
        }
    }

    public func recordJWTDevice(_ device: DeviceIdentity, issuedAt: Int64?, at now: Int64) async throws -> JWTDeviceState {
        let known = try await pool.read { db in
            try Row.fetchOne(
                db, sql: "SELECT revoked_at, last_revoked_at FROM devices WHERE user_id = ? AND id = ?",
                arguments: [device.userId, device.deviceId]
            ).map { row -> JWTDeviceState in
                let revokedAt: Int64? = row[0]
                return JWTDeviceState(lastRevokedAt: row[1], isListed: revokedAt == nil)
            }
        }
        // Only a first sight, or a revoked device seen with a token issued after its revocation, writes.
        if let known, known.isListed || known.refuses(tokenIssuedAt: issuedAt) { return known }
        return try await write { [webhooks] db in
            try db.execute(
                sql: """
                    INSERT INTO devices(user_id, id, name, token_hash, created_at, last_seen_at) VALUES (?, ?, NULL, NULL, ?, ?)
                    ON CONFLICT(user_id, id) DO NOTHING
                    """,
                arguments: [device.userId, device.deviceId, now, now])
            // A device first seen through a JWT is a registration as the app's backend sees it.
            if db.changesCount == 1 { try Self.recordWebhook(db, webhooks.device(.deviceRegistered, device, at: now)) }
            let lastRevokedAt = try Int64.fetchOne(
                db, sql: "SELECT last_revoked_at FROM devices WHERE user_id = ? AND id = ?", arguments: [device.userId, device.deviceId])
            var state = JWTDeviceState(lastRevokedAt: lastRevokedAt, isListed: false)
            if !state.refuses(tokenIssuedAt: issuedAt) {
                try db.execute(
                    sql: "UPDATE devices SET revoked_at = NULL, last_seen_at = MAX(last_seen_at, ?) WHERE user_id = ? AND id = ?",
                    arguments: [now, device.userId, device.deviceId])
                state.isListed = true
            }
            return state
        }
    }
}
