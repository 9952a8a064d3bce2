import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// The embedded store: one SQLite file (WAL), writes through group commit.
public final class SQLiteMessageStore: MessageStore {
    public typealias FaultInjector = ProcessingFaultInjector

    public let epoch: String
    /// The log this one was restored from, when it was (``markRestored(path:)``).
    public let formerLog: FormerEventLog?
    /// Internal for the store contract tests, which inspect the tables.
    package let pool: DatabasePool
    package let writer: GroupCommitWriter
    package let fanout: any Fanout
    let faultInjector: FaultInjector?
    /// conversation id → sorted member user ids.
    package let membersCache = MembersCache()
    package let diskHealth: SQLiteDiskHealth
    /// The webhook events this store records with what they report (``WebhookOutbox/off``: none).
    package let webhooks: WebhookOutbox
    /// The consent rules and whether blocks or invitations exist (`+Consent`).
    package let consent = NIOLockedValueBox(SQLiteConsentState())
    /// Blocked user id → the users who block it (sorted), for typing (``blockers(of:)``).
    package let blockersCache = MembersCache(limit: 100_000)
    /// The key ring values are sealed with at rest (``AtRestCipher/off``: none); attachments' files use it too.
    package let cipher: AtRestCipher

    /// Opens (creating or migrating) the store at `path`. With `cipher` on, bodies, event and webhook payloads and push
    /// data are sealed as they are written (``AtRestFunctions``); a store the cipher cannot open is refused here.
    public init(
        path: String, durable: Bool = true, fanout: any Fanout, faultInjector: FaultInjector? = nil, webhooks: WebhookOutbox = .off,
        cipher: AtRestCipher = .off
    ) throws {
        self.webhooks = webhooks
        self.cipher = cipher
        self.diskHealth = SQLiteDiskHealth(path: path)
        self.pool = try SQLiteDatabase.open(path: path, durable: durable, cipher: cipher)
        try SQLiteSchema.migrator.migrate(pool)
        try pool.write { db in try AtRestFunctions.verifyAndRecord(cipher, db) }
        self.epoch = try pool.write { db in
            if let epoch = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'epoch'") { return epoch }
            let epoch = Identifiers.randomHex(bytes: 4)
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('epoch', ?)", arguments: [epoch])
            return epoch
        }
        self.formerLog = try pool.read { db in
            let values = try Dictionary(
                uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT key, value FROM meta WHERE key IN ('restored_epoch', 'restored_head')").map {
                    ($0[0] as String, $0[1] as String)
                })
            guard let epoch = values["restored_epoch"], let head = values["restored_head"].flatMap({ Int64($0) }) else { return nil }
            return FormerEventLog(epoch: epoch, head: EventPosition(offsets: [head]))
        }
        let (blocksExist, invitesExist) = try pool.read { db in
            (
                try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM blocks) OR EXISTS(SELECT 1 FROM hidden_messages)") ?? false,
                try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM members WHERE membership = 'invited')") ?? false
            )
        }
        consent.withLockedValue {
            $0.blocksExist = blocksExist
            $0.invitesExist = invitesExist
        }
        self.writer = GroupCommitWriter(writer: pool)
        self.fanout = fanout
        self.faultInjector = faultInjector
    }

    /// Not ready while the disk refuses writes: then, once the file system has headroom again, each call tries a tiny
    /// write, so readiness comes back with space.
    public func isReady() async -> Bool {
        await diskHealth.isReady(
            probe: {
                let now = WallClock.nowMillis()
                try await write { db in try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('disk_probe', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", arguments: [String(now)]) }
            },
            read: { _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") } })
    }

    public var isDiskFull: Bool { diskHealth.isRefusingWrites }

    /// A group-committed write; a disk that refuses it is answered with ``SQLiteDiskHealth/refusal``.
    @discardableResult
    package func write<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> T, afterCommit: (@Sendable (T) -> Void)? = nil
    ) async throws -> T {
        try await diskHealth.guarding { try await writer.write(body, afterCommit: afterCommit) }
    }
}
