import PigeonProtocol

/// Every unsent item, in sending order, and which may go next: per conversation, messages go out in the order
/// they were sent, one at a time (the next one waits for the previous one's accept answer, so a transient refusal
/// of one message can never let a later one overtake it). Failed items step out of the line. A message's
/// attachments are uploaded before it goes, one message's at a time per conversation in the same order, and may be
/// while the messages ahead of it are on the wire. Pure: no I/O, no clock.
package struct OutboxQueue: Sendable {
    package private(set) var items: [Int64: OutboxItem] = [:]
    /// Local ids per conversation, in sending order (local ids grow with each send).
    private var lines: [String: [Int64]] = [:]

    package init() {}

    package var count: Int { items.count }
    package var isEmpty: Bool { items.isEmpty }

    package mutating func add(_ item: OutboxItem) {
        guard items[item.localId] == nil else { return }
        items[item.localId] = item
        var line = lines[item.conversationId, default: []]
        let index = line.firstIndex { $0 > item.localId } ?? line.endIndex
        line.insert(item.localId, at: index)
        lines[item.conversationId] = line
    }

    package mutating func remove(_ localId: Int64) -> OutboxItem? {
        guard let item = items.removeValue(forKey: localId) else { return nil }
        lines[item.conversationId]?.removeAll { $0 == localId }
        if lines[item.conversationId]?.isEmpty == true { lines[item.conversationId] = nil }
        return item
    }

    package func item(clientMessageId: String) -> OutboxItem? {
        items.values.first { $0.clientMessageId == clientMessageId }
    }

    /// Applies `body` to an item and returns its action (`.none` when there is no such item).
    package mutating func update(_ localId: Int64, _ body: (inout OutboxItem) -> OutboxItem.Action) -> OutboxItem.Action {
        guard var item = items[localId] else { return .none }
        let action = body(&item)
        items[localId] = item
        return action
    }

    /// Dispatches, in each conversation, the first item of the line if it is due and nothing of that conversation
    /// is in flight; returns the items to write to the transport.
    package mutating func dispatchDue(now: ElapsedClock.Instant, policy: RetryPolicy) -> [OutboxItem] {
        var out: [OutboxItem] = []
        for (_, line) in lines {
            // One at a time: a retried item that re-entered the line ahead of one already on the wire waits for it.
            guard !line.contains(where: { items[$0]?.isInFlight == true }) else { continue }
            guard let head = line.first(where: { items[$0]?.isFailed == false }), var item = items[head] else { continue }
            if item.dispatch(now: now, policy: policy) == .send {
                items[head] = item
                out.append(item)
            }
        }
        return out.sorted { $0.localId < $1.localId }
    }

    /// Starts, in each conversation, the uploads of the first item of the line that has attachments to upload, when
    /// it is due and no upload of that conversation is running; returns the items whose uploads to run.
    package mutating func uploadsDue(now: ElapsedClock.Instant) -> [OutboxItem] {
        var out: [OutboxItem] = []
        for (_, line) in lines {
            let waiting = line.compactMap { items[$0] }.filter { !$0.isFailed && $0.uploads != .done }
            guard let first = waiting.first, !first.isUploading, var item = items[first.localId] else { continue }
            if item.startUpload(now: now) {
                items[item.localId] = item
                out.append(item)
            }
        }
        return out.sorted { $0.localId < $1.localId }
    }

    /// Items whose ACK deadline passed by `now`.
    package func timedOut(now: ElapsedClock.Instant) -> [Int64] {
        items.values.compactMap { item in
            if case .inFlight(_, let deadline) = item.state, deadline <= now { return item.localId }
            return nil
        }.sorted()
    }

    /// Every in-flight item goes back to the queue (the connection dropped).
    package mutating func connectionLost() {
        for id in items.keys { _ = update(id) { $0.connectionLost() } }
    }

    /// The earliest instant after `now` when something changes on its own: a backoff ends or an ACK deadline
    /// passes. Instants already past are left out: what they allow has happened or waits for another event (a
    /// connection, the previous message's answer), which wakes the dispatcher itself.
    package func nextWakeUp(after now: ElapsedClock.Instant) -> ElapsedClock.Instant? {
        var earliest: ElapsedClock.Instant?
        for item in items.values {
            let instant: ElapsedClock.Instant?
            switch (item.state, item.uploads) {
            case (.queued, .waiting(let notBefore)): instant = notBefore
            case (.queued, .running): instant = nil
            case (.queued(let notBefore), .done): instant = notBefore
            case (.inFlight(_, let deadline), _): instant = deadline
            case (.failed, _): instant = nil
            }
            if let instant, instant > now, earliest.map({ instant < $0 }) ?? true { earliest = instant }
        }
        return earliest
    }
}
