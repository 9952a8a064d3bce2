import PigeonProtocol

/// A member's watermarks in a conversation and the one rule that moves them, the same for every store: a receipt's
/// seq is clamped to the conversation's last seq (when the store knows it), a watermark only moves up, and read
/// implies delivered.
package struct Watermarks: Sendable, Equatable {
    package var delivered: Int64
    package var read: Int64

    package init(delivered: Int64, read: Int64) {
        self.delivered = delivered
        self.read = read
    }

    /// The watermarks after a receipt of `kind` up to `upToSeq`; `lastSeq` nil leaves the seq unclamped (a store
    /// that checks the seqs inside its write instead).
    package func applying(_ kind: ReceiptKind, upTo upToSeq: Int64, lastSeq: Int64?) -> Watermarks {
        let target = lastSeq.map { min(upToSeq, $0) } ?? upToSeq
        return Watermarks(delivered: max(delivered, target), read: kind == .read ? max(read, target) : read)
    }

    /// What moved from `old` to these watermarks, delivered first: one `receipt` event each.
    package func moves(from old: Watermarks) -> [(kind: ReceiptKind, upToSeq: Int64)] {
        var moves: [(kind: ReceiptKind, upToSeq: Int64)] = []
        if delivered != old.delivered { moves.append((.delivered, delivered)) }
        if read != old.read { moves.append((.read, read)) }
        return moves
    }

    package var response: ReceiptResponse { ReceiptResponse(deliveredSeq: delivered, readSeq: read) }
}
