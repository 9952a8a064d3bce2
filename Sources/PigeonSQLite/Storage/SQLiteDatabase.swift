import Foundation
import GRDB
import PigeonDomain

/// How SQLite files of the embedded mode are opened.
package enum SQLiteDatabase {
    /// Opens (creating if needed) a WAL database at `path`, with `synchronous = FULL` when `durable`
    /// (every commit is on disk before it returns, so an answer given after a commit survives power loss)
    /// and `NORMAL` otherwise (survives a crash of the process, not of the machine). Every connection has the SQL
    /// functions of `cipher` (``AtRestFunctions``).
    package static func open(path: String, durable: Bool, readers: Int = 4, cipher: AtRestCipher = .off) throws -> DatabasePool {
        var configuration = Configuration()
        configuration.maximumReaderCount = readers
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = \(durable ? "FULL" : "NORMAL")")
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
            try db.execute(sql: "PRAGMA cache_size = -32000")
            // Commits must not stall on checkpoints: ``WALCheckpointer`` runs them beside the writer. This
            // threshold is only a safety net for a WAL that the checkpointer could not keep small.
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 50000")
            AtRestFunctions.register(cipher, on: db)
        }
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        // GRDB turns WAL on for the writer after `prepareDatabase`, and with it `synchronous = NORMAL` (no sync at
        // commit): set what was asked for on the writer afterwards, or a durable answer is not durable at all.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(durable ? "FULL" : "NORMAL")")
        }
        return pool
    }

    /// The writer's `synchronous` setting (1 = NORMAL, 2 = FULL): what every commit of `pool` does.
    package static func writerSynchronousSetting(of pool: DatabasePool) throws -> Int {
        try pool.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA synchronous") ?? -1 }
    }
}
