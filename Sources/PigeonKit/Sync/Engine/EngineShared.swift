import Logging
import NIOConcurrencyHelpers
import PigeonProtocol

/// What the engine's loops share: the database, the transport, the event hub, the settings, the clock and jitter,
/// the connection (``ConnectionSlot``), the outbox's queue, and the signals that wake each loop. Everything learnt
/// from the server goes through ``apply(_:)``: persisted first, then announced, then the loops it concerns woken.
final class EngineShared: Sendable {
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

    /// Persists and announces a batch, then wakes the loops it concerns.
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
}

/// One of the engine's parts (a loop and what it does): it reads the shared state as its own.
protocol EnginePart: Sendable {
    var shared: EngineShared { get }
}

extension EnginePart {
    var store: LocalStore { shared.store }
    var transport: any PigeonTransport { shared.transport }
    var hub: EventHub { shared.hub }
    var settings: PigeonClient.Configuration { shared.settings }
    var logger: Logger { shared.logger }
    var clock: ElapsedClock { shared.clock }
    var jitter: @Sendable () -> Double { shared.jitter }
    var slot: NIOLockedValueBox<EngineShared.ConnectionSlot> { shared.slot }
    var outbox: NIOLockedValueBox<OutboxQueue> { shared.outbox }
    var connectionState: ConnectionState { shared.connectionState }
    var isNetworkEnabled: Bool { shared.isNetworkEnabled }
    var connectionGeneration: Int { shared.connectionGeneration }
    var onlineConnection: (any EventStreamConnection)? { shared.onlineConnection }
    func setState(_ state: ConnectionState) { shared.setState(state) }
    func apply(_ batch: [Incoming]) async throws { try await shared.apply(batch) }
    var connectionWake: AsyncSignal { shared.connectionWake }
    var outboxWake: AsyncSignal { shared.outboxWake }
    var receiptWake: AsyncSignal { shared.receiptWake }
    var gapWake: AsyncSignal { shared.gapWake }
    var catchUpWake: AsyncSignal { shared.catchUpWake }
}
