import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Receipts of one WebSocket waiting to be written, coalesced: per conversation and kind only the highest
/// watermark matters, so a burst of receipts becomes one write each.
final class ReceiptQueue: Sendable {
    struct Key: Hashable, Sendable {
        var conversationId: String
        var kind: ReceiptKind
    }

    private struct State: Sendable {
        var pending: [Key: Int64] = [:]
        var order: [Key] = []
        var finished = false
    }

    private let state = NIOLockedValueBox(State())
    private let signal = AsyncSignal()

    func add(conversationId: String, kind: ReceiptKind, upToSeq: Int64) {
        let key = Key(conversationId: conversationId, kind: kind)
        state.withLockedValue { state in
            if let current = state.pending[key] {
                state.pending[key] = max(current, upToSeq)
            } else {
                state.pending[key] = upToSeq
                state.order.append(key)
            }
        }
        signal.notify()
    }

    func finish() {
        state.withLockedValue { $0.finished = true }
        signal.notify()
    }

    /// The receipts queued since the last call, in first-arrival order; `nil` once finished.
    func next() async -> [(Key, Int64)]? {
        while true {
            let batch = state.withLockedValue { state -> [(Key, Int64)]? in
                if !state.order.isEmpty {
                    let batch = state.order.map { ($0, state.pending[$0]!) }
                    state.order = []
                    state.pending = [:]
                    return batch
                }
                return state.finished ? nil : []
            }
            guard let batch else { return nil }
            if !batch.isEmpty { return batch }
            await signal.wait()
            if Task.isCancelled { return nil }
        }
    }
}
