import Logging
import NIOCore
import PigeonDomain
import PostgresNIO

/// Encryption at rest in PostgreSQL: the check values that refuse a store its keys cannot open, and `rekey`.
extension PostgresMessageStore {
    static let atRestCheckPrefix = "at_rest_key:"

    /// Refuses a store `cipher` cannot open (``AtRestCipher/verify(checks:)``), then records the check value of the
    /// ring's newest key in `meta` (`at_rest_key:<id>`), as the embedded store does.
    static func verifyAndRecord(_ cipher: AtRestCipher, _ connection: PostgresConnection, logger: Logger) async throws {
        var checks: [String: String] = [:]
        for try await (key, value) in try await connection.query(
            "SELECT key, value FROM meta WHERE key LIKE \(atRestCheckPrefix + "%")", logger: logger
        ).decode((String, String).self) {
            checks[String(key.dropFirst(atRestCheckPrefix.count))] = value
        }
        try cipher.verify(checks: checks)
        if let check = cipher.checkValue(), checks[check.keyId] == nil {
            try await connection.query(
                "INSERT INTO meta(key, value) VALUES (\(atRestCheckPrefix + check.keyId), \(check.value)) ON CONFLICT (key) DO NOTHING",
                logger: logger)
        }
    }

    /// The plaintext of a stored chunk: opened if sealed, else (written before the store had a key) as it is.
    static func openChunk(_ data: ByteBuffer, n: Int32, cipher: AtRestCipher) throws -> [UInt8] {
        let bytes = Array(data.readableBytesView)
        guard AtRestCipher.chunkKeyId(bytes) != nil else { return bytes }
        return try cipher.openChunk(bytes, index: Int64(n))
    }
}

/// `pigeon-server rekey` for PostgreSQL: rewrites every value not sealed with the newest key of the ring, in small
/// transactions, while servers serve (they must already run with the same ring, the new key newest).
public struct PostgresRekey: Sendable {
    let client: PostgresClient
    let cipher: AtRestCipher
    let logger: Logger

    /// A sealed text column, and its table's primary key (name and SQL type), by which its rows are walked.
    struct SealedColumn {
        var table: String
        var column: String
        var keys: [(name: String, type: String)]
    }

    static let sealedColumns = [
        SealedColumn(table: "messages", column: "body", keys: [("conversation_id", "text"), ("seq", "bigint")]),
        SealedColumn(table: "dead_letters", column: "body", keys: [("server_id", "text")]),
        SealedColumn(table: "events", column: "payload", keys: [("part", "integer"), ("id", "bigint")]),
        SealedColumn(table: "event_payloads", column: "payload", keys: [("part", "integer"), ("id", "bigint")]),
        SealedColumn(table: "webhook_events", column: "body", keys: [("position", "bigint")]),
        SealedColumn(table: "push_registrations", column: "data", keys: [("user_id", "text"), ("device_id", "text")]),
        SealedColumn(
            table: "message_views", column: "body", keys: [("conversation_id", "text"), ("seq", "bigint"), ("user_id", "text")]),
    ]

    /// Connects to the store at `url`, checks the ring opens it (recording the newest key's check value) and rekeys it
    /// (``rekey(batch:progress:)``); answers what it rewrote, by table.
    public static func run(url: String, cipher: AtRestCipher, batch: Int = 500, logger: Logger, progress: @escaping (String) -> Void = { _ in })
        async throws -> [(String, Int)]
    {
        guard cipher.isOn else { throw AtRestKeyError("rekey needs --encryption-key-file") }
        let client = PostgresClient(configuration: try PostgresURL(url).clientConfiguration(maxConnections: 2), backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: [(String, Int)]?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            try await client.withConnection { connection in
                try await PostgresMessageStore.verifyAndRecord(cipher, connection, logger: logger)
            }
            return try await PostgresRekey(client: client, cipher: cipher, logger: logger).rekey(batch: batch, progress: progress)
        }
    }

    /// Rewrites every value not sealed with the ring's newest key, `batch` rows per transaction, each only if it still
    /// holds what was read; passes repeat until one rewrites nothing, then the other keys' check values go.
    func rekey(batch: Int, progress: (String) -> Void) async throws -> [(String, Int)] {
        guard let newest = cipher.newest else { throw AtRestKeyError("rekey needs --encryption-key-file") }
        var counts: [String: Int] = [:]
        while true {
            var rewritten = 0
            for column in Self.sealedColumns {
                let count = try await rekey(column, batch: batch)
                counts[column.table, default: 0] += count
                rewritten += count
            }
            let chunks = try await rekeyChunks(batch: batch)
            counts["attachment_chunks", default: 0] += chunks
            rewritten += chunks
            progress("rekey pass: \(rewritten) rewritten")
            if rewritten == 0 { break }
        }
        try await client.query(
            "DELETE FROM meta WHERE key LIKE \(PostgresMessageStore.atRestCheckPrefix + "%") AND key <> \(PostgresMessageStore.atRestCheckPrefix + newest.id)", logger: logger)
        return (Self.sealedColumns.map(\.table) + ["attachment_chunks"]).map { ($0, counts[$0] ?? 0) }
    }

    private func rekey(_ column: SealedColumn, batch: Int) async throws -> Int {
        let keyList = column.keys.map(\.name).joined(separator: ", ")
        // Aliased apart from the columns: `ORDER BY` a name picks an output column of that name first (text order).
        let keyText = column.keys.enumerated().map { "\($0.element.name)::text AS key_\($0.offset)" }.joined(separator: ", ")
        func placeholders(from first: Int) -> String {
            column.keys.enumerated().map { "$\(first + $0.offset)::text::\($0.element.type)" }.joined(separator: ", ")
        }
        var after: [String]?
        var rewritten = 0
        while true {
            var bindings = PostgresBindings()
            for key in after ?? [] { bindings.append(key) }
            let from = after == nil ? "" : "WHERE (\(keyList)) > (\(placeholders(from: 1)))"
            bindings.append(batch)
            let sql = "SELECT \(keyText), \(column.column) FROM \(column.table) \(from) ORDER BY \(keyList) LIMIT $\(bindings.count)"
            var rows: [(keys: [String], value: String?)] = []
            for try await row in try await client.query(PostgresQuery(unsafeSQL: sql, binds: bindings), logger: logger) {
                let cells = row.makeRandomAccess()
                let keys = try (0..<column.keys.count).map { try cells[$0].decode(String.self) }
                rows.append((keys, try cells[column.keys.count].decode(String?.self)))
            }
            guard let last = rows.last else { return rewritten }
            after = last.keys
            let updates = try rows.compactMap { row -> (keys: [String], old: String, new: String)? in
                guard let old = row.value, cipher.needsRekey(old) else { return nil }
                return (row.keys, old, try cipher.rekeyed(old))
            }
            if updates.isEmpty { continue }
            let update = """
                UPDATE \(column.table) SET \(column.column) = $1 WHERE (\(keyList)) = (\(placeholders(from: 2)))
                    AND \(column.column) = $\(column.keys.count + 2) RETURNING 1
                """
            rewritten += try await client.withTransaction(logger: logger) { connection in
                var changed = 0
                for row in updates {
                    var bindings = PostgresBindings()
                    bindings.append(row.new)
                    for key in row.keys { bindings.append(key) }
                    bindings.append(row.old)
                    // A row a server rewrote since the read (an edit) is left as it is now.
                    for try await _ in try await connection.query(PostgresQuery(unsafeSQL: update, binds: bindings), logger: logger) {
                        changed += 1
                    }
                }
                return changed
            }
        }
    }

    /// Attachment chunks not sealed with the newest key, rewritten `batch` per transaction (their blob and index are
    /// authenticated with them).
    private func rekeyChunks(batch: Int) async throws -> Int {
        guard let newest = cipher.newest else { return 0 }
        var after: (blob: Int64, n: Int32) = (-1, -1)
        var rewritten = 0
        while true {
            var rows: [(blob: Int64, n: Int32, data: ByteBuffer)] = []
            for try await (blob, n, data) in try await client.query(
                """
                SELECT blob_id, n, data FROM attachment_chunks WHERE (blob_id, n) > (\(after.blob), \(after.n)) ORDER BY blob_id, n
                LIMIT \(batch)
                """, logger: logger
            ).decode((Int64, Int32, ByteBuffer).self) {
                rows.append((blob, n, data))
            }
            guard let last = rows.last else { return rewritten }
            after = (last.blob, last.n)
            let stale = rows.filter { AtRestCipher.chunkKeyId(Array($0.data.readableBytesView)) != newest.id }
            if stale.isEmpty { continue }
            let updates = try stale.map { row in
                (row.blob, row.n, row.data, ByteBuffer(bytes: cipher.sealChunk(try PostgresMessageStore.openChunk(row.data, n: row.n, cipher: cipher), index: Int64(row.n))))
            }
            rewritten += try await client.withTransaction(logger: logger) { connection in
                var changed = 0
                for (blob, n, old, new) in updates {
                    for try await _ in try await connection.query(
                        "UPDATE attachment_chunks SET data = \(new) WHERE blob_id = \(blob) AND n = \(n) AND data = \(old) RETURNING 1", logger: logger)
                    {
                        changed += 1
                    }
                }
                return changed
            }
        }
    }

}
