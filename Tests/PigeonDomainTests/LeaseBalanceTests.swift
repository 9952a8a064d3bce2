import PigeonRedisBuffer
import Testing

@testable import PigeonServer

/// ``LeaseBalance``: the Redis buffer's lease decisions, as a table, without Redis.
@Suite struct LeaseBalanceTests {
    @Test func theSharesCoverEveryPartitionAndDifferByAtMostOne() {
        #expect(LeaseBalance.share(partitions: 16, liveNodes: 1) == 16)
        #expect(LeaseBalance.share(partitions: 16, liveNodes: 0) == 16, "this node is alive even if it was not counted")
        #expect(LeaseBalance.share(partitions: 16, liveNodes: 2) == 8)
        #expect(LeaseBalance.share(partitions: 16, liveNodes: 3) == 6)
        #expect(LeaseBalance.share(partitions: 4, liveNodes: 8) == 1)
        for partitions in 1...64 {
            for nodes in 1...10 {
                #expect(LeaseBalance.share(partitions: partitions, liveNodes: nodes) * nodes >= partitions)
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var owned: [(Int, Bool)]
        var share: Int
        var action: LeaseBalance.Action
        var testDescription: String { "\(owned.map { "\($0.0)\($0.1 ? "(idle)" : "")" }) share \(share) → \(action)" }
    }

    static let cases: [Case] = [
        Case(owned: [(0, false), (1, false)], share: 2, action: .keep),
        Case(owned: [], share: 3, action: .acquire(3)),
        Case(owned: [(5, true)], share: 3, action: .acquire(2)),
        // Idle ones go first, then the highest-numbered.
        Case(owned: [(0, false), (1, true), (2, false), (3, true)], share: 2, action: .giveUp([3, 1])),
        Case(owned: [(0, false), (1, true), (2, false), (3, false)], share: 2, action: .giveUp([1, 3])),
        Case(owned: [(0, false), (1, false), (2, false)], share: 1, action: .giveUp([2, 1])),
        Case(owned: [(7, true)], share: 0, action: .giveUp([7])),
    ]

    @Test(arguments: cases)
    func aNodeReachesItsShare(_ test: Case) {
        #expect(LeaseBalance.action(owned: test.owned.map { (partition: $0.0, isIdle: $0.1) }, share: test.share) == test.action)
    }

    @Test func nodesTryTheFreePartitionsFromOffsetsOfTheirOwn() {
        let candidates = Array(0..<16)
        let orders = (0..<8).map { LeaseBalance.acquisitionOrder(candidates, nodeId: "node-\($0)") }
        for order in orders { #expect(order.sorted() == candidates, "every free partition is tried once") }
        #expect(Set(orders.map(\.first)).count > 1, "nodes do not all start at the same partition")
        #expect(LeaseBalance.acquisitionOrder(candidates, nodeId: "node-1") == orders[1], "the same order at every heartbeat")
        #expect(LeaseBalance.acquisitionOrder([], nodeId: "node-1").isEmpty)
        #expect(LeaseBalance.acquisitionOrder([9], nodeId: "node-1") == [9])
    }
}
