import Logging
import PigeonDomain
import ServiceLifecycle

/// Periodic upkeep: prunes events older than the retention period.
final class Housekeeping: Service {
    private let store: any EventLog
    private let configuration: ServerConfiguration
    private let logger: Logger

    init(store: any EventLog, configuration: ServerConfiguration, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await prune()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.configuration.pruneInterval) }
        }
    }

    func prune() async {
        let retention = configuration.eventRetention.components
        let cutoff = WallClock.nowMillis() - retention.seconds * 1000 - retention.attoseconds / 1_000_000_000_000_000
        do {
            let pruned = try await store.pruneEvents(olderThan: cutoff)
            if pruned > 0 { logger.info("pruned old events", metadata: ["count": "\(pruned)"]) }
        } catch {
            logger.error("event pruning failed", metadata: ["error": "\(error)"])
        }
    }
}
