import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// The default ingest buffer: a SQLite table in its own file (WAL, group commit).
///
/// An append is durable when its transaction has committed; with `durable` (the default) that commit is
/// fsynced, so a ✓ survives power loss too. The de-duplication index keeps one small row per message
/// forever, which is what makes a resend idempotent "at any later time". It is keyed by sender, device and
/// clientMessageId: a device id is unique only within its user (JWT `did` claims are the identity provider's).
///
/// A write SQLite refuses for lack of disk space (or an I/O error) fails the append with `503 overloaded` and a
/// generic text, and ``isReady()`` answers false until a write succeeds again.
public final class EmbeddedBuffer: IngestBuffer {
    private struct State {
        var lastHandedOut: Int64 = 0
        var depth: Int = 0
    }

    private let pool: DatabasePool
    private let writer: GroupCommitWriter
    private let arrivals = AsyncSignal()
    private let state = NIOLockedValueBox(State())
    private let diskHealth: SQLiteDiskHealth

    /// Opens or creates the buffer at `path`; with `cipher` on, bodies are sealed at rest as in the store.
    public init(path: String, durable: Bool = true, cipher: AtRestCipher = .off) throws {
        self.diskHealth = SQLiteDiskHealth(path: path)
        self.pool = try SQLiteDatabase.open(path: path, durable: durable, readers: 2, cipher: cipher)
        try Self.migrator.migrate(pool)
        self.writer = GroupCommitWriter(writer: pool)
        let depth = try pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM entries") ?? 0 }
        state.withLockedValue { $0.depth = depth }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE entries(
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        attempts INTEGER NOT NULL DEFAULT 0,
                        server_id TEXT NOT NULL,
                        conversation_id TEXT NOT NULL,
                        sender_id TEXT NOT NULL,
                        sender_device_id TEXT NOT NULL,
                        client_message_id TEXT NOT NULL,
                        type TEXT NOT NULL,
                        body TEXT NOT NULL,
                        client_timestamp INTEGER NOT NULL,
                        accepted_at INTEGER NOT NULL);
                    CREATE TABLE dedupe(
                        device_id TEXT NOT NULL,
                        client_message_id TEXT NOT NULL,
                        server_id TEXT NOT NULL,
                        accepted_at INTEGER NOT NULL,
                        PRIMARY KEY(device_id, client_message_id)) WITHOUT ROWID;
                    """)
        }
        // v2 (issue 11): de-duplication by (sender, device, clientMessageId). Records of earlier versions name no
        // sender and are dropped: a resend of a message accepted before the upgrade is accepted again and the store's
        // own unique index keeps it stored once.
        migrator.registerMigration("v2") { db in
            try db.execute(
                sql: """
                    DROP TABLE dedupe;
                    CREATE TABLE dedupe(
                        sender_id TEXT NOT NULL,
                        device_id TEXT NOT NULL,
                        client_message_id TEXT NOT NULL,
                        server_id TEXT NOT NULL,
                        accepted_at INTEGER NOT NULL,
                        PRIMARY KEY(sender_id, device_id, client_message_id)) WITHOUT ROWID;
                    CREATE TABLE disk_probe(only_row INTEGER PRIMARY KEY CHECK (only_row = 1), at INTEGER NOT NULL);
                    """)
        }
        // v3 (API.md 1.2): a message may quote another and be in a thread.
        migrator.registerMigration("v3") { db in
            try db.execute(sql: "ALTER TABLE entries ADD COLUMN reply_to TEXT; ALTER TABLE entries ADD COLUMN thread_root TEXT;")
        }
        // v4 (API.md 1.2): a message may carry attachments, their metadata resolved at accept (wire JSON, NULL: none).
        migrator.registerMigration("v4") { db in
            try db.execute(sql: "ALTER TABLE entries ADD COLUMN attachments TEXT")
        }
        return migrator
    }

    public var depth: Int { state.withLockedValue { $0.depth } }

    /// Not ready while the disk refuses writes: then, once the file system has headroom again, each call tries a tiny
    /// write, so readiness comes back with space.
    public func isReady() async -> Bool {
        await diskHealth.isReady(
            probe: {
                let now = WallClock.nowMillis()
                try await write { db in try db.execute(sql: "INSERT INTO disk_probe(only_row, at) VALUES (1, ?) ON CONFLICT(only_row) DO UPDATE SET at = excluded.at", arguments: [now]) }
            },
            read: { _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") } })
    }

    public var isDiskFull: Bool { diskHealth.isRefusingWrites }

    /// A group-committed write; a disk that refuses it is answered with ``SQLiteDiskHealth/refusal``.
    @discardableResult
    private func write<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> T, afterCommit: (@Sendable (T) -> Void)? = nil
    ) async throws -> T {
        try await diskHealth.guarding { try await writer.write(body, afterCommit: afterCommit) }
    }

    public func append(
        _ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void
    ) {
        writer.submit(
            isolated: false,
            { db -> AppendOutcome in
                if let refusal {
                    // Refused: answer a duplicate, write nothing.
                    if let row = try Row.fetchOne(
                        db.cachedStatement(
                            sql: "SELECT server_id, accepted_at FROM dedupe WHERE sender_id = ? AND device_id = ? AND client_message_id = ?"),
                        arguments: [message.senderId, message.senderDeviceId, message.clientMessageId])
                    {
                        return .duplicate(serverId: row[0], acceptedAt: row[1])
                    }
                    throw refusal
                }
                try db.cachedStatement(
                    sql: """
                        INSERT INTO dedupe(sender_id, device_id, client_message_id, server_id, accepted_at) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT DO NOTHING
                        """
                ).execute(arguments: [message.senderId, message.senderDeviceId, message.clientMessageId, message.serverId, message.acceptedAt])
                if db.changesCount == 0 {
                    let row = try Row.fetchOne(
                        db.cachedStatement(
                            sql: "SELECT server_id, accepted_at FROM dedupe WHERE sender_id = ? AND device_id = ? AND client_message_id = ?"),
                        arguments: [message.senderId, message.senderDeviceId, message.clientMessageId])!
                    return .duplicate(serverId: row[0], acceptedAt: row[1])
                }
                try Self.insertEntry(message, db)
                return .accepted
            },
            afterCommit: { [state, arrivals] outcome in
                if outcome == .accepted {
                    state.withLockedValue { $0.depth += 1 }
                    arrivals.notify()
                }
            },
            completion: { [diskHealth] result in
                switch result {
                case .success(let outcome):
                    // Only an accepted append wrote something: a duplicate's answer says nothing about the disk.
                    if outcome == .accepted { diskHealth.recordSuccess() }
                    completion(result)
                case .failure(let error):
                    completion(.failure(diskHealth.translate(error)))
                }
            }
        )
    }

    private static func insertEntry(_ message: BufferedMessage, _ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO entries(server_id, conversation_id, sender_id, sender_device_id, client_message_id,
                    type, body, client_timestamp, accepted_at, reply_to, thread_root, attachments) VALUES (?, ?, ?, ?, ?, ?, at_rest_seal(?), ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            message.serverId, message.conversationId, message.senderId, message.senderDeviceId,
            message.clientMessageId, message.type, message.body, message.clientTimestamp, message.acceptedAt,
            message.replyTo, message.threadRoot, AttachmentColumn.encode(message.attachments),
        ])
    }

    public func requeue(_ message: BufferedMessage) async throws {
        try await write(
            { db in try Self.insertEntry(message, db) },
            afterCommit: { [state, arrivals] _ in
                state.withLockedValue { $0.depth += 1 }
                arrivals.notify()
            })
    }

    public func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry] {
        let entries = try await readAfterLastHandedOut(max: max)
        if !entries.isEmpty || wait <= .zero { return entries }
        await arrivals.wait(timeout: wait)
        return try await readAfterLastHandedOut(max: max)
    }

    private func readAfterLastHandedOut(max: Int) async throws -> [BufferEntry] {
        let after = state.withLockedValue { $0.lastHandedOut }
        let entries = try await pool.read { db in
            try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT id, attempts, server_id, conversation_id, sender_id, sender_device_id, client_message_id,
                            type, at_rest_open(body), client_timestamp, accepted_at, reply_to, thread_root, attachments
                        FROM entries WHERE id > ? ORDER BY id LIMIT ?
                        """),
                arguments: [after, max]
            ).map { row in
                BufferEntry(
                    id: String(row[0] as Int64),
                    message: BufferedMessage(
                        serverId: row[2], conversationId: row[3], senderId: row[4], senderDeviceId: row[5],
                        clientMessageId: row[6], type: row[7], body: row[8], clientTimestamp: row[9], acceptedAt: row[10],
                        replyTo: row[11], threadRoot: row[12], attachments: AttachmentColumn.decode(row[13])),
                    attempts: row[1])
            }
        }
        if let last = entries.last, let id = Int64(last.id) {
            state.withLockedValue { $0.lastHandedOut = Swift.max($0.lastHandedOut, id) }
        }
        return entries
    }

    public func acknowledge(entryIds: [String]) async throws {
        let ids = entryIds.compactMap { Int64($0) }
        guard !ids.isEmpty else { return }
        let removed = try await write { db -> Int in
            var removed = 0
            for id in ids {
                try db.cachedStatement(sql: "DELETE FROM entries WHERE id = ?").execute(arguments: [id])
                removed += db.changesCount
            }
            return removed
        }
        state.withLockedValue { $0.depth -= removed }
    }

    public func recordFailedAttempt(entryId: String, attempts: Int) async throws {
        guard let id = Int64(entryId) else { return }
        try await write { db in
            try db.cachedStatement(sql: "UPDATE entries SET attempts = ? WHERE id = ?").execute(arguments: [attempts, id])
        }
    }
}
