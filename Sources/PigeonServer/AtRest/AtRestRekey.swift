import Foundation
import Logging
import PigeonDomain
import PigeonPostgres
import PigeonSQLite

/// `pigeon-server rekey`: rewrites everything a store keeps encrypted at rest under the newest key of the ring, in
/// small transactions, while servers keep serving from it (SECURITY.md, "Encryption at rest"). Once it returns, no
/// value is left under another key, and a ring of the newest key alone opens the store.
public enum AtRestRekey {
    /// Rekeys the embedded files under `dataDirectory`, or the PostgreSQL store at `postgresURL`; answers how many
    /// values it rewrote, by table.
    public static func run(
        dataDirectory: String?, postgresURL: String?, cipher: AtRestCipher, batch: Int, logger: Logger
    ) async throws -> [(table: String, rewritten: Int)] {
        let progress: @Sendable (String) -> Void = { logger.info("\($0)") }
        if let postgresURL {
            return try await PostgresRekey.run(url: postgresURL, cipher: cipher, batch: batch, logger: logger, progress: progress)
                .map { ($0.0, $0.1) }
        }
        let directory = URL(fileURLWithPath: dataDirectory ?? ServerConfiguration().dataDirectory)
        return try SQLiteRekey.run(dataDirectory: directory, cipher: cipher, batch: batch, progress: progress).map { ($0.0, $0.1) }
    }
}
