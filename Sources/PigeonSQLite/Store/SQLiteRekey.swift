import Foundation
import GRDB
import NIOPosix
import PigeonDomain

/// `pigeon-server rekey` for the embedded files: rewrites every sealed (or not yet sealed) value under the ring's
/// newest key, in small transactions, so a server serving from the same files waits at most one batch for the writer.
///
/// Each row is rewritten only if it still holds what was read (a server's edit in between wins: it wrote under the
/// newest key already, as long as the servers run with the same ring). Passes repeat until one finds nothing left to
/// rewrite; only then are the check values of the other keys removed, after which a ring of the newest key alone
/// opens the store.
public enum SQLiteRekey {
    /// A sealed column, and the key its table's rows are walked by.
    struct Column {
        var table: String
        var column: String
        var keys = ["rowid"]
    }

    static let storeColumns = [
        Column(table: "messages", column: "body"), Column(table: "dead_letters", column: "body"),
        Column(table: "events", column: "payload"), Column(table: "event_payloads", column: "payload"),
        Column(table: "webhook_events", column: "body"),
        Column(table: "push_registrations", column: "data", keys: ["user_id", "device_id"]),
        Column(table: "message_views", column: "body", keys: ["conversation_id", "seq", "user_id"]),
    ]
    static let bufferColumns = [Column(table: "entries", column: "body")]

    /// Rekeys `store.sqlite`, `buffer.sqlite` (if there is one) and the attachment files under `dataDirectory`;
    /// answers what it rewrote, by table (and `attachment files`).
    public static func run(dataDirectory: URL, cipher: AtRestCipher, batch: Int = 500, progress: (String) -> Void = { _ in })
        throws -> [(String, Int)]
    {
        guard cipher.isOn else { throw AtRestKeyError("rekey needs --encryption-key-file") }
        let storePath = dataDirectory.appendingPathComponent("store.sqlite").path
        guard FileManager.default.fileExists(atPath: storePath) else { throw AtRestKeyError("no embedded store at \(storePath)") }
        let store = try SQLiteDatabase.open(path: storePath, durable: true, readers: 1, cipher: cipher)
        try SQLiteSchema.migrator.migrate(store)
        try store.write { db in try AtRestFunctions.verifyAndRecord(cipher, db) }
        let bufferPath = dataDirectory.appendingPathComponent("buffer.sqlite").path
        let buffer = FileManager.default.fileExists(atPath: bufferPath)
            ? try SQLiteDatabase.open(path: bufferPath, durable: true, readers: 1, cipher: cipher) : nil
        let files = AttachmentFiles(
            directory: dataDirectory.appendingPathComponent("attachments"), durable: true, pool: .singleton, cipher: cipher)

        var counts: [String: Int] = [:]
        while true {
            var rewritten = 0
            for column in storeColumns {
                let count = try rekey(column, in: store, cipher: cipher, batch: batch)
                counts[column.table, default: 0] += count
                rewritten += count
            }
            if let buffer {
                for column in bufferColumns {
                    let count = try rekey(column, in: buffer, cipher: cipher, batch: batch)
                    counts["buffer " + column.table, default: 0] += count
                    rewritten += count
                }
            }
            let contents = try store.read { db in
                try Row.fetchAll(db, sql: "SELECT sha256, MAX(size) FROM attachments GROUP BY sha256").map { ($0[0] as String, $0[1] as Int64) }
            }
            for (sha256, size) in contents {
                guard try files.reseal(sha256, size: size) else { continue }
                counts["attachment files", default: 0] += 1
                rewritten += 1
            }
            progress("rekey pass: \(rewritten) rewritten")
            if rewritten == 0 { break }
        }
        try store.write { db in
            try db.execute(
                sql: "DELETE FROM meta WHERE key LIKE ? AND key != ?",
                arguments: [AtRestFunctions.checkPrefix + "%", AtRestFunctions.checkPrefix + cipher.newest!.id])
        }
        // The old values' pages leave the WAL (as far as no reader holds them); free pages keep old ciphertext until
        // SQLite reuses them (SECURITY.md).
        for pool in [store] + (buffer.map { [$0] } ?? []) {
            try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        }
        return (storeColumns.map(\.table) + bufferColumns.map { "buffer " + $0.table } + ["attachment files"])
            .map { ($0, counts[$0] ?? 0) }
    }

    /// How many values of the store under `dataDirectory` (its buffer's too) a rekey would rewrite now: the values not
    /// sealed with the ring's newest key. Reads only.
    package static func remaining(dataDirectory: URL, cipher: AtRestCipher) throws -> Int {
        var count = 0
        for (file, columns) in [("store.sqlite", storeColumns), ("buffer.sqlite", bufferColumns)] {
            let path = dataDirectory.appendingPathComponent(file).path
            guard FileManager.default.fileExists(atPath: path) else { continue }
            let pool = try SQLiteDatabase.open(path: path, durable: false, readers: 1, cipher: cipher)
            for column in columns {
                count += try pool.read { db in
                    try String.fetchAll(db, sql: "SELECT \(column.column) FROM \(column.table) WHERE \(column.column) IS NOT NULL")
                        .filter { cipher.needsRekey($0) }.count
                }
            }
        }
        return count
    }

    /// One pass over `column`, `batch` rows per read and per write transaction, in the order of the table's key;
    /// how many values it rewrote.
    static func rekey(_ column: Column, in pool: DatabasePool, cipher: AtRestCipher, batch: Int) throws -> Int {
        let keys = column.keys.joined(separator: ", ")
        let placeholders = databaseQuestionMarks(count: column.keys.count)
        var after: [DatabaseValue]?
        var rewritten = 0
        while true {
            let rows = try pool.read { db in
                let from = after.map { _ in "WHERE (\(keys)) > (\(placeholders))" } ?? ""
                return try Row.fetchAll(
                    db, sql: "SELECT \(keys), \(column.column) FROM \(column.table) \(from) ORDER BY \(keys) LIMIT ?",
                    arguments: StatementArguments((after ?? []) + [batch.databaseValue]))
            }
            guard let last = rows.last else { return rewritten }
            after = Array(last.databaseValues.prefix(column.keys.count))
            let updates = try rows.compactMap { row -> (key: [DatabaseValue], old: String, new: String)? in
                guard let old = row[column.keys.count] as String?, cipher.needsRekey(old) else { return nil }
                return (Array(row.databaseValues.prefix(column.keys.count)), old, try cipher.rekeyed(old))
            }
            if updates.isEmpty { continue }
            rewritten += try pool.write { db in
                var changed = 0
                for update in updates {
                    try db.execute(
                        sql: "UPDATE \(column.table) SET \(column.column) = ? WHERE (\(keys)) = (\(placeholders)) AND \(column.column) = ?",
                        arguments: StatementArguments([update.new.databaseValue] + update.key + [update.old.databaseValue]))
                    changed += db.changesCount
                }
                return changed
            }
        }
    }
}
