import NIOConcurrencyHelpers

/// One open event stream of a device (a WebSocket or an SSE response): the queue between the hub and the
/// connection's writer.
///
/// Events are buffered up to a limit; past it the session drops them and flags an overflow, and the writer
/// re-reads the gap from the event log, so a slow reader loses nothing and cannot grow the server's memory.
/// Control frames (acks, errors, typing) are never dropped.
final class StreamSession: Sendable {
    enum Item: Sendable {
        case event(StoredEvent)
        /// A frame without a cursor, written as is.
        case frame(type: String, json: String)
    }

    enum Next: Sendable {
        case items([Item])
        /// Events were dropped: read the log from the last written cursor.
        case overflowed
        /// Nothing arrived within the timeout.
        case idle
        case closed
    }

    private struct State: Sendable {
        var items: [Item] = []
        var bufferedEvents = 0
        var overflowed = false
        var closed = false
    }

    let device: DeviceIdentity
    let id: UInt64
    let transport: String
    private let maxBufferedEvents: Int
    private let state = NIOLockedValueBox(State())
    private let wakeup = AsyncSignal()

    init(device: DeviceIdentity, id: UInt64, transport: String, maxBufferedEvents: Int = 10_000) {
        self.device = device
        self.id = id
        self.transport = transport
        self.maxBufferedEvents = maxBufferedEvents
    }

    /// Queues a stored event (from the hub).
    func deliver(_ event: StoredEvent) {
        let wake = state.withLockedValue { state -> Bool in
            if state.closed || state.overflowed { return false }
            if state.bufferedEvents >= maxBufferedEvents {
                state.overflowed = true
                state.items.removeAll { if case .event = $0 { true } else { false } }
                state.bufferedEvents = 0
                return true
            }
            state.items.append(.event(event))
            state.bufferedEvents += 1
            return true
        }
        if wake { wakeup.notify() }
    }

    /// Queues a control frame.
    func send(type: String, json: String) {
        let wake = state.withLockedValue { state -> Bool in
            if state.closed { return false }
            state.items.append(.frame(type: type, json: json))
            return true
        }
        if wake { wakeup.notify() }
    }

    /// Ends the stream: the writer sees `.closed` after what is queued.
    func close() {
        state.withLockedValue { $0.closed = true }
        wakeup.notify()
    }

    var isClosed: Bool { state.withLockedValue { $0.closed } }

    /// Control frames queued and not yet taken by the writer.
    var queuedCount: Int { state.withLockedValue { $0.items.count } }

    /// Everything queued, or waits up to `timeout` (forever if `nil`) for something.
    func next(timeout: Duration?) async -> Next {
        while true {
            let next = state.withLockedValue { state -> Next? in
                if state.overflowed {
                    state.overflowed = false
                    return .overflowed
                }
                if !state.items.isEmpty {
                    let items = state.items
                    state.items = []
                    state.bufferedEvents = 0
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
            if ContinuousClock.now - before >= timeout, state.withLockedValue({ $0.items.isEmpty && !$0.overflowed && !$0.closed }) {
                return .idle
            }
        }
    }
}
