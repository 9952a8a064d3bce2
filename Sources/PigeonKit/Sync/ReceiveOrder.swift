/// Keeps the announcement of received messages in seq order per conversation (the gap case: a
/// client that drops what arrives beyond a gap loses it for good): a message beyond a gap is persisted at once, but announced only when every seq before it is on the
/// device. Nothing is ever dropped, however long the gap takes to fill: only `release` empties the queue. Pure.
package struct ReceiveOrder<Item: Sendable>: Sendable {
    private var held: [String: [(seq: Int64, item: Item)]] = [:]

    package init() {}

    /// Held messages in every conversation.
    package var heldCount: Int { held.values.reduce(0) { $0 + $1.count } }

    /// Takes a batch of one conversation's items (each stored with its seq) and returns what may be announced now
    /// that the conversation's contiguous seq is `contiguous` (its value after the whole batch was stored): every
    /// item at or below it, the batch's and those held from before, in seq order.
    package mutating func receive(_ batch: [(item: Item, seq: Int64)], conversationId: String, contiguous: Int64) -> [Item] {
        var line = held[conversationId, default: []]
        for (item, seq) in batch {
            // Usually in order: append, and search for the place only when it is not.
            if let last = line.last, last.seq > seq {
                let index = line.firstIndex { $0.seq > seq } ?? line.endIndex
                line.insert((seq, item), at: index)
            } else {
                line.append((seq, item))
            }
        }
        held[conversationId] = line
        return release(conversationId: conversationId, contiguous: contiguous)
    }

    /// Everything held in the conversation at or below `contiguous`, in seq order.
    package mutating func release(conversationId: String, contiguous: Int64) -> [Item] {
        guard let line = held[conversationId] else { return [] }
        let split = line.firstIndex { $0.seq > contiguous } ?? line.endIndex
        guard split > 0 else { return [] }
        let out = line[..<split].map(\.item)
        held[conversationId] = split == line.endIndex ? nil : Array(line[split...])
        return out
    }
}
