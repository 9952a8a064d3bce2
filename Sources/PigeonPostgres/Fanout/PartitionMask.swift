/// Which partitions of the event log a commit wrote to, or a tail is to read: a set of partition numbers below 64 (a bit
/// each), or all of them. A partition of 64 or more cannot be named, so naming one makes the mask ``all``.
package struct PartitionMask: Sendable, Hashable {
    /// The named partitions' bits; `nil`: every partition.
    package private(set) var bits: UInt64?

    package static let all = PartitionMask(bits: nil)
    package static let none = PartitionMask(bits: 0)

    package init(bits: UInt64?) {
        self.bits = bits
    }

    /// The partitions of `events` (none when empty).
    package init(partitionsOf partitions: some Sequence<Int>) {
        self = .none
        for partition in partitions { insert(partition) }
    }

    package var isEmpty: Bool { bits == 0 }

    package mutating func insert(_ partition: Int) {
        guard let current = bits else { return }
        bits = (0..<64).contains(partition) ? current | (1 << UInt64(partition)) : nil
    }

    package mutating func formUnion(_ other: PartitionMask) {
        guard let current = bits, let others = other.bits else { return bits = nil }
        bits = current | others
    }

    /// The named partitions below `count`, ascending (every one below `count` for ``all``).
    package func partitions(below count: Int) -> [Int] {
        guard let bits else { return Array(0..<count) }
        return (0..<min(count, 64)).filter { bits & (1 << UInt64($0)) != 0 }
    }
}
