import Logging
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Periodic upkeep: prunes events older than the retention period, every prune interval of `clock`.
final class Housekeeping: Service {
    private let store: any EventLog
    private let configuration: ServerConfiguration
    private let logger: Logger
    private let clock: ElapsedClock

    init(store: any EventLog, configuration: ServerConfiguration, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        self.clock = ElapsedClock(clock)
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            await prune()
            try? await cancelWhenGracefulShutdown { try await self.clock.sleep(for: self.configuration.pruneInterval) }
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
