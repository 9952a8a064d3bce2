import PigeonKit
import Testing

/// `ReceiveOrder`: messages are announced in seq order per conversation, a message beyond a gap waits (persisted)
/// until the gap is filled, and nothing held is ever dropped (a client that dropped them would lose them for good).
@Suite struct ReceiveOrderTests {
    /// A received message as the app would be told of it.
    struct Received: Sendable, Equatable, CustomStringConvertible {
        let conversationId: String
        let seq: Int64
        var description: String { "\(conversationId)#\(seq)" }
    }

    /// Receives `seq` in `conversationId`, with the conversation's contiguous seq after it was stored.
    static func receive(_ order: inout ReceiveOrder<Received>, _ seq: Int64, in conversationId: String = "c1", contiguous: Int64) -> [Int64] {
        order.receive([(Received(conversationId: conversationId, seq: seq), seq)], conversationId: conversationId, contiguous: contiguous).map(\.seq)
    }

    @Test func contiguousMessagesAreAnnouncedAtOnce() {
        var order = ReceiveOrder<Received>()
        #expect(Self.receive(&order, 1, contiguous: 1) == [1])
        #expect(Self.receive(&order, 2, contiguous: 2) == [2])
        #expect(Self.receive(&order, 3, contiguous: 3) == [3])
        #expect(order.heldCount == 0)
    }

    @Test func seed004GapCaseIsAnnouncedInOrderOnceTheGapIsFilled() {
        var order = ReceiveOrder<Received>()
        #expect(Self.receive(&order, 1, contiguous: 1) == [1])
        #expect(Self.receive(&order, 2, contiguous: 2) == [2])
        // 3 and 4 are missing: 5 and 6 are persisted but not announced.
        #expect(Self.receive(&order, 5, contiguous: 2) == [])
        #expect(Self.receive(&order, 6, contiguous: 2) == [])
        #expect(order.heldCount == 2)
        #expect(order.release(conversationId: "c1", contiguous: 2) == [], "a release without progress frees nothing")
        #expect(order.heldCount == 2)
        // The gap fetch brings 3 and 4; once they are stored the contiguous seq is 6.
        #expect(Self.receive(&order, 3, contiguous: 2) == [])
        #expect(Self.receive(&order, 4, contiguous: 2) == [])
        let released = order.release(conversationId: "c1", contiguous: 6)
        #expect(released.map(\.seq) == [3, 4, 5, 6])
        #expect(order.heldCount == 0)
        #expect(order.release(conversationId: "c1", contiguous: 6) == [], "each message is announced once")
    }

    @Test func aGapFilledOneByOneReleasesEverythingAfterIt() {
        var order = ReceiveOrder<Received>()
        #expect(Self.receive(&order, 1, contiguous: 1) == [1])
        #expect(Self.receive(&order, 4, contiguous: 1) == [])
        #expect(Self.receive(&order, 5, contiguous: 1) == [])
        #expect(Self.receive(&order, 2, contiguous: 2) == [2])
        #expect(Self.receive(&order, 3, contiguous: 5) == [3, 4, 5])
        #expect(order.heldCount == 0)
    }

    // Regression: Receiver used to hand a gap-filling batch over one message at a time, each with the contiguous
    // seq of the whole batch; receiving 3 with contiguous 6 released 5 and 6 before 4 had been handed over, and the
    // app was told 3, 5, 6, 4. The batch is now handed over whole.
    @Test func aGapFillingBatchIsAnnouncedInOrder() {
        var order = ReceiveOrder<Received>()
        _ = Self.receive(&order, 1, contiguous: 1)
        _ = Self.receive(&order, 2, contiguous: 2)
        _ = Self.receive(&order, 5, contiguous: 2)
        _ = Self.receive(&order, 6, contiguous: 2)
        // The history batch [3, 4] is stored; the conversation is now contiguous up to 6.
        let batch = [Int64(3), 4].map { (item: Received(conversationId: "c1", seq: $0), seq: $0) }
        let announced = order.receive(batch, conversationId: "c1", contiguous: 6).map(\.seq)
        #expect(announced == [3, 4, 5, 6])
        #expect(order.heldCount == 0)
    }

    @Test func heldMessagesArriveOutOfOrderAndLeaveInSeqOrder() {
        var order = ReceiveOrder<Received>()
        for seq: Int64 in [9, 4, 7, 5, 8, 6] {
            #expect(Self.receive(&order, seq, contiguous: 2) == [], "seq \(seq) is beyond the gap")
        }
        #expect(order.heldCount == 6)
        #expect(Self.receive(&order, 3, contiguous: 9) == [3, 4, 5, 6, 7, 8, 9])
        #expect(order.heldCount == 0)
    }

    @Test func outOfOrderArrivalWithinABatchIsAnnouncedInSeqOrder() {
        // A batch with 4, 6, 3, 5 arrives while 1 and 2 are on the device; each is stored before it is handed over.
        var order = ReceiveOrder<Received>()
        var announced: [Int64] = []
        announced += Self.receive(&order, 4, contiguous: 2)
        announced += Self.receive(&order, 6, contiguous: 2)
        announced += Self.receive(&order, 3, contiguous: 4)
        announced += Self.receive(&order, 5, contiguous: 6)
        #expect(announced == [3, 4, 5, 6])
        #expect(order.heldCount == 0)
    }

    @Test func aPartialFillReleasesOnlyUpToTheContiguousSeq() {
        var order = ReceiveOrder<Received>()
        for seq: Int64 in [3, 4, 6, 8] { _ = Self.receive(&order, seq, contiguous: 1) }
        #expect(order.release(conversationId: "c1", contiguous: 4).map(\.seq) == [3, 4])
        #expect(order.heldCount == 2)
        #expect(order.release(conversationId: "c1", contiguous: 5) == [])
        #expect(order.release(conversationId: "c1", contiguous: 7).map(\.seq) == [6])
        #expect(order.release(conversationId: "c1", contiguous: 8).map(\.seq) == [8])
        #expect(order.heldCount == 0)
    }

    @Test func heldMessagesAreNeverDroppedHoweverMuchOtherTrafficPasses() {
        var order = ReceiveOrder<Received>()
        #expect(Self.receive(&order, 5, in: "waiting", contiguous: 3) == [])
        #expect(Self.receive(&order, 7, in: "waiting", contiguous: 3) == [])
        for index in 0..<20_000 {
            let conversationId = "busy-\(index % 50)"
            let seq = Int64(index / 50 + 1)
            #expect(Self.receive(&order, seq, in: conversationId, contiguous: seq) == [seq])
        }
        #expect(order.heldCount == 2, "held messages stay however many others pass")
        #expect(order.release(conversationId: "waiting", contiguous: 7).map(\.seq) == [5, 7])
        #expect(order.heldCount == 0)
    }

    @Test func aGapInOneConversationDoesNotHoldAnother() {
        var order = ReceiveOrder<Received>()
        #expect(Self.receive(&order, 5, in: "a", contiguous: 2) == [])
        #expect(Self.receive(&order, 1, in: "b", contiguous: 1) == [1])
        #expect(Self.receive(&order, 3, in: "b", contiguous: 1) == [])
        #expect(order.heldCount == 2)
        #expect(order.release(conversationId: "b", contiguous: 3).map(\.seq) == [3])
        #expect(order.heldCount == 1, "releasing b leaves a's message held")
        #expect(order.release(conversationId: "c", contiguous: 100) == [], "an unknown conversation has nothing held")
        let released = order.release(conversationId: "a", contiguous: 5)
        #expect(released == [Received(conversationId: "a", seq: 5)])
    }

    @Test func theSameSeqInDifferentConversationsIsKeptApart() {
        var order = ReceiveOrder<Received>()
        _ = Self.receive(&order, 4, in: "a", contiguous: 1)
        _ = Self.receive(&order, 4, in: "b", contiguous: 1)
        let a = order.release(conversationId: "a", contiguous: 4)
        #expect(a == [Received(conversationId: "a", seq: 4)])
        let b = order.release(conversationId: "b", contiguous: 4)
        #expect(b == [Received(conversationId: "b", seq: 4)])
    }

    @Test func aLateMessageBelowTheContiguousSeqIsAnnouncedAtOnce() {
        // A message already counted in the contiguous seq (its conversation caught up through history) is not held.
        var order = ReceiveOrder<Received>()
        #expect(Self.receive(&order, 9, contiguous: 7) == [])
        #expect(Self.receive(&order, 2, contiguous: 7) == [2])
        #expect(order.heldCount == 1)
    }

    @Test func theAnnouncedItemsAreTheOnesReceived() {
        var order = ReceiveOrder<String>()
        #expect(order.receive([("hello", 2)], conversationId: "c1", contiguous: 1) == [])
        #expect(order.receive([("first", 1)], conversationId: "c1", contiguous: 2) == ["first", "hello"])
    }
}
