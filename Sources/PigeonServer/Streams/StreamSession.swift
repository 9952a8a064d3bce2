import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// One open event stream of a device (a WebSocket or an SSE response): the queue between the hub and the
/// connection's writer, and the watch over that writer.
///
/// Everything the session holds for its client and the writer has not yet handed to the socket (queued events
/// and control frames alike, counted in bytes) stays within ``StreamLimits/outboundBytes``: past it the session
/// drops what it holds and ends with ``EndReason/tooSlow``. Nothing is lost by that: events are in the log and the
/// client resumes by cursor. A write that takes longer than the write timeout ends it with
/// ``EndReason/writeTimeout``.
///
/// A WebSocket session goes *live* once its backlog is written (``goLive(_:)``): from then on what is queued is not
/// taken by a writer task but drained on the connection's event loop by its ``SessionOutlet`` (one scheduling per
/// burst, whatever the number of items), and the writes in flight there count against the same budget until the
/// socket took them.
///
/// Locks: the hub's shard lock may be held while a session's lock is taken, never the other way round.
final class StreamSession: Sendable {
    enum Item: Sendable {
        case event(StoredEvent, cost: Int)
        /// A frame without a cursor, written as is.
        case frame(type: String, json: String, cost: Int)
    }

    enum Next: Sendable {
        case items([Item])
        /// Nothing arrived within the timeout.
        case idle
        case closed
    }

    /// Why the server ends a stream (rather than the client or an error).
    typealias EndReason = StreamEndReason

    private struct State: Sendable {
        var items: [Item] = []
        /// Bytes of `items`.
        var queuedBytes = 0
        /// Bytes taken by the writer and not yet written.
        var takenBytes = 0
        var closed = false
        var endReason: EndReason?
        /// When the write in progress started.
        var writeStarted: ContinuousClock.Instant?
        /// The watch waits for a write to start.
        var watchIdle = false
        /// Live: the event loop side that drains the queue (``goLive(_:)``).
        var outlet: (any SessionOutlet)?
        /// A drain is scheduled on the outlet and has not taken the queue yet.
        var drainScheduled = false
        /// Batches the outlet wrote whose writes have not completed.
        var loopWritesPending = 0

        var heldBytes: Int { queuedBytes + takenBytes }
    }

    let device: DeviceIdentity
    /// When the token that opened it was issued (a JWT's `iat`, seconds; `nil`: opaque, or no `iat`): a revocation
    /// ends the streams of tokens issued up to its second.
    let tokenIssuedAt: Int64?
    let id: UInt64
    let transport: String
    private let limits: StreamLimits
    /// Counts a limit hit by name.
    let limitHit: @Sendable (String) -> Void
    private let state = NIOLockedValueBox(State())
    /// Wakes the writer (something queued, or closed).
    private let wakeup = AsyncSignal()
    /// Wakes the watch (a write started, or the stream ends).
    private let watchSignal = AsyncSignal()

    /// Per queued item, on top of its text: its share of the queue's storage.
    private static let itemOverhead = 64

    /// `limitHit` counts a limit hit by name (`PigeonMetrics.limitHit`).
    init(
        device: DeviceIdentity, tokenIssuedAt: Int64? = nil, id: UInt64, transport: String, limits: StreamLimits,
        limitHit: @escaping @Sendable (String) -> Void
    ) {
        self.device = device
        self.tokenIssuedAt = tokenIssuedAt
        self.id = id
        self.transport = transport
        self.limits = limits
        self.limitHit = limitHit
    }

    /// Queues a stored event (from the hub).
    func deliver(_ event: StoredEvent) {
        enqueue(.event(event, cost: event.payload.utf8.count + 48 + Self.itemOverhead))
    }

    /// Queues a control frame.
    func send(type: String, json: String) {
        enqueue(.frame(type: type, json: json, cost: json.utf8.count + Self.itemOverhead))
    }

    private func enqueue(_ item: Item) {
        let cost = item.cost
        enum Outcome { case dropped, queued, scheduled(any SessionOutlet), overBudget }
        let outcome = state.withLockedValue { state -> Outcome in
            if state.closed { return .dropped }
            if state.heldBytes + cost > limits.outboundBytes {
                state.items = []
                state.queuedBytes = 0
                state.closed = true
                state.endReason = .tooSlow
                return .overBudget
            }
            state.items.append(item)
            state.queuedBytes += cost
            if let outlet = state.outlet {
                if state.drainScheduled { return .dropped }
                state.drainScheduled = true
                return .scheduled(outlet)
            }
            return .queued
        }
        switch outcome {
        case .dropped: break
        case .queued: wakeup.notify()
        case .scheduled(let outlet): outlet.scheduleDrain()
        case .overBudget:
            limitHit("stream_outbound_bytes")
            wakeAll()
        }
    }

    /// Ends the stream: the writer sees `.closed` after what is queued.
    func close() {
        state.withLockedValue { $0.closed = true }
        wakeAll()
    }

    /// Ends the stream at once for `reason`: what is queued is dropped, the write in progress is abandoned.
    func end(_ reason: EndReason) {
        state.withLockedValue { state in
            state.closed = true
            if state.endReason == nil { state.endReason = reason }
            state.items = []
            state.queuedBytes = 0
        }
        wakeAll()
    }

    private func wakeAll() {
        wakeup.notify()
        watchSignal.notify()
    }

    var isClosed: Bool { state.withLockedValue { $0.closed } }

    /// Whether the server ends this stream (it no longer counts against the device's streams).
    var isEnding: Bool { endReason != nil }

    /// Why the server ends this stream, if it does.
    var endReason: EndReason? { state.withLockedValue { $0.endReason } }

    /// Bytes held for the client and not yet written.
    var heldBytes: Int { state.withLockedValue { $0.heldBytes } }

    /// Everything queued, or waits up to `timeout` (forever if `nil`) for something. The writer reports each
    /// item's cost back with ``write(cost:_:)`` or ``release(cost:)``.
    func next(timeout: Duration?) async -> Next {
        while true {
            let next = state.withLockedValue { state -> Next? in
                if state.endReason != nil { return .closed }
                if !state.items.isEmpty {
                    let items = state.items
                    state.items = []
                    state.takenBytes += state.queuedBytes
                    state.queuedBytes = 0
                    return .items(items)
                }
                return state.closed ? .closed : nil
            }
            if let next { return next }
            guard let timeout else {
                await wakeup.wait()
                if Task.isCancelled { return .closed }
                continue
            }
            let before = ContinuousClock.now
            await wakeup.wait(timeout: timeout)
            if Task.isCancelled { return .closed }
            if ContinuousClock.now - before >= timeout, state.withLockedValue({ $0.items.isEmpty && !$0.closed }) {
                return .idle
            }
        }
    }

    /// Hands the queue to `outlet` (the backlog is written): what is queued now and later is drained on its event loop.
    func goLive(_ outlet: any SessionOutlet) {
        let schedule = state.withLockedValue { state -> Bool in
            state.outlet = outlet
            guard !state.items.isEmpty, !state.drainScheduled else { return false }
            state.drainScheduled = true
            return true
        }
        if schedule { outlet.scheduleDrain() }
    }

    /// For the outlet's drain: everything queued (its cost now counts as taken, until ``loopWriteFinished(cost:)`` or
    /// ``release(cost:)``), or `nil` once the server ends the stream.
    func takeForLoop() -> [Item]? {
        state.withLockedValue { state -> [Item]? in
            state.drainScheduled = false
            if state.endReason != nil { return nil }
            let items = state.items
            state.items = []
            state.takenBytes += state.queuedBytes
            state.queuedBytes = 0
            return items
        }
    }

    /// The outlet handed a batch to the socket: the write timeout runs from now unless a batch is in flight already.
    func loopWriteStarted() {
        let notifyWatch = state.withLockedValue { state -> Bool in
            state.loopWritesPending += 1
            guard state.loopWritesPending == 1 else { return false }
            state.writeStarted = .now
            defer { state.watchIdle = false }
            return state.watchIdle
        }
        if notifyWatch { watchSignal.notify() }
    }

    /// A batch the outlet wrote completed (written, or failed with the connection): its `cost` is given back, and the
    /// write timeout restarts from now for the batches still in flight (the socket is taking data).
    func loopWriteFinished(cost: Int) {
        state.withLockedValue { state in
            state.loopWritesPending = max(0, state.loopWritesPending - 1)
            state.writeStarted = state.loopWritesPending > 0 ? .now : nil
            state.takenBytes = max(0, state.takenBytes - cost)
        }
    }

    /// Runs one write to the socket under the watch of ``watch()``; `cost` is what the written item counted
    /// (0 for what was read from the log).
    func write(cost: Int, _ body: () async throws -> Void) async throws {
        let notifyWatch = state.withLockedValue { state -> Bool in
            state.writeStarted = .now
            defer { state.watchIdle = false }
            return state.watchIdle
        }
        if notifyWatch { watchSignal.notify() }
        defer { release(cost: cost, endingWrite: true) }
        try await body()
    }

    /// Gives back the cost of an item taken and not written (an event already read from the log).
    func release(cost: Int) {
        release(cost: cost, endingWrite: false)
    }

    private func release(cost: Int, endingWrite: Bool) {
        state.withLockedValue { state in
            if endingWrite { state.writeStarted = nil }
            state.takenBytes = max(0, state.takenBytes - cost)
        }
    }

    /// Watches the writer until the server must end the stream, and returns why: over the byte budget, replaced, or a
    /// write that took longer than the write timeout. Returns `nil` when cancelled, and with `untilClosed` once the
    /// stream is closed.
    func watch(untilClosed: Bool = false) async -> EndReason? {
        enum Step { case end(EndReason), closed, waitUntil(ContinuousClock.Instant), waitForWrite }
        let timeout = limits.writeTimeout
        while !Task.isCancelled {
            let now = ContinuousClock.now
            let step = state.withLockedValue { state -> Step in
                if let reason = state.endReason { return .end(reason) }
                if untilClosed, state.closed { return .closed }
                guard let started = state.writeStarted else {
                    state.watchIdle = true
                    return .waitForWrite
                }
                if now - started >= timeout {
                    state.closed = true
                    state.endReason = .writeTimeout
                    state.items = []
                    state.queuedBytes = 0
                    return .end(.writeTimeout)
                }
                return .waitUntil(started + timeout)
            }
            switch step {
            case .end(let reason):
                if reason == .writeTimeout {
                    limitHit("stream_write_timeout")
                    wakeAll()
                }
                return reason
            case .closed:
                return nil
            case .waitUntil(let deadline):
                await watchSignal.wait(timeout: deadline - now)
            case .waitForWrite:
                await watchSignal.wait()
            }
        }
        return nil
    }
}

/// The event loop side of a live session (``StreamSession/goLive(_:)``): told, from any thread, that the session has
/// something to write; it drains the session on its loop.
protocol SessionOutlet: AnyObject, Sendable {
    func scheduleDrain()
}

extension StreamSession.Item {
    /// The bytes this item counts against the session's budget.
    var cost: Int {
        switch self {
        case .event(_, let cost), .frame(_, _, let cost): cost
        }
    }
}
