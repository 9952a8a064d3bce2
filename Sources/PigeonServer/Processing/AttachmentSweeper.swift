import Logging
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Erases what no message carries (API.md 1.2), every ``AttachmentConfiguration/sweepInterval`` of `clock`: the
/// uploads of messages deleted for everyone, and uploads no send named within 24 hours. With several nodes each
/// sweeps; a sweep is idempotent, so two at once only do the work once.
final class AttachmentSweeper: Service {
    private let store: any AttachmentStore
    private let interval: Duration
    private let metrics: PigeonMetrics
    private let logger: Logger
    private let clock: ElapsedClock

    init(store: any AttachmentStore, interval: Duration, metrics: PigeonMetrics, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) {
        self.store = store
        self.interval = interval
        self.metrics = metrics
        self.logger = logger
        self.clock = ElapsedClock(clock)
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await self.clock.sleep(for: self.interval) }
            guard !Task.isShuttingDownGracefully && !Task.isCancelled else { break }
            await sweep()
        }
    }

    func sweep() async {
        do {
            let swept = try await store.sweep(now: WallClock.nowMillis())
            if swept.attachments > 0 {
                metrics.attachmentsSwept(count: swept.attachments, bytes: swept.bytes)
                logger.info("erased attachments no message carries", metadata: ["count": "\(swept.attachments)", "bytes": "\(swept.bytes)"])
            }
        } catch {
            logger.error("the attachment sweep failed; it runs again at the next interval", metadata: ["error": "\(error)"])
        }
    }
}
