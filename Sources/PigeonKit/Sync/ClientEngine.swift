import Logging
import NIOConcurrencyHelpers
import PigeonProtocol

/// The network side of a ``PigeonClient``: the connection loop, the outbox dispatcher, delivered/read receipts,
/// gap recovery, periodic catch-up and WAL checkpoints, each a loop of ``run()`` (in the `ClientEngine+…` files).
/// Everything it learns goes through the local database first. Every wait and backoff runs on ``clock``, and every
/// jitter comes from ``jitter``: both from the configuration, so tests can drive them.
final class ClientEngine: Sendable {
    let store: LocalStore
    let transport: any PigeonTransport
    let hub: EventHub
    let receiver: Receiver
    let settings: PigeonClient.Configuration
    let logger: Logger
    let clock: ElapsedClock
    /// A value in 0...1 for each backoff's equal jitter.
    let jitter: @Sendable () -> Double

    struct ConnectionSlot {
        var connection: (any EventStreamConnection)?
        var state = ConnectionState.offline
        var networkEnabled = true
        var running = false
        var lastError: PigeonClientError?
        /// Receipts already sent on this connection (so one is not repeated while its echo is on the way).
        var receiptsSent: [String: Int64] = [:]
        /// Receipts sent since the engine was made, on any connection (what a push report counts).
        var receiptsSentCount = 0
        /// Counts the connections opened: a new one has a higher number than any before it.
        var connectionGeneration = 0
    }

    let slot = NIOLockedValueBox(ConnectionSlot())
    let outbox = NIOLockedValueBox(OutboxQueue())
    let connectionWake: AsyncSignal
    let outboxWake: AsyncSignal
    let receiptWake: AsyncSignal
    let gapWake: AsyncSignal
    let catchUpWake: AsyncSignal

    init(store: LocalStore, transport: any PigeonTransport, hub: EventHub, settings: PigeonClient.Configuration, logger: Logger) throws {
        self.store = store
        self.transport = transport
        self.hub = hub
        self.settings = settings
        self.logger = logger
        self.receiver = Receiver(store: store, hub: hub)
        let clock = ElapsedClock(settings.clock)
        self.clock = clock
        self.jitter = settings.jitter
        connectionWake = AsyncSignal(clock: clock)
        outboxWake = AsyncSignal(clock: clock)
        receiptWake = AsyncSignal(clock: clock)
        gapWake = AsyncSignal(clock: clock)
        catchUpWake = AsyncSignal(clock: clock)
        let items = try store.loadOutbox()
        outbox.withLockedValue { queue in
            for item in items { queue.add(item) }
        }
    }

    var connectionState: ConnectionState { slot.withLockedValue { $0.state } }
    var lastConnectionError: PigeonClientError? { slot.withLockedValue { $0.lastError } }
    var isNetworkEnabled: Bool { slot.withLockedValue { $0.networkEnabled } }
    var isRunning: Bool { slot.withLockedValue { $0.running } }
    var receiptsSentCount: Int { slot.withLockedValue { $0.receiptsSentCount } }
    var connectionGeneration: Int { slot.withLockedValue { $0.connectionGeneration } }

    var onlineConnection: (any EventStreamConnection)? {
        slot.withLockedValue { $0.state == .online ? $0.connection : nil }
    }

    /// Moves to `state`; once ``ConnectionState/signedOut`` nothing moves it any more.
    func setState(_ state: ConnectionState) {
        let changed = slot.withLockedValue { slot -> Bool in
            guard slot.state != state, slot.state != .signedOut else { return false }
            slot.state = state
            return true
        }
        if changed { hub.emit(.connectionStateChanged(state)) }
    }

    /// Switches the network on or off. Off closes the stream at once; messages sent meanwhile wait (⏰).
    func setNetworkEnabled(_ enabled: Bool) {
        let connection = slot.withLockedValue { slot -> (any EventStreamConnection)? in
            slot.networkEnabled = enabled
            return enabled ? nil : slot.connection
        }
        connection?.close()
        connectionWake.notify()
    }

    /// Runs every loop until the task is cancelled.
    func run() async {
        slot.withLockedValue { $0.running = true }
        defer { slot.withLockedValue { $0.running = false } }
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.connectionLoop() }
                group.addTask { await self.outboxLoop() }
                group.addTask { await self.receiptLoop() }
                group.addTask { await self.gapLoop() }
                group.addTask { await self.catchUpLoop() }
                group.addTask { await self.checkpointLoop() }
            }
        } onCancel: {
            // The stream's reader waits for frames, not for cancellation: closing the connection ends it.
            self.slot.withLockedValue { $0.connection }?.close()
        }
        slot.withLockedValue { $0.connection }?.close()
        setState(.offline)
    }

    /// Persists and announces a batch, then starts what it calls for.
    func apply(_ batch: [Incoming]) async throws {
        let outcome = try await receiver.apply(batch)
        if !outcome.outboxSettled.isEmpty {
            outbox.withLockedValue { queue in
                for settled in outcome.outboxSettled { _ = queue.remove(settled.localId) }
            }
            outboxWake.notify()
        }
        if !outcome.gaps.isEmpty || outcome.fetchNeeded { gapWake.notify() }
        if outcome.resetRequested { catchUpWake.notify() }
        if outcome.receiptsDue || !outcome.conversationsChanged.isEmpty { receiptWake.notify() }
    }

    /// Keeps the write-ahead log short without making any write pay for it (see ``LocalStore/checkpoint(thresholdBytes:)``).
    func checkpointLoop() async {
        while !Task.isCancelled {
            try? await clock.sleep(for: .seconds(1))
            do {
                try await store.checkpoint()
            } catch {
                logger.debug("checkpoint failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
