import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PigeonRedis

/// What one node knows of the Redis buffer's partitions: which it leases and until when, what it read and has not
/// handed out yet, what it handed out and is not acknowledged. The lease keeper (``RedisPartitionLeases``) and the
/// stream reader (``RedisStreamReader``) share it; every change is one step under its lock, with no I/O.
final class PartitionBook: Sendable {
    enum Lease: Equatable {
        case none
        case owned
        /// Held until everything handed out is acknowledged, then given up (the node has more than its share).
        case releasing
    }

    struct Partition {
        var lease = Lease.none
        /// Until when the lease is certainly still this node's (renewal sent time + TTL).
        var validUntil = ElapsedClock.Instant(sinceStart: .zero)
        /// Read from Redis (or taken over), not handed out yet, in stream order.
        var ready: [BufferEntry] = []
        /// Stream ids handed out and not acknowledged.
        var outstanding: Set<String> = []
        /// Part of an XREADGROUP in flight.
        var isBeingRead = false
        /// A read of it failed mid-way: Redis may have delivered entries the node never saw.
        var needsRecovery = false
        /// When to look next for entries stuck in its pending list.
        var nextSweep = ElapsedClock.Instant(sinceStart: .zero)

        var isIdle: Bool { ready.isEmpty && outstanding.isEmpty && !isBeingRead }
    }

    private struct State {
        var partitions: [Partition]
        var isPrepared = false
        var isStopped = false
        var lastHeartbeat: ElapsedClock.Instant?
        var nextPartitionToServe = 0
        /// The total XLEN at the last heartbeat, and appends minus deletions since.
        var depthInRedis = 0
        var depthDelta = 0
    }

    private let state: NIOLockedValueBox<State>

    init(partitions: Int) {
        state = NIOLockedValueBox(State(partitions: Array(repeating: Partition(), count: partitions)))
    }

    // MARK: The node

    var isStopped: Bool { state.withLockedValue { $0.isStopped } }
    var isPrepared: Bool { state.withLockedValue { $0.isPrepared } }
    var lastHeartbeat: ElapsedClock.Instant? { state.withLockedValue { $0.lastHeartbeat } }

    func markPrepared() { state.withLockedValue { $0.isPrepared = true } }
    func heartbeatDone(at now: ElapsedClock.Instant) { state.withLockedValue { $0.lastHeartbeat = now } }

    /// Stops handing out and forgets every lease: the partitions that were held, for their leases to be released.
    func stop() -> [Int] {
        state.withLockedValue { state in
            state.isStopped = true
            let held = state.partitions.indices.filter { state.partitions[$0].lease != .none }
            for index in held { state.partitions[index] = Partition() }
            return held
        }
    }

    // MARK: Depth

    var depth: Int { state.withLockedValue { max(0, $0.depthInRedis + $0.depthDelta) } }
    func appended(_ count: Int) { state.withLockedValue { $0.depthDelta += count } }
    var depthDelta: Int { state.withLockedValue { $0.depthDelta } }

    /// The streams' total length as Redis counted it, and the delta seen when the count started (already in it).
    func counted(_ total: Int, deltaAtStart: Int) {
        state.withLockedValue { state in
            state.depthInRedis = total
            state.depthDelta -= deltaAtStart
        }
    }

    // MARK: Leases

    /// The partitions whose lease the node holds (owned or releasing).
    var held: [Int] { state.withLockedValue { state in state.partitions.indices.filter { state.partitions[$0].lease != .none } } }
    /// The partitions with no lease here.
    var free: [Int] { state.withLockedValue { state in state.partitions.indices.filter { state.partitions[$0].lease == .none } } }
    /// The owned partitions with whether each is idle (``LeaseBalance/action(owned:share:)``'s input).
    var owned: [(partition: Int, isIdle: Bool)] {
        state.withLockedValue { state in
            state.partitions.indices.filter { state.partitions[$0].lease == .owned }.map { ($0, state.partitions[$0].isIdle) }
        }
    }

    /// The lease of `partition` was renewed (sent at `sentAt`): valid until `validUntil`. `nil`; or, when it was not
    /// renewed (it expired), the partition is dropped and the count of entries read or handed out that went with it.
    func renewal(of partition: Int, renewed: Bool, validUntil: ElapsedClock.Instant) -> Int? {
        state.withLockedValue { state in
            guard state.partitions[partition].lease != .none else { return nil }
            if renewed {
                state.partitions[partition].validUntil = validUntil
                return nil
            }
            let dropped = state.partitions[partition].ready.count + state.partitions[partition].outstanding.count
            state.partitions[partition] = Partition()
            return dropped
        }
    }

    /// Marks those of `partitions` that are owned for release; the ones marked.
    func release(_ partitions: [Int]) -> [Int] {
        state.withLockedValue { state in
            let chosen = partitions.filter { state.partitions[$0].lease == .owned }
            for index in chosen { state.partitions[index].lease = .releasing }
            return chosen
        }
    }

    /// Forgets the releasing partitions nothing of which is handed out or being read: the ones whose lease can go.
    func takeDrained() -> [Int] {
        state.withLockedValue { state in
            let drained = state.partitions.indices.filter { state.partitions[$0].lease == .releasing && state.partitions[$0].isIdle }
            for index in drained { state.partitions[index] = Partition() }
            return drained
        }
    }

    /// Makes a newly leased partition the node's, with what its previous owner left pending ready first; `false` when
    /// the node stopped meanwhile (the lease is to be given back).
    func own(_ partition: Int, validUntil: ElapsedClock.Instant, nextSweep: ElapsedClock.Instant, pending: [BufferEntry]) -> Bool {
        state.withLockedValue { state in
            guard !state.isStopped else { return false }
            var taken = Partition()
            taken.lease = .owned
            taken.validUntil = validUntil
            taken.ready = pending
            taken.nextSweep = nextSweep
            state.partitions[partition] = taken
            return true
        }
    }

    /// The owned partitions whose pending list is due a sweep at `now`; the next is due `interval` later.
    func sweepsDue(at now: ElapsedClock.Instant, interval: Duration) -> [Int] {
        state.withLockedValue { state in
            let due = state.partitions.indices.filter { state.partitions[$0].lease == .owned && state.partitions[$0].nextSweep <= now }
            for index in due { state.partitions[index].nextSweep = now + interval }
            return due
        }
    }

    // MARK: Reading and handing out

    /// The owned partitions with a valid lease and nothing to recover, marked as being read.
    func beginRead(at now: ElapsedClock.Instant) -> [Int] {
        state.withLockedValue { state in
            let readable = state.partitions.indices.filter {
                state.partitions[$0].lease == .owned && state.partitions[$0].validUntil > now && !state.partitions[$0].needsRecovery
            }
            for index in readable { state.partitions[index].isBeingRead = true }
            return readable
        }
    }

    /// A read of `partitions` ended with `read` (what it brought, per partition), or failed (`needsRecovery`: Redis
    /// may have delivered entries the node never saw).
    func endRead(_ partitions: [Int], read: [Int: [BufferEntry]], needsRecovery: Bool = false) {
        state.withLockedValue { state in
            for index in partitions {
                state.partitions[index].isBeingRead = false
                if needsRecovery { state.partitions[index].needsRecovery = true }
            }
            for (partition, entries) in read {
                // A partition lost meanwhile: its new owner takes these over from this node's pending list.
                guard state.partitions[partition].lease != .none else { continue }
                state.partitions[partition].ready.append(contentsOf: entries)
            }
        }
    }

    /// The held partitions whose read was interrupted.
    var needingRecovery: [Int] {
        state.withLockedValue { state in
            state.partitions.indices.filter { state.partitions[$0].needsRecovery && state.partitions[$0].lease != .none }
        }
    }

    func recovered(_ partition: Int) { state.withLockedValue { $0.partitions[partition].needsRecovery = false } }

    /// The stream ids of `partition` the node knows of: handed out, or read and waiting.
    func known(in partition: Int) -> Set<String> {
        state.withLockedValue { state in
            state.partitions[partition].outstanding.union(state.partitions[partition].ready.map { RedisEntryId.streamId(ofEntry: $0.id) })
        }
    }

    /// Queues `entries` taken back from the partition's pending list, keeping the ready queue in stream order.
    func takenBack(_ entries: [BufferEntry], in partition: Int) {
        state.withLockedValue { state in
            guard state.partitions[partition].lease != .none else { return }
            state.partitions[partition].ready.append(contentsOf: entries)
            state.partitions[partition].ready.sort {
                RedisEntryId.precedes(RedisEntryId.streamId(ofEntry: $0.id), RedisEntryId.streamId(ofEntry: $1.id))
            }
        }
    }

    /// Hands out what was read (or taken over) and not handed out yet, each partition in stream order. Partitions
    /// share `max` evenly (starting with a different one each time) before any gets more, so that the processor, which
    /// stores partitions concurrently, gets work for as many of them as there is.
    func takeReady(max: Int) -> [BufferEntry] {
        state.withLockedValue { state in
            let count = state.partitions.count
            let start = state.nextPartitionToServe
            state.nextPartitionToServe = (start + 1) % count
            let serving = (0..<count).map { (start + $0) % count }.filter {
                state.partitions[$0].lease != .none && !state.partitions[$0].ready.isEmpty
            }
            guard !serving.isEmpty else { return [] }
            var batch: [BufferEntry] = []
            let share = Swift.max(1, max / serving.count)
            // First an even share each, then what is left, in the same turn.
            for quota in [share, max] {
                for index in serving where batch.count < max {
                    let taken = min(quota, max - batch.count, state.partitions[index].ready.count)
                    guard taken > 0 else { continue }
                    for entry in state.partitions[index].ready.prefix(taken) {
                        state.partitions[index].outstanding.insert(RedisEntryId.streamId(ofEntry: entry.id))
                        batch.append(entry)
                    }
                    state.partitions[index].ready.removeFirst(taken)
                }
            }
            return batch
        }
    }

    /// Entries of `partition` were acknowledged (`deleted` of them were still in the stream).
    func acknowledged(_ streamIds: [String], in partition: Int, deleted: Int) {
        state.withLockedValue { state in
            state.depthDelta -= deleted
            state.partitions[partition].outstanding.subtract(streamIds)
        }
    }
}

/// A buffer entry's id, "partition-streamId", and stream ids ("milliseconds-sequence").
enum RedisEntryId {
    static func make(partition: Int, streamId: String) -> String { "\(partition)-\(streamId)" }

    /// "partition-streamId" → (partition, streamId), for a partition below `partitions`.
    static func parse(_ entryId: String, partitions: Int) -> (partition: Int, streamId: String)? {
        guard let dash = entryId.firstIndex(of: "-"), let partition = Int(entryId[..<dash]), (0..<partitions).contains(partition)
        else { return nil }
        return (partition, String(entryId[entryId.index(after: dash)...]))
    }

    static func streamId(ofEntry entryId: String) -> String {
        entryId.firstIndex(of: "-").map { String(entryId[entryId.index(after: $0)...]) } ?? entryId
    }

    /// Stream ids in numeric order.
    static func precedes(_ left: String, _ right: String) -> Bool {
        func parts(_ id: String) -> (UInt64, UInt64) {
            let split = id.split(separator: "-", maxSplits: 1)
            return (UInt64(split.first ?? "") ?? 0, split.count > 1 ? UInt64(split[1]) ?? 0 : 0)
        }
        return parts(left) < parts(right)
    }
}

/// What the buffer's parts share: the Redis client, the configuration and its keys, the node's clock and logger, the
/// partition book, and a log for Redis problems that come in streaks.
struct RedisBufferContext: Sendable {
    let client: RedisClient
    let configuration: RedisStreamsBuffer.Configuration
    let keys: RedisStreamsBuffer.Keys
    let logger: Logger
    /// The node's time for heartbeats, lease validity and sweeps (a test's manual clock, or the real one). A lease's
    /// authority is Redis's own expiry; this clock paces the renewals and tells when the node stops trusting its lease.
    let clock: ElapsedClock
    let book: PartitionBook
    private let lastProblemLog = NIOLockedValueBox<ElapsedClock.Instant?>(nil)

    init(client: RedisClient, configuration: RedisStreamsBuffer.Configuration, logger: Logger, clock: ElapsedClock) {
        self.client = client
        self.configuration = configuration
        self.keys = RedisStreamsBuffer.Keys(prefix: configuration.keyPrefix)
        var logger = logger
        logger[metadataKey: "node"] = "\(configuration.nodeId)"
        self.logger = logger
        self.clock = clock
        self.book = PartitionBook(partitions: configuration.partitions)
    }

    var nodeId: String { configuration.nodeId }

    /// Logs a Redis problem at most every ten seconds (they come in streaks while Redis is down).
    func logProblem(_ message: Logger.Message, _ error: any Error) {
        let now = clock.now
        let log = lastProblemLog.withLockedValue { last -> Bool in
            if let previous = last, now - previous < .seconds(10) { return false }
            last = now
            return true
        }
        if log { logger.warning(message, metadata: ["error": "\(error)"]) }
    }

    /// Sleeps `duration` (for a caller that must not spin), on the real clock: a wait for Redis, not a timed decision.
    func pause(_ duration: Duration) async {
        guard duration > .zero else { return }
        try? await Task.sleep(for: duration)
    }
}
