import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Receipts of one WebSocket waiting to be written, coalesced: per conversation and kind only the highest
/// watermark matters, so a burst of receipts becomes one write each.
///
/// Driven by the writes' completions, with no task of its own: the first receipt starts a write at once; receipts
/// that arrive while writes are in flight wait, coalesced, and are written together when the last of those completes.
final class ReceiptQueue: Sendable {
    struct Key: Hashable, Sendable {
        var conversationId: String
        var kind: ReceiptKind
    }

    /// Writes one receipt and calls its argument once it is written (or failed: the writer answers the failure).
    typealias Write = @Sendable (Key, Int64, @escaping @Sendable () -> Void) -> Void

    private struct State: Sendable {
        var pending: [Key: Int64] = [:]
        var order: [Key] = []
        /// Writes started and not completed.
        var inFlight = 0
        var finished = false
    }

    private let state = NIOLockedValueBox(State())
    private let write: Write

    init(write: @escaping Write) {
        self.write = write
    }

    func add(conversationId: String, kind: ReceiptKind, upToSeq: Int64) {
        let key = Key(conversationId: conversationId, kind: kind)
        let start = state.withLockedValue { state -> Bool in
            if state.finished { return false }
            if let current = state.pending[key] {
                state.pending[key] = max(current, upToSeq)
            } else {
                state.pending[key] = upToSeq
                state.order.append(key)
            }
            return state.inFlight == 0
        }
        if start { writePending() }
    }

    /// No receipt is written after this (the stream ended).
    func finish() {
        state.withLockedValue { state in
            state.finished = true
            state.pending = [:]
            state.order = []
        }
    }

    /// Starts a write for each receipt waiting, in first-arrival order, unless writes are in flight or none waits.
    private func writePending() {
        let batch = state.withLockedValue { state -> [(Key, Int64)] in
            guard state.inFlight == 0, !state.finished, !state.order.isEmpty else { return [] }
            let batch = state.order.map { ($0, state.pending[$0]!) }
            state.order = []
            state.pending = [:]
            state.inFlight = batch.count
            return batch
        }
        for (key, upToSeq) in batch {
            write(key, upToSeq) { [self] in
                let last = state.withLockedValue { state -> Bool in
                    state.inFlight -= 1
                    return state.inFlight == 0
                }
                if last { writePending() }
            }
        }
    }
}
