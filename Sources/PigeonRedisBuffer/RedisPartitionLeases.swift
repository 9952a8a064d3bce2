import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonRedis

/// The node's partition leases in Redis. At every heartbeat: announce the node (its score in the nodes set), renew
/// the leases it holds, give up or take partitions to reach its share (``LeaseBalance``), release the given-up ones
/// once drained, take over a new partition's pending entries before anything newer (through the ``RedisStreamReader``),
/// refresh the depth and sweep the pending lists. Before the first heartbeat it prepares Redis (``RedisBufferSetup``).
final class RedisPartitionLeases: Sendable {
    private let context: RedisBufferContext
    private let reader: RedisStreamReader

    init(context: RedisBufferContext, reader: RedisStreamReader) {
        self.context = context
        self.reader = reader
    }

    private var book: PartitionBook { context.book }
    private var ttlMilliseconds: Int64 { Int64(context.configuration.leaseTTL / .milliseconds(1)) }

    /// One heartbeat: announce the node, renew the leases, give up or take partitions to reach this node's share,
    /// refresh the depth and look for entries stuck in pending lists.
    func heartbeat() async throws {
        guard !book.isStopped else { return }
        if !book.isPrepared {
            try await RedisBufferSetup.prepare(context)
            book.markPrepared()
        }
        let sentAt = context.clock.now
        let liveNodes = try await context.client.evalScript(
            RedisStreamsBuffer.Scripts.heartbeat, keys: [context.keys.nodes], arguments: [context.nodeId, ttlMilliseconds]
        ).int ?? 1
        let share = LeaseBalance.share(partitions: context.configuration.partitions, liveNodes: Int(liveNodes))

        try await renewLeases(sentAt: sentAt)
        switch LeaseBalance.action(owned: book.owned, share: share) {
        case .keep: break
        case .giveUp(let partitions): giveUp(partitions)
        case .acquire(let count): try await acquire(count, sentAt: sentAt)
        }
        await releaseDrainedPartitions()
        try await RedisBufferSetup.refreshDepth(context)
        try await sweepPendingLists()
        book.heartbeatDone(at: context.clock.now)
    }

    private func renewLeases(sentAt: ElapsedClock.Instant) async throws {
        let held = book.held
        let renewals: [EventLoopFuture<RESPValue>] = held.map {
            context.client.evalScript(RedisStreamsBuffer.Scripts.renewLease, keys: [context.keys.lease($0)], arguments: [context.nodeId, ttlMilliseconds])
        }
        for (partition, renewal) in zip(held, renewals) {
            let renewed = try await renewal.get().int == 1
            if let dropped = book.renewal(of: partition, renewed: renewed, validUntil: sentAt + context.configuration.leaseTTL) {
                context.logger.warning(
                    "lost the lease of a partition (it expired); stopped reading it",
                    metadata: ["partition": "\(partition)", "droppedEntries": "\(dropped)"])
            }
        }
    }

    /// Marks owned partitions for release (``LeaseBalance`` chose them).
    private func giveUp(_ partitions: [Int]) {
        let released = book.release(partitions)
        context.logger.debug("giving up partitions beyond this node's share", metadata: ["partitions": "\(released)"])
    }

    /// Deletes the leases of releasing partitions once nothing of theirs is handed out or being read.
    func releaseDrainedPartitions() async {
        let drained = book.takeDrained()
        guard !drained.isEmpty else { return }
        await release(drained)
        context.logger.info("released partitions to other nodes", metadata: ["partitions": "\(drained)"])
    }

    /// Deletes these leases if they are still this node's. A release that fails leaves the lease to expire by itself
    /// (it is no longer renewed).
    private func release(_ partitions: [Int]) async {
        let releases: [EventLoopFuture<RESPValue>] = partitions.map {
            context.client.evalScript(RedisStreamsBuffer.Scripts.releaseLease, keys: [context.keys.lease($0)], arguments: [context.nodeId])
        }
        for release in releases { _ = try? await release.get() }
    }

    /// Takes up to `count` free partitions (and any whose lease is still this node's, from before a failure).
    private func acquire(_ count: Int, sentAt: ElapsedClock.Instant) async throws {
        let candidates = book.free
        guard !candidates.isEmpty else { return }
        let (client, keys) = (context.client, context.keys)
        let holders: [EventLoopFuture<RESPValue>] = candidates.map { client.send(RESPCommand("GET", keys.lease($0))) }
        var acquired = 0
        let holdersByPartition = Dictionary(uniqueKeysWithValues: zip(candidates, holders))
        for partition in LeaseBalance.acquisitionOrder(candidates, nodeId: context.nodeId) where acquired < count {
            let holder = try await holdersByPartition[partition]!.get()
            let taken: Bool
            if holder.isNull {
                let set = try await client.send(RESPCommand("SET", keys.lease(partition), context.nodeId, "NX", "PX", ttlMilliseconds))
                taken = set == .simpleString("OK")
            } else if holder.string == context.nodeId {
                let renewed = try await client.evalScript(
                    RedisStreamsBuffer.Scripts.renewLease, keys: [keys.lease(partition)], arguments: [context.nodeId, ttlMilliseconds])
                taken = renewed.int == 1
            } else {
                taken = false
            }
            guard taken else { continue }
            try await takeOver(partition, sentAt: sentAt)
            acquired += 1
        }
    }

    /// Makes a newly leased partition this node's: first everything pending in its group (handed out by a previous
    /// owner and not acknowledged), in stream order, before anything new.
    private func takeOver(_ partition: Int, sentAt: ElapsedClock.Instant) async throws {
        let pending = try await reader.claimPending(partition, minimumIdle: .zero, skipping: [])
        let leaseTTL = context.configuration.leaseTTL
        guard book.own(partition, validUntil: sentAt + leaseTTL, nextSweep: context.clock.now + leaseTTL, pending: pending) else {
            // Shut down meanwhile: give it back at once.
            await release([partition])
            return
        }
        context.logger.info("took over a partition", metadata: ["partition": "\(partition)", "pendingEntries": "\(pending.count)"])
    }

    /// Every lease TTL, per owned partition: entries pending for longer than a lease TTL that this node does not
    /// know of (delivered by a read whose answer was lost) are taken back and handed out.
    private func sweepPendingLists() async throws {
        let leaseTTL = context.configuration.leaseTTL
        for partition in book.sweepsDue(at: context.clock.now, interval: leaseTTL) {
            try await reader.takeBackPending(partition, minimumIdle: leaseTTL)
        }
    }

    /// Gives up every lease at once and leaves the nodes set (other nodes take the partitions over without waiting
    /// for the leases to expire).
    func releaseAll() async {
        let held = book.stop()
        await release(held)
        _ = try? await context.client.send(RESPCommand("ZREM", context.keys.nodes, context.nodeId))
        context.logger.info("ingest buffer released its partitions", metadata: ["partitions": "\(held)"])
    }
}
