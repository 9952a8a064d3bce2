import PigeonDomain
import PigeonProtocol
import Testing

@testable import PigeonServer

/// ``Watermarks``: the receipt rule both stores apply (clamped to the last seq, only up, read implies delivered).
@Suite struct WatermarksTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var old: (delivered: Int64, read: Int64)
        var kind: ReceiptKind
        var upTo: Int64
        var lastSeq: Int64?
        var new: (delivered: Int64, read: Int64)
        var moves: [String]
        var testDescription: String { "\(old) + \(kind) \(upTo) (last \(lastSeq.map(String.init) ?? "?")) → \(new) \(moves)" }
    }

    static let cases: [Case] = [
        Case(old: (0, 0), kind: .delivered, upTo: 3, lastSeq: 5, new: (3, 0), moves: ["delivered 3"]),
        Case(old: (0, 0), kind: .read, upTo: 3, lastSeq: 5, new: (3, 3), moves: ["delivered 3", "read 3"]),
        Case(old: (4, 2), kind: .read, upTo: 3, lastSeq: 5, new: (4, 3), moves: ["read 3"]),
        Case(old: (4, 2), kind: .delivered, upTo: 3, lastSeq: 5, new: (4, 2), moves: []),
        Case(old: (4, 4), kind: .read, upTo: 2, lastSeq: 5, new: (4, 4), moves: []),
        Case(old: (1, 0), kind: .delivered, upTo: 99, lastSeq: 5, new: (5, 0), moves: ["delivered 5"]),
        Case(old: (1, 0), kind: .read, upTo: 99, lastSeq: 5, new: (5, 5), moves: ["delivered 5", "read 5"]),
        Case(old: (5, 5), kind: .read, upTo: 99, lastSeq: 5, new: (5, 5), moves: []),
        Case(old: (1, 0), kind: .delivered, upTo: 99, lastSeq: nil, new: (99, 0), moves: ["delivered 99"]),
        Case(old: (0, 0), kind: .delivered, upTo: 0, lastSeq: 0, new: (0, 0), moves: []),
    ]

    @Test(arguments: cases)
    func aReceiptMovesTheWatermarksByTheRule(_ test: Case) {
        let old = Watermarks(delivered: test.old.delivered, read: test.old.read)
        let new = old.applying(test.kind, upTo: test.upTo, lastSeq: test.lastSeq)
        #expect(new == Watermarks(delivered: test.new.delivered, read: test.new.read))
        #expect(new.moves(from: old).map { "\($0.kind.rawValue) \($0.upToSeq)" } == test.moves)
        #expect(new.read <= new.delivered || old.read > old.delivered, "read implies delivered")
        #expect(new.response == ReceiptResponse(deliveredSeq: new.delivered, readSeq: new.read))
    }
}
