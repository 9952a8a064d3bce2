/// The opaque cursor of API.md: `<store epoch>-<event id>`.
///
/// The epoch ties a cursor to one event log, so a cursor from a wiped or different server is unknown (reset)
/// rather than silently pointing at other events.
struct EventCursor: Equatable, Sendable {
    var epoch: String
    var eventId: Int64

    var string: String { "\(epoch)-\(eventId)" }

    /// Parses a cursor; `nil` for anything that is not one of ours (an unknown cursor, answered with reset).
    init?(_ string: String) {
        guard let dash = string.lastIndex(of: "-"), let id = Int64(string[string.index(after: dash)...]), id >= 0 else { return nil }
        let epoch = String(string[..<dash])
        guard !epoch.isEmpty else { return nil }
        self.epoch = epoch
        self.eventId = id
    }

    init(epoch: String, eventId: Int64) {
        self.epoch = epoch
        self.eventId = eventId
    }

    /// A cursor parameter the server refuses with 400 instead of answering reset: empty, too long or not printable ASCII.
    static func isMalformed(_ string: String) -> Bool {
        string.isEmpty || string.utf8.count > 128 || !string.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}

/// Where a stream or a sync starts.
struct StreamStart: Sendable {
    /// Deliver events with id greater than this.
    var after: Int64
    /// The client's cursor was unknown or expired: send `reset` first.
    var reset: Bool
}

extension MessageStore {
    /// Resolves a client's cursor: no cursor → now; ours and retained → after it; anything else → reset to now.
    func resolveStart(_ cursor: String?) async throws -> StreamStart {
        let head = try await headEventId()
        guard let cursor else { return StreamStart(after: head, reset: false) }
        guard let parsed = EventCursor(cursor), parsed.epoch == epoch, parsed.eventId <= head,
            parsed.eventId >= (try await prunedThrough())
        else { return StreamStart(after: head, reset: true) }
        return StreamStart(after: parsed.eventId, reset: false)
    }
}
