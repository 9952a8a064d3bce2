import GRDB
import Logging
import ServiceLifecycle

/// Checkpoints the embedded SQLite files from connections of its own, so the writers never wait for a
/// checkpoint (copying the WAL into the database and syncing it) inside a commit.
///
/// Passive checkpoints run next to the writers and readers without blocking them; SQLite restarts the WAL
/// from its beginning once it has been fully checkpointed, which keeps the file small.
package final class WALCheckpointer: Service {
    private let paths: [String]
    private let interval: Duration
    private let logger: Logger

    package init(paths: [String], interval: Duration = .milliseconds(50), logger: Logger) {
        self.paths = paths
        self.interval = interval
        self.logger = logger
    }

    package func run() async throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(1)
        let queues = try paths.map { try DatabaseQueue(path: $0, configuration: configuration) }
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }
            for queue in queues {
                do {
                    try await queue.writeWithoutTransaction { db in _ = try db.checkpoint(.passive) }
                } catch {
                    logger.debug("checkpoint skipped", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
