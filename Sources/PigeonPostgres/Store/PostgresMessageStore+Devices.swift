import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

extension PostgresMessageStore {
    // MARK: Devices

    /// Seed of the advisory lock every revocation takes before it numbers itself: revocations commit in the order of
    /// their `revocation_seq`, so a node that has read up to a seq has seen every lower one (``readRevocations``).
    package static let revocationLock: Int64 = 0x7069_6765_6f6e_0007

    public func registerDevice(userId: String, name: String?, tokenHash: String, rule: DeviceRegistrationRule) async throws -> DeviceIdentity {
        let deviceId = Identifiers.uuidV4()
        let now = WallClock.nowMillis()
        try await transaction { connection in
            // One registration of a user at a time, so the counts below cannot change before the insert commits.
            try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\("pigeon-devices:" + userId), 0))", logger: logger)
            var (everHad, active) = (0, 0)
            for try await (all, notRevoked) in try await connection.query(
                """
                SELECT COUNT(*)::BIGINT, COUNT(*) FILTER (WHERE revoked_at IS NULL OR revoked_at >= \(rule.revokedSince))::BIGINT
                FROM devices WHERE user_id = \(userId)
                """,
                logger: logger
            ).decode((Int64, Int64).self) { (everHad, active) = (Int(all), Int(notRevoked)) }
            if let refusal = rule.refusal(everHad: everHad, active: active) { throw refusal }
            try await connection.query(
                """
                INSERT INTO devices(user_id, id, name, token_hash, created_at, last_seen_at)
                VALUES (\(userId), \(deviceId), \(name), \(tokenHash), \(now), \(now))
                """,
                logger: logger)
            try await Self.recordWebhook(
                connection, webhooks.device(.deviceRegistered, DeviceIdentity(userId: userId, deviceId: deviceId), at: now), cipher: cipher,
                logger: logger)
        }
        return DeviceIdentity(userId: userId, deviceId: deviceId)
    }

    public func device(tokenHash: String) async throws -> DeviceIdentity? {
        for try await (userId, deviceId) in try await client.query(
            "SELECT user_id, id FROM devices WHERE token_hash = \(tokenHash)", logger: logger
        ).decode((String, String).self) {
            return DeviceIdentity(userId: userId, deviceId: deviceId)
        }
        return nil
    }

    public func devices(of userId: String) async throws -> [DeviceRecord] {
        var records: [DeviceRecord] = []
        for try await (id, name, createdAt, lastSeenAt) in try await client.query(
            """
            SELECT id, name, created_at, last_seen_at FROM devices WHERE user_id = \(userId) AND revoked_at IS NULL
            ORDER BY created_at, id
            """,
            logger: logger
        ).decode((String, String?, Int64, Int64).self) {
            records.append(DeviceRecord(deviceId: id, name: name, createdAt: createdAt, lastSeenAt: lastSeenAt))
        }
        return records
    }

    public func revokeDevice(_ device: DeviceIdentity, at revokedAt: Int64) async throws -> DeviceRevocation? {
        try await transaction { connection in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(hashtextextended(current_schema(), \(Self.revocationLock)))", logger: logger)
            var revoked = false
            for try await _ in try await connection.query(
                """
                UPDATE devices SET revoked_at = \(revokedAt), last_revoked_at = \(revokedAt), token_hash = NULL,
                    revocation_seq = nextval('device_revocation_seq')
                WHERE user_id = \(device.userId) AND id = \(device.deviceId) AND revoked_at IS NULL
                RETURNING revocation_seq
                """,
                logger: logger
            ).decode(Int64.self) { revoked = true }
            guard revoked else { return nil }
            // A revoked device is woken no more (API.md 1.1): its push registration goes with it.
            try await PostgresPush.removePushRegistration(connection, of: device, logger: logger)
            try await Self.recordWebhook(connection, webhooks.device(.deviceRevoked, device, at: revokedAt), cipher: cipher, logger: logger)
            return DeviceRevocation(device: device, revokedAt: revokedAt)
        }
    }

    public func recordDevicesSeen(_ seen: [DeviceIdentity: Int64]) async throws {
        guard !seen.isEmpty else { return }
        let entries = Array(seen)
        try await client.query(
            """
            UPDATE devices d SET last_seen_at = GREATEST(d.last_seen_at, x.t)
            FROM unnest(\(entries.map(\.key.userId))::text[], \(entries.map(\.key.deviceId))::text[], \(entries.map(\.value))::bigint[]) AS x(u, i, t)
            WHERE d.user_id = x.u AND d.id = x.i
            """,
            logger: logger)
    }

    public func recordJWTDevice(_ device: DeviceIdentity, issuedAt: Int64?, at now: Int64) async throws -> JWTDeviceState {
        var known: JWTDeviceState?
        for try await (revokedAt, lastRevokedAt) in try await client.query(
            "SELECT revoked_at, last_revoked_at FROM devices WHERE user_id = \(device.userId) AND id = \(device.deviceId)", logger: logger
        ).decode((Int64?, Int64?).self) {
            known = JWTDeviceState(lastRevokedAt: lastRevokedAt, isListed: revokedAt == nil)
        }
        // Only a first sight, or a revoked device seen with a token issued after its revocation, writes.
        if let known, known.isListed || known.refuses(tokenIssuedAt: issuedAt) { return known }
        return try await transaction { connection in
            var inserted = false
            for try await _ in try await connection.query(
                """
                INSERT INTO devices(user_id, id, name, token_hash, created_at, last_seen_at)
                VALUES (\(device.userId), \(device.deviceId), NULL, NULL, \(now), \(now))
                ON CONFLICT (user_id, id) DO NOTHING
                RETURNING 1
                """,
                logger: logger
            ).decode(Int32.self) { inserted = true }
            // A device first seen through a JWT is a registration as the app's backend sees it.
            if inserted { try await Self.recordWebhook(connection, webhooks.device(.deviceRegistered, device, at: now), cipher: cipher, logger: logger) }
            var state = JWTDeviceState(lastRevokedAt: nil, isListed: false)
            for try await lastRevokedAt in try await connection.query(
                "SELECT last_revoked_at FROM devices WHERE user_id = \(device.userId) AND id = \(device.deviceId) FOR UPDATE", logger: logger
            ).decode(Int64?.self) {
                state.lastRevokedAt = lastRevokedAt
            }
            if !state.refuses(tokenIssuedAt: issuedAt) {
                try await connection.query(
                    """
                    UPDATE devices SET revoked_at = NULL, last_seen_at = GREATEST(last_seen_at, \(now))
                    WHERE user_id = \(device.userId) AND id = \(device.deviceId)
                    """,
                    logger: logger)
                state.isListed = true
            }
            return state
        }
    }

    /// The newest revocation's number (0 when none): a node follows the revocations after it.
    package static func revocationHead(_ connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        var head: Int64 = 0
        for try await value in try await connection.query("SELECT COALESCE(MAX(revocation_seq), 0)::BIGINT FROM devices", logger: logger)
            .decode(Int64.self)
        {
            head = value
        }
        return head
    }

    /// The revocations numbered after `after`, in order, at most `limit`, and the number of the last one read (`after`
    /// when none). A device revoked twice shows only its latest revocation. Revocations commit in number order (see
    /// ``revocationLock``), so nothing committed later can take a number below what was read.
    package static func readRevocations(_ client: PostgresClient, after: Int64, limit: Int, logger: Logger) async throws -> (
        revocations: [DeviceRevocation], through: Int64
    ) {
        var revocations: [DeviceRevocation] = []
        var through = after
        for try await (userId, deviceId, revokedAt, seq) in try await client.query(
            """
            SELECT user_id, id, last_revoked_at, revocation_seq FROM devices
            WHERE revocation_seq > \(after) ORDER BY revocation_seq LIMIT \(limit)
            """,
            logger: logger
        ).decode((String, String, Int64, Int64).self) {
            revocations.append(DeviceRevocation(device: DeviceIdentity(userId: userId, deviceId: deviceId), revokedAt: revokedAt))
            through = seq
        }
        return (revocations, through)
    }
}
