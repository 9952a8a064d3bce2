import PigeonDomain

/// One device's stream as a sequence of frames: the events after its start from the log, then the live ones
/// from its session, each exactly once and in order (live events already read from the log are skipped by their partition's offset).
struct EventStreamer: Sendable {
    /// A frame to write: its JSON, its type, for stored events its cursor, and what it counts against the
    /// session's outbound budget (0 when read from the log), to give back with ``StreamSession/write(cost:_:)``.
    struct Frame: Sendable {
        var type: String
        var json: String
        var cursor: String?
        var cost = 0
    }

    enum Output: Sendable {
        case frame(Frame)
        /// Nothing to send for `idleInterval` (SSE writes a keep-alive comment).
        case idle
    }

    private let store: any EventLog
    private let session: StreamSession
    private let idleInterval: Duration?
    private let pageSize = 500
    private var last: EventPosition
    private var needsCatchUp = true
    private var queued: [Frame] = []
    private var position = 0

    /// `idleInterval`: how long the stream may be silent before ``next()`` answers `.idle` (`nil`: never).
    init(store: any EventLog, session: StreamSession, start: StreamStart, idleInterval: Duration?) {
        self.store = store
        self.session = session
        self.idleInterval = idleInterval
        self.last = start.after
        if start.reset {
            let cursor = store.cursor(start.after)
            queued.append(Frame(type: "reset", json: "{\"type\":\"reset\",\"cursor\":\"\(cursor)\"}", cursor: cursor))
        }
    }

    /// The next frame, `.idle` after a quiet `idleInterval`, or `nil` once the session is closed.
    mutating func next() async throws -> Output? {
        while true {
            if let frame = nextQueued() { return .frame(frame) }
            if needsCatchUp {
                let events = try await store.events(for: session.device, after: last, limit: pageSize)
                for event in events { enqueue(event) }
                needsCatchUp = events.count == pageSize
                continue
            }
            switch await session.next(timeout: idleInterval) {
            case .closed:
                return nil
            case .idle:
                return .idle
            case .items(let items):
                for item in items {
                    switch item {
                    case .event(let event, let cost):
                        if !enqueue(event, cost: cost) { session.release(cost: cost) }
                    case .frame(let type, let json, let cost):
                        queued.append(Frame(type: type, json: json, cursor: nil, cost: cost))
                    }
                }
            }
        }
    }

    /// The next frame of the backlog (the log after the stream's start, read page by page until a short page), or
    /// `nil` once it is all handed out: a WebSocket's live frames are then written by its connection, from
    /// ``handedOut`` on.
    mutating func nextFromLog() async throws -> Frame? {
        while true {
            if let frame = nextQueued() { return frame }
            guard needsCatchUp else { return nil }
            let events = try await store.events(for: session.device, after: last, limit: pageSize)
            for event in events { enqueue(event) }
            needsCatchUp = events.count == pageSize
        }
    }

    /// Where the frames handed out so far end.
    var handedOut: EventPosition { last }

    private mutating func nextQueued() -> Frame? {
        guard position < queued.count else { return nil }
        let frame = queued[position]
        position += 1
        if position == queued.count {
            queued.removeAll(keepingCapacity: true)
            position = 0
        }
        return frame
    }

    /// Queues `event` unless it was written already; whether it was queued.
    @discardableResult
    private mutating func enqueue(_ event: StoredEvent, cost: Int = 0) -> Bool {
        guard last.precedes(event) else { return false }
        last.advance(past: event)
        let cursor = store.cursor(last)
        queued.append(Frame(type: event.type, json: event.frame(cursor: cursor), cursor: cursor, cost: cost))
        return true
    }
}
