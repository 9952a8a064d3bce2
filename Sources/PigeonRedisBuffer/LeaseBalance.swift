/// The Redis buffer's lease decisions at each heartbeat, without I/O: how many partitions are this node's share,
/// which owned ones to give up or how many free ones to take to reach it, and in which order to try free ones.
///
/// - Every live node's share is the partition count divided by the live nodes, rounded up: together the nodes can
///   always cover every partition, and no node holds more than one more than another.
/// - A node over its share gives up the excess, idle partitions first (nothing handed out or being read there, so
///   the next owner starts at once), then the highest-numbered, so the choice is the same at every heartbeat.
/// - A node under its share tries the free partitions starting at an offset of its own (a hash of its id), so nodes
///   starting together rarely compete for the same partitions.
package enum LeaseBalance {
    /// What to do with the leases this heartbeat.
    package enum Action: Equatable, Sendable {
        /// The node holds its share.
        case keep
        /// Release these owned partitions (once each has drained).
        case giveUp([Int])
        /// Take up to this many free partitions.
        case acquire(Int)
    }

    /// One node's share of `partitions` among `liveNodes` (at least one: this node).
    package static func share(partitions: Int, liveNodes: Int) -> Int {
        let nodes = max(1, liveNodes)
        return (partitions + nodes - 1) / nodes
    }

    /// What the node holding `owned` (each with whether it is idle) does to reach `share`.
    package static func action(owned: [(partition: Int, isIdle: Bool)], share: Int) -> Action {
        if owned.count > share {
            let chosen = owned.sorted { left, right in
                left.isIdle != right.isIdle ? left.isIdle : left.partition > right.partition
            }.prefix(owned.count - share)
            return .giveUp(chosen.map(\.partition))
        }
        return owned.count < share ? .acquire(share - owned.count) : .keep
    }

    /// The free partitions `candidates` in the order node `nodeId` tries them.
    package static func acquisitionOrder(_ candidates: [Int], nodeId: String) -> [Int] {
        guard !candidates.isEmpty else { return [] }
        let offset = RedisStreamsBuffer.partition(ofConversation: nodeId, partitions: candidates.count)
        return candidates.indices.map { candidates[($0 + offset) % candidates.count] }
    }
}
