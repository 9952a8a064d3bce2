import ArgumentParser
import Foundation
import Logging
import PigeonServer

/// `pigeon-server rekey`: re-encrypts what the store keeps at rest under the newest key of the key ring.
struct Rekey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Re-encrypt every value stored at rest under the newest key of --encryption-key-file, in small batches, while servers serve.",
        discussion: """
            Run the servers with the new key ring first (old key and new key, the new one last), then rekey: afterwards \
            no value is left under an old key, and a ring of the new key alone opens the store. See SECURITY.md.
            """)

    @Option(name: .customLong("data-dir"), help: "Directory of the embedded store (default ./pigeon-data, or PIGEON_DATA_DIR).")
    var dataDir: String?

    @Option(name: .customLong("postgres-url"), help: "Rekey this PostgreSQL store instead of the embedded one.")
    var postgresURL: String?

    @Option(name: .customLong("batch-size"), help: "Values rewritten per transaction.")
    var batchSize = 500

    @OptionGroup(title: "Encryption at rest")
    var atRest: AtRestOptions

    func validate() throws {
        guard batchSize > 0 else { throw ValidationError("--batch-size must be positive") }
        if dataDir != nil && postgresURL != nil { throw ValidationError("--data-dir and --postgres-url exclude each other") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let cipher = try atRest.cipher(environment: environment)
        guard cipher.isOn else { throw ValidationError("rekey needs --encryption-key-file (or PIGEON_ENCRYPTION_KEY_FILE)") }
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        let logger = Logger(label: "pigeon-rekey")
        let counts: [(table: String, rewritten: Int)]
        do {
            counts = try await AtRestRekey.run(
                dataDirectory: dataDir ?? environment["PIGEON_DATA_DIR"], postgresURL: postgresURL, cipher: cipher, batch: batchSize,
                logger: logger)
        } catch {
            logger.critical("cannot rekey", metadata: ["error": "\(String(reflecting: error))"])
            throw ExitCode.failure
        }
        for (table, rewritten) in counts { print("\(table): \(rewritten) rewritten") }
        print("every value is under key \(cipher.newest!.id)")
    }
}
