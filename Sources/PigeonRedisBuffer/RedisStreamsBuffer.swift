import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonRedis
import ServiceLifecycle

/// The production ingest buffer: Redis Streams with a consumer group, shared by every server node.
///
/// - Messages are partitioned by conversation (a stable hash) over `partitions` streams. An append is one Lua
///   script: the de-duplication record and the stream entry are written together, atomically, and the append
///   answers `.accepted` only once Redis did; with AOF and `appendfsync always` that survives a Redis crash (see
///   ``checkDurability(client:logger:)``). One device's appends go over one connection, so they keep their order.
/// - De-duplication records live for `dedupeTTL` (7 days by default).
/// - Each partition is processed by one node at a time, which holds its lease. Nodes announce themselves with a
///   heartbeat and share the partitions evenly; a node that stops heartbeating loses its leases after `leaseTTL`
///   and another node takes over everything it had handed out and not acknowledged (before anything newer of
///   those partitions). ``shutdown()`` releases the leases at once.
/// - Acknowledged entries are deleted from their stream, so the streams hold only what waits for processing.
/// - While Redis is unreachable appends fail with `overloaded` (503, Retry-After) and the buffer is not ready; it
///   recovers by itself when Redis is back.
///
/// ``run()`` keeps the heartbeat and the leases going; run it for as long as the buffer is used (it is a `Service`:
/// on graceful shutdown it releases the leases and returns).
public final class RedisStreamsBuffer: IngestBuffer, Service {
    /// How the buffer uses Redis.
    public struct Configuration: Sendable {
        /// The prefix of every key, so several deployments can share one Redis.
        public var keyPrefix: String
        /// How many partition streams; every node of a deployment must use the same number (checked at start).
        public var partitions: Int
        /// This node's name: its consumer name and lease value. Unique per running node (random by default).
        public var nodeId: String
        /// How long a partition lease lasts without renewal: how soon another node takes over a node that died.
        public var leaseTTL: Duration
        /// How often the node renews its leases and rebalances partitions; well below `leaseTTL`.
        public var heartbeatInterval: Duration
        /// How long a (sender, device, clientMessageId) is remembered for de-duplication.
        public var dedupeTTL: Duration
        /// Seals each entry's body before it reaches Redis (and its AOF or RDB files) and opens it as it is read back
        /// (``AtRestCipher``; off: bodies as they are).
        public var cipher = AtRestCipher.off

        public init(
            keyPrefix: String = "pigeon", partitions: Int = 16, nodeId: String? = nil,
            leaseTTL: Duration = .seconds(10), heartbeatInterval: Duration = .seconds(1), dedupeTTL: Duration = .seconds(7 * 24 * 3600)
        ) {
            self.keyPrefix = keyPrefix
            self.partitions = partitions
            self.nodeId = nodeId ?? "node-\(Identifiers.randomHex(bytes: 8))"
            self.leaseTTL = leaseTTL
            self.heartbeatInterval = heartbeatInterval
            self.dedupeTTL = dedupeTTL
        }
    }

    /// What Redis's persistence settings mean for acknowledged messages.
    public enum Durability: Sendable, Equatable {
        /// AOF with `appendfsync always`: every acknowledged append is on disk.
        case everyWrite
        /// AOF with `appendfsync everysec`: up to one second of acknowledged appends can be lost in a crash.
        case everySecond
        /// AOF with `appendfsync no`: the operating system decides when appends reach the disk.
        case operatingSystem
        /// No AOF: acknowledged appends can be lost when Redis crashes.
        case noAppendOnlyFile
        /// The settings could not be read (CONFIG is disabled or renamed), with the reason.
        case unknown(String)
    }

    /// A configuration that cannot work with what is in Redis.
    public struct SetupError: Error, CustomStringConvertible {
        public var description: String
    }

    private enum Lease {
        case none
        case owned
        /// Held until everything handed out is acknowledged, then given up (the node has more than its share).
        case releasing
    }

    private struct Partition {
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
        var lastProblemLog: ElapsedClock.Instant?
    }

    /// This node's name (see ``Configuration/nodeId``).
    public var nodeId: String { configuration.nodeId }

    private let client: RedisClient
    private let configuration: Configuration
    private let keys: Keys
    private let partitionOfStream: [String: Int]
    private let logger: Logger
    /// The node's time for heartbeats, lease validity and sweeps (a test's manual clock, or the real one). A lease's
    /// authority is Redis's own expiry; this clock paces the renewals and tells when the node stops trusting its lease.
    private let clock: ElapsedClock
    private let state: NIOLockedValueBox<State>
    /// The connection for blocking reads (they would hold up the client's shared connections).
    private let readConnection = NIOLockedValueBox<RedisConnection?>(nil)

    /// Sets the buffer up: checks durability, loads the scripts, checks the partition count, creates the consumer
    /// groups and takes this node's first leases.
    ///
    /// If Redis cannot be reached now, the buffer starts anyway (not ready, refusing appends with 503) and
    /// ``run()`` finishes the setup once Redis is back. Throws ``SetupError`` if Redis holds a buffer with
    /// another number of partitions under this prefix.
    ///
    /// `clock` paces the heartbeats and times the leases locally (`ContinuousClock` unless a test injects its own).
    public init(client: RedisClient, configuration: Configuration, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) async throws {
        self.clock = ElapsedClock(clock)
        precondition(configuration.partitions >= 1, "a Redis Streams buffer needs at least one partition")
        precondition(configuration.heartbeatInterval < configuration.leaseTTL, "the heartbeat must come more often than the lease TTL")
        self.client = client
        self.configuration = configuration
        self.keys = Keys(prefix: configuration.keyPrefix)
        self.partitionOfStream = Dictionary(uniqueKeysWithValues: (0..<configuration.partitions).map { (Keys(prefix: configuration.keyPrefix).stream($0), $0) })
        var logger = logger
        logger[metadataKey: "node"] = "\(configuration.nodeId)"
        self.logger = logger
        self.state = NIOLockedValueBox(State(partitions: Array(repeating: Partition(), count: configuration.partitions)))
        let connected = (try? await client.waitUntilConnected(timeout: .seconds(3))) != nil
        // Registered even while Redis is down: the client loads them on every connection it opens.
        try? await client.loadScripts(Scripts.all)
        do {
            guard connected else { throw RedisError.notConnected("not connected within 3 s") }
            try await heartbeat()
        } catch let error as SetupError {
            throw error
        } catch {
            logger.warning(
                "Redis is not reachable: the ingest buffer is not ready and refuses messages until it is", metadata: ["error": "\(error)"])
        }
    }

    /// The partition of a conversation: ``EventPartitioning`` (FNV-1a of its UTF-8 bytes, the same on every node and every run).
    public static func partition(ofConversation conversationId: String, partitions: Int) -> Int {
        EventPartitioning.partition(ofConversation: conversationId, partitions: partitions)
    }

    public var heldPartitionCount: Int? { ownedPartitions.count }

    /// The partitions this node holds the lease of now.
    public var ownedPartitions: [Int] {
        state.withLockedValue { state in state.partitions.indices.filter { state.partitions[$0].lease != .none } }
    }

    // MARK: Appending

    public func append(
        _ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void
    ) {
        let partition = Self.partition(ofConversation: message.conversationId, partitions: configuration.partitions)
        let dedupeKey = keys.dedupe(
            partition, senderId: message.senderId, deviceId: message.senderDeviceId, clientMessageId: message.clientMessageId)
        // One device's appends share a connection: they run in the order they were sent.
        let routingKey = message.senderDeviceId
        if let refusal {
            client.send(RESPCommand("GET", dedupeKey), routingKey: routingKey) { result in
                switch result {
                case .success(let reply):
                    if let duplicate = Self.duplicate(reply) {
                        completion(.success(duplicate))
                    } else {
                        completion(.failure(refusal))
                    }
                case .failure(let error):
                    completion(.failure(self.unavailable(error)))
                }
            }
            return
        }
        let arguments: [any RESPArgument] = [
            "\(message.serverId) \(message.acceptedAt)", Int64(configuration.dedupeTTL / .seconds(1)), encode(message),
        ]
        client.evalScript(Scripts.append, keys: [dedupeKey, keys.stream(partition)], arguments: arguments, routingKey: routingKey) {
            [state] result in
            switch result {
            case .success(let reply) where reply.isNull:
                state.withLockedValue { $0.depthDelta += 1 }
                completion(.success(.accepted))
            case .success(let reply):
                if let duplicate = Self.duplicate(reply) {
                    completion(.success(duplicate))
                } else {
                    self.logProblem("unexpected reply to the append script", RedisError.protocolError("\(reply)"))
                    completion(.failure(PigeonError.overloaded("the ingest buffer gave an unexpected answer; retry shortly")))
                }
            case .failure(let error):
                completion(.failure(self.unavailable(error)))
            }
        }
    }

    /// The original of a duplicate, from its de-duplication record ("serverId acceptedAt").
    private static func duplicate(_ reply: RESPValue) -> AppendOutcome? {
        guard let record = reply.string, let space = record.lastIndex(of: " "),
            let acceptedAt = Int64(record[record.index(after: space)...])
        else { return nil }
        return .duplicate(serverId: String(record[..<space]), acceptedAt: acceptedAt)
    }

    /// What a client sees when Redis failed an append: 503 `overloaded` with Retry-After, never a 500.
    private func unavailable(_ error: RedisError) -> PigeonError {
        switch error {
        case .notConnected, .connectionClosed, .timeout:
            return .overloaded("the ingest buffer (Redis) is unavailable; retry shortly")
        case .server, .protocolError, .invalidURL:
            logProblem("the ingest buffer's append failed", error)
            return .overloaded("the ingest buffer (Redis) failed to take the message; retry shortly")
        }
    }

    public func requeue(_ message: BufferedMessage) async throws {
        let partition = Self.partition(ofConversation: message.conversationId, partitions: configuration.partitions)
        _ = try await client.send(RESPCommand("XADD", keys.stream(partition), "*", "m", encode(message)))
        state.withLockedValue { $0.depthDelta += 1 }
    }

    public var depth: Int {
        state.withLockedValue { max(0, $0.depthInRedis + $0.depthDelta) }
    }

    public func isReady() async -> Bool {
        guard client.isConnected else { return false }
        let now = clock.now
        return state.withLockedValue { state in
            guard state.isPrepared, !state.isStopped, let last = state.lastHeartbeat else { return false }
            return now - last < configuration.heartbeatInterval * 3
        }
    }

    // MARK: Handing out

    public func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry] {
        guard max > 0, !state.withLockedValue({ $0.isStopped }) else {
            await pause(wait)
            return []
        }
        do {
            try await recoverInterruptedReads()
            let ready = takeReady(max: max)
            if !ready.isEmpty { return ready }
            return try await read(max: max, wait: wait)
        } catch let error as RedisError {
            // Redis trouble is not the processor's: it asks again, after a pause so that it does not spin.
            logProblem("reading the ingest buffer failed; retrying", error)
            if error.code == "NOGROUP" { try? await createGroups() }
            await pause(Swift.min(Swift.max(wait, .milliseconds(100)), .seconds(1)))
            return []
        }
    }

    /// Hands out what was read (or taken over) and not handed out yet, each partition in stream order. Partitions
    /// share `max` evenly (starting with a different one each time) before any gets more, so that the processor, which
    /// stores partitions concurrently, gets work for as many of them as there is.
    private func takeReady(max: Int) -> [BufferEntry] {
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
                        state.partitions[index].outstanding.insert(Self.streamId(ofEntry: entry.id))
                        batch.append(entry)
                    }
                    state.partitions[index].ready.removeFirst(taken)
                }
            }
            return batch
        }
    }

    /// One XREADGROUP over the partitions this node reads now, blocking up to `wait`.
    private func read(max: Int, wait: Duration) async throws -> [BufferEntry] {
        let now = clock.now
        let partitions = state.withLockedValue { state -> [Int] in
            let readable = state.partitions.indices.filter {
                state.partitions[$0].lease == .owned && state.partitions[$0].validUntil > now && !state.partitions[$0].needsRecovery
            }
            for index in readable { state.partitions[index].isBeingRead = true }
            return readable
        }
        guard !partitions.isEmpty else {
            await pause(wait)
            return []
        }
        // Not longer than a heartbeat, so that partitions gained or given up count soon.
        let block = min(wait, configuration.heartbeatInterval)
        var command = RESPCommand("XREADGROUP", "GROUP", Self.group, nodeId, "COUNT", max)
        let blockMilliseconds = Int64(block / .milliseconds(1))
        if blockMilliseconds > 0 {
            command.append("BLOCK")
            command.append(blockMilliseconds)
        }
        command.append("STREAMS")
        for partition in partitions { command.append(keys.stream(partition)) }
        for _ in partitions { command.append(">") }

        let read: [Int: [BufferEntry]]
        do {
            let connection = try await readingConnection()
            let reply: EventLoopFuture<RESPValue> = connection.send(command)
            // A read that outlives its BLOCK by far is stuck on a dead connection: closing it fails the read.
            let watchdog = connection.eventLoop.scheduleTask(in: .milliseconds(blockMilliseconds) + .seconds(10)) {
                connection.closeInBackground()
            }
            reply.whenComplete { _ in watchdog.cancel() }
            read = try parseStreams(try await reply.get())
        } catch {
            let isErrorReply = (error as? RedisError)?.code != nil
            state.withLockedValue { state in
                for index in partitions {
                    state.partitions[index].isBeingRead = false
                    // Not an error reply: Redis may have delivered entries that never arrived (or were not understood).
                    if !isErrorReply { state.partitions[index].needsRecovery = true }
                }
            }
            if !isErrorReply { closeReadingConnection() }
            await releaseDrainedPartitions()
            throw error
        }
        state.withLockedValue { state in
            for index in partitions { state.partitions[index].isBeingRead = false }
            for (partition, entries) in read {
                // A partition lost meanwhile: its new owner takes these over from this node's pending list.
                guard state.partitions[partition].lease != .none else { continue }
                state.partitions[partition].ready.append(contentsOf: entries)
            }
        }
        await releaseDrainedPartitions()
        return takeReady(max: max)
    }

    private func readingConnection() async throws -> RedisConnection {
        if let connection = readConnection.withLockedValue({ $0 }), connection.isConnected { return connection }
        let connection = try await client.dedicatedConnection()
        let previous = readConnection.withLockedValue { current in
            defer { current = connection }
            return current
        }
        previous?.closeInBackground()
        return connection
    }

    private func closeReadingConnection() {
        readConnection.withLockedValue { connection in
            defer { connection = nil }
            return connection
        }?.closeInBackground()
    }

    /// Takes back, for partitions whose read was interrupted, what Redis delivered and the node never saw.
    private func recoverInterruptedReads() async throws {
        let partitions = state.withLockedValue { state in
            state.partitions.indices.filter { state.partitions[$0].needsRecovery && state.partitions[$0].lease != .none }
        }
        for partition in partitions {
            try await takeBackPending(partition, minimumIdle: .zero)
            state.withLockedValue { $0.partitions[partition].needsRecovery = false }
        }
    }

    // MARK: Acknowledging

    /// One pipeline for all: a script per partition (its keys share a hash slot) and per 500 entries, sent together
    /// over one connection, so acknowledging batches of several partitions costs one round trip.
    public func acknowledge(entryIds: [String]) async throws {
        var byPartition: [Int: [String]] = [:]
        for entryId in entryIds {
            guard let (partition, streamId) = parse(entryId: entryId) else { continue }
            byPartition[partition, default: []].append(streamId)
        }
        var chunks: [(partition: Int, streamIds: [String])] = []
        for (partition, streamIds) in byPartition {
            // Chunks keep the script's argument list small.
            for start in stride(from: 0, to: streamIds.count, by: 500) {
                chunks.append((partition, Array(streamIds[start..<min(start + 500, streamIds.count)])))
            }
        }
        guard !chunks.isEmpty else { return }
        let replies = await client.evalScripts(
            chunks.map { RedisScript.Call(Scripts.acknowledge, keys: [keys.stream($0.partition), keys.attempts($0.partition)], arguments: $0.streamIds) })
        var failure: RedisError?
        for (chunk, reply) in zip(chunks, replies) {
            switch reply {
            case .success(let deleted):
                state.withLockedValue { state in
                    state.depthDelta -= Int(deleted.int ?? 0)
                    state.partitions[chunk.partition].outstanding.subtract(chunk.streamIds)
                }
            case .failure(let error):
                failure = error
            }
        }
        await releaseDrainedPartitions()
        // Acknowledging again is harmless: the caller retries the whole list.
        if let failure { throw failure }
    }

    public func recordFailedAttempt(entryId: String, attempts: Int) async throws {
        guard let (partition, streamId) = parse(entryId: entryId) else { return }
        _ = try await client.send(RESPCommand("HSET", keys.attempts(partition), streamId, attempts))
    }

    // MARK: Leases

    /// Heartbeats, renews and rebalances the leases until cancelled; on graceful shutdown it releases them
    /// (``shutdown()``) and returns. Throws ``SetupError`` if the partition count does not match Redis's.
    public func run() async throws {
        while !state.withLockedValue({ $0.isStopped }) {
            do {
                try await heartbeat()
            } catch let error as SetupError {
                throw error
            } catch {
                logProblem("the ingest buffer's heartbeat failed; retrying", error)
            }
            try? await cancelWhenGracefulShutdown { try await self.clock.sleep(for: self.configuration.heartbeatInterval) }
            if Task.isShuttingDownGracefully {
                await shutdown()
                return
            }
            if Task.isCancelled { return }
        }
    }

    /// Stops handing out entries and gives up every lease at once (other nodes take the partitions over without
    /// waiting for the leases to expire); entries handed out and not acknowledged go to the next owner. Appends and
    /// acknowledgements keep working. Does not shut the Redis client down.
    public func shutdown() async {
        let held = state.withLockedValue { state -> [Int] in
            state.isStopped = true
            let held = state.partitions.indices.filter { state.partitions[$0].lease != .none }
            for index in held { state.partitions[index] = Partition() }
            return held
        }
        let releases: [EventLoopFuture<RESPValue>] = held.map {
            client.evalScript(Scripts.releaseLease, keys: [keys.lease($0)], arguments: [nodeId])
        }
        for release in releases { _ = try? await release.get() }
        _ = try? await client.send(RESPCommand("ZREM", keys.nodes, nodeId))
        closeReadingConnection()
        logger.info("ingest buffer released its partitions", metadata: ["partitions": "\(held)"])
    }

    /// One heartbeat: announce the node, renew the leases, give up or take partitions to reach this node's share,
    /// refresh the depth and look for entries stuck in pending lists.
    private func heartbeat() async throws {
        let (isPrepared, isStopped) = state.withLockedValue { ($0.isPrepared, $0.isStopped) }
        guard !isStopped else { return }
        if !isPrepared { try await prepareRedis() }
        let sentAt = clock.now
        let ttlMilliseconds = Int64(configuration.leaseTTL / .milliseconds(1))
        let liveNodes = try await client.evalScript(Scripts.heartbeat, keys: [keys.nodes], arguments: [nodeId, ttlMilliseconds]).int ?? 1
        let share = LeaseBalance.share(partitions: configuration.partitions, liveNodes: Int(liveNodes))

        try await renewLeases(sentAt: sentAt)
        let owned = state.withLockedValue { state in
            state.partitions.indices.filter { state.partitions[$0].lease == .owned }.map { ($0, state.partitions[$0].isIdle) }
        }
        switch LeaseBalance.action(owned: owned, share: share) {
        case .keep: break
        case .giveUp(let partitions): giveUp(partitions)
        case .acquire(let count): try await acquire(count, sentAt: sentAt)
        }
        await releaseDrainedPartitions()
        try await refreshDepth()
        try await sweepPendingLists()
        state.withLockedValue { $0.lastHeartbeat = clock.now }
    }

    private func renewLeases(sentAt: ElapsedClock.Instant) async throws {
        let held = state.withLockedValue { state in state.partitions.indices.filter { state.partitions[$0].lease != .none } }
        let ttlMilliseconds = Int64(configuration.leaseTTL / .milliseconds(1))
        let renewals: [EventLoopFuture<RESPValue>] = held.map {
            client.evalScript(Scripts.renewLease, keys: [keys.lease($0)], arguments: [nodeId, ttlMilliseconds])
        }
        for (partition, renewal) in zip(held, renewals) {
            let renewed = try await renewal.get().int == 1
            let dropped = state.withLockedValue { state -> Int? in
                guard state.partitions[partition].lease != .none else { return nil }
                if renewed {
                    state.partitions[partition].validUntil = sentAt + configuration.leaseTTL
                    return nil
                }
                let dropped = state.partitions[partition].ready.count + state.partitions[partition].outstanding.count
                state.partitions[partition] = Partition()
                return dropped
            }
            if let dropped {
                logger.warning(
                    "lost the lease of a partition (it expired); stopped reading it",
                    metadata: ["partition": "\(partition)", "droppedEntries": "\(dropped)"])
            }
        }
    }

    /// Marks owned partitions for release (``LeaseBalance`` chose them).
    private func giveUp(_ partitions: [Int]) {
        let released = state.withLockedValue { state -> [Int] in
            let chosen = partitions.filter { state.partitions[$0].lease == .owned }
            for index in chosen { state.partitions[index].lease = .releasing }
            return chosen
        }
        logger.debug("giving up partitions beyond this node's share", metadata: ["partitions": "\(released)"])
    }

    /// Deletes the leases of releasing partitions once nothing of theirs is handed out or being read.
    private func releaseDrainedPartitions() async {
        let drained = state.withLockedValue { state -> [Int] in
            let drained = state.partitions.indices.filter { state.partitions[$0].lease == .releasing && state.partitions[$0].isIdle }
            for index in drained { state.partitions[index] = Partition() }
            return drained
        }
        guard !drained.isEmpty else { return }
        let releases: [EventLoopFuture<RESPValue>] = drained.map {
            client.evalScript(Scripts.releaseLease, keys: [keys.lease($0)], arguments: [nodeId])
        }
        // If a release fails, the lease expires by itself (it is no longer renewed).
        for release in releases { _ = try? await release.get() }
        logger.info("released partitions to other nodes", metadata: ["partitions": "\(drained)"])
    }

    /// Takes up to `count` free partitions (and any whose lease is still this node's, from before a failure).
    private func acquire(_ count: Int, sentAt: ElapsedClock.Instant) async throws {
        let candidates = state.withLockedValue { state in state.partitions.indices.filter { state.partitions[$0].lease == .none } }
        guard !candidates.isEmpty else { return }
        let holders: [EventLoopFuture<RESPValue>] = candidates.map { client.send(RESPCommand("GET", keys.lease($0))) }
        let ttlMilliseconds = Int64(configuration.leaseTTL / .milliseconds(1))
        var acquired = 0
        let holdersByPartition = Dictionary(uniqueKeysWithValues: zip(candidates, holders))
        for partition in LeaseBalance.acquisitionOrder(candidates, nodeId: nodeId) where acquired < count {
            let holder = try await holdersByPartition[partition]!.get()
            let taken: Bool
            if holder.isNull {
                let set = try await client.send(RESPCommand("SET", keys.lease(partition), nodeId, "NX", "PX", ttlMilliseconds))
                taken = set == .simpleString("OK")
            } else if holder.string == nodeId {
                let renewed = try await client.evalScript(Scripts.renewLease, keys: [keys.lease(partition)], arguments: [nodeId, ttlMilliseconds])
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
        let pending = try await claimPending(partition, minimumIdle: .zero, skipping: [])
        let isStopped = state.withLockedValue { state in
            guard !state.isStopped else { return true }
            var taken = Partition()
            taken.lease = .owned
            taken.validUntil = sentAt + configuration.leaseTTL
            taken.ready = pending
            taken.nextSweep = clock.now + configuration.leaseTTL
            state.partitions[partition] = taken
            return false
        }
        if isStopped {
            // Shut down meanwhile: give it back at once.
            _ = try? await client.evalScript(Scripts.releaseLease, keys: [keys.lease(partition)], arguments: [nodeId])
            return
        }
        logger.info("took over a partition", metadata: ["partition": "\(partition)", "pendingEntries": "\(pending.count)"])
    }

    /// Every lease TTL, per owned partition: entries pending for longer than a lease TTL that this node does not
    /// know of (delivered by a read whose answer was lost) are taken back and handed out.
    private func sweepPendingLists() async throws {
        let now = clock.now
        let due = state.withLockedValue { state -> [Int] in
            let due = state.partitions.indices.filter { state.partitions[$0].lease == .owned && state.partitions[$0].nextSweep <= now }
            for index in due { state.partitions[index].nextSweep = now + configuration.leaseTTL }
            return due
        }
        for partition in due { try await takeBackPending(partition, minimumIdle: configuration.leaseTTL) }
    }

    /// Claims the partition's pending entries idle for `minimumIdle` that the node's books do not hold, and queues
    /// them for handing out in stream order.
    private func takeBackPending(_ partition: Int, minimumIdle: Duration) async throws {
        let known = state.withLockedValue { state in
            state.partitions[partition].outstanding.union(state.partitions[partition].ready.map { Self.streamId(ofEntry: $0.id) })
        }
        let found = try await claimPending(partition, minimumIdle: minimumIdle, skipping: known)
        guard !found.isEmpty else { return }
        state.withLockedValue { state in
            guard state.partitions[partition].lease != .none else { return }
            state.partitions[partition].ready.append(contentsOf: found)
            state.partitions[partition].ready.sort { Self.streamIdPrecedes(Self.streamId(ofEntry: $0.id), Self.streamId(ofEntry: $1.id)) }
        }
        logger.warning(
            "took back entries left in the pending list by an interrupted read", metadata: ["partition": "\(partition)", "entries": "\(found.count)"])
    }

    /// XAUTOCLAIM of the partition's pending entries to this node, in stream order, with their attempt counts.
    private func claimPending(_ partition: Int, minimumIdle: Duration, skipping known: Set<String>) async throws -> [BufferEntry] {
        let stream = keys.stream(partition)
        var cursor = "0-0"
        var claimed: [(streamId: String, message: BufferedMessage)] = []
        repeat {
            let reply = try await client.send(
                RESPCommand("XAUTOCLAIM", stream, Self.group, nodeId, Int64(minimumIdle / .milliseconds(1)), cursor, "COUNT", 1000))
            guard let parts = reply.array, parts.count >= 2, let next = parts[0].string, let entries = parts[1].array else {
                throw RedisError.protocolError("unexpected XAUTOCLAIM reply \(reply)")
            }
            for entry in entries {
                guard let (streamId, message) = decodeEntry(entry, partition: partition), !known.contains(streamId) else { continue }
                claimed.append((streamId, message))
            }
            // Pending entries whose stream entry is gone: nothing to hand out, settle them.
            if parts.count >= 3, let deleted = parts[2].array?.compactMap(\.string), !deleted.isEmpty {
                _ = try await client.evalScript(Scripts.acknowledge, keys: [stream, keys.attempts(partition)], arguments: deleted)
            }
            cursor = next
        } while cursor != "0-0"
        guard !claimed.isEmpty else { return [] }
        var attempts: [Int] = Array(repeating: 0, count: claimed.count)
        if try await client.send(RESPCommand("HLEN", keys.attempts(partition))).int ?? 0 > 0 {
            var command = RESPCommand("HMGET", keys.attempts(partition))
            command.append(contentsOf: claimed.map(\.streamId))
            let counts = try await client.send(command).array ?? []
            for (index, count) in counts.enumerated() where index < attempts.count { attempts[index] = Int(count.int ?? 0) }
        }
        return zip(claimed, attempts).map { BufferEntry(id: "\(partition)-\($0.streamId)", message: $0.message, attempts: $1, partition: partition) }
    }

    // MARK: Setup and upkeep

    /// Reads Redis's persistence settings and warns when acknowledged messages could be lost in a Redis crash.
    @discardableResult
    public static func checkDurability(client: RedisClient, logger: Logger) async -> Durability {
        let durability: Durability
        do {
            let appendOnly = try await client.send(RESPCommand("CONFIG", "GET", "appendonly")).array?.last?.string
            let appendFsync = try await client.send(RESPCommand("CONFIG", "GET", "appendfsync")).array?.last?.string
            switch (appendOnly, appendFsync) {
            case ("no", _): durability = .noAppendOnlyFile
            case ("yes", "always"): durability = .everyWrite
            case ("yes", "everysec"): durability = .everySecond
            case ("yes", "no"): durability = .operatingSystem
            default: durability = .unknown("CONFIG GET answered appendonly=\(appendOnly ?? "?") appendfsync=\(appendFsync ?? "?")")
            }
        } catch {
            durability = .unknown("\(error)")
        }
        switch durability {
        case .everyWrite:
            break
        case .everySecond:
            logger.warning("Redis runs with appendfsync everysec: up to one second of acknowledged messages can be lost when Redis crashes")
        case .operatingSystem:
            logger.warning("Redis runs with appendfsync no: acknowledged messages can be lost when Redis crashes (the OS flushes when it likes)")
        case .noAppendOnlyFile:
            logger.warning("Redis runs without AOF (appendonly no): acknowledged messages can be lost when Redis crashes")
        case .unknown(let reason):
            logger.warning(
                "could not check Redis's persistence (CONFIG GET appendonly/appendfsync); make sure it runs with appendonly yes and appendfsync always",
                metadata: ["reason": "\(reason)"])
        }
        // An evicting Redis under memory pressure drops buffered messages and de-duplication keys.
        if let policy = try? await client.send(RESPCommand("CONFIG", "GET", "maxmemory-policy")).array?.last?.string, policy != "noeviction" {
            logger.warning(
                "Redis evicts keys under memory pressure (maxmemory-policy \(policy)): buffered messages can be lost; set maxmemory-policy noeviction")
        }
        return durability
    }

    /// Everything done once per node before the first heartbeat.
    private func prepareRedis() async throws {
        try await client.loadScripts(Scripts.all)
        await Self.checkDurability(client: client, logger: logger)
        _ = try await client.send(RESPCommand("HSETNX", keys.meta, "partitions", configuration.partitions))
        let partitions = try await client.send(RESPCommand("HGET", keys.meta, "partitions")).int
        guard partitions == Int64(configuration.partitions) else {
            throw SetupError(
                description: "Redis holds a buffer with \(partitions.map(String.init) ?? "an unreadable number of") partitions under the prefix "
                    + "\"\(configuration.keyPrefix)\", but this node is configured with \(configuration.partitions): every node must use the same number")
        }
        try await createGroups()
        state.withLockedValue { $0.isPrepared = true }
    }

    /// Creates each partition's stream and consumer group if missing.
    private func createGroups() async throws {
        let creations: [EventLoopFuture<RESPValue>] = (0..<configuration.partitions).map {
            client.send(RESPCommand("XGROUP", "CREATE", keys.stream($0), Self.group, "0", "MKSTREAM"))
        }
        for creation in creations {
            do {
                _ = try await creation.get()
            } catch let error as RedisError where error.code == "BUSYGROUP" {
                continue
            }
        }
    }

    private func refreshDepth() async throws {
        let deltaAtStart = state.withLockedValue { $0.depthDelta }
        let lengths: [EventLoopFuture<RESPValue>] = (0..<configuration.partitions).map { client.send(RESPCommand("XLEN", keys.stream($0))) }
        var total = 0
        for length in lengths { total += Int(try await length.get().int ?? 0) }
        state.withLockedValue { state in
            state.depthInRedis = total
            state.depthDelta -= deltaAtStart
        }
    }

    // MARK: Helpers

    private func parseStreams(_ reply: RESPValue) throws -> [Int: [BufferEntry]] {
        guard !reply.isNull else { return [:] }
        guard let streams = reply.array else { throw RedisError.protocolError("unexpected XREADGROUP reply \(reply)") }
        var result: [Int: [BufferEntry]] = [:]
        for stream in streams {
            guard let pair = stream.array, pair.count == 2, let key = pair[0].string, let partition = partitionOfStream[key],
                let entries = pair[1].array
            else { throw RedisError.protocolError("unexpected XREADGROUP stream \(stream)") }
            // New entries were never handed out before: no attempts yet.
            result[partition] = entries.compactMap { entry in
                decodeEntry(entry, partition: partition).map { BufferEntry(id: "\(partition)-\($0.0)", message: $0.1, attempts: 0, partition: partition) }
            }
        }
        return result
    }

    /// `[id, ["m", encoded]]` as (stream id, message); `nil` (and an error log) for an entry that is not a message.
    private func decodeEntry(_ entry: RESPValue, partition: Int) -> (String, BufferedMessage)? {
        guard let parts = entry.array, parts.count == 2, let streamId = parts[0].string else { return nil }
        guard let fields = parts[1].array, fields.count >= 2, fields[0].string == "m", let encoded = fields[1].buffer,
            var message = BufferedMessageCodec.decode(encoded), let body = try? configuration.cipher.open(message.body)
        else {
            // Left pending where it is (a newer node may understand it), never handed out or deleted.
            logger.error("a buffer entry cannot be decoded; leaving it pending", metadata: ["partition": "\(partition)", "id": "\(streamId)"])
            return nil
        }
        message.body = body
        return (streamId, message)
    }

    /// An entry's bytes: the message with its body sealed.
    private func encode(_ message: BufferedMessage) -> ByteBuffer {
        var sealed = message
        sealed.body = configuration.cipher.seal(message.body)
        return BufferedMessageCodec.encode(sealed)
    }

    /// "partition-streamId" → (partition, streamId).
    private func parse(entryId: String) -> (Int, String)? {
        guard let dash = entryId.firstIndex(of: "-"), let partition = Int(entryId[..<dash]), (0..<configuration.partitions).contains(partition)
        else { return nil }
        return (partition, String(entryId[entryId.index(after: dash)...]))
    }

    private static func streamId(ofEntry entryId: String) -> String {
        entryId.firstIndex(of: "-").map { String(entryId[entryId.index(after: $0)...]) } ?? entryId
    }

    /// Stream ids ("milliseconds-sequence") in numeric order.
    private static func streamIdPrecedes(_ left: String, _ right: String) -> Bool {
        func parts(_ id: String) -> (UInt64, UInt64) {
            let split = id.split(separator: "-", maxSplits: 1)
            return (UInt64(split.first ?? "") ?? 0, split.count > 1 ? UInt64(split[1]) ?? 0 : 0)
        }
        return parts(left) < parts(right)
    }

    private func pause(_ duration: Duration) async {
        guard duration > .zero else { return }
        try? await Task.sleep(for: duration)
    }

    /// Logs a Redis problem at most every ten seconds (they come in streaks while Redis is down).
    private func logProblem(_ message: Logger.Message, _ error: any Error) {
        let now = clock.now
        let log = state.withLockedValue { state -> Bool in
            if let last = state.lastProblemLog, now - last < .seconds(10) { return false }
            state.lastProblemLog = now
            return true
        }
        if log { logger.warning(message, metadata: ["error": "\(error)"]) }
    }
}

extension RedisStreamsBuffer: NodeRoster {
    /// The nodes set: every node that heart-beat within three lease TTLs, with its last heartbeat on Redis's clock.
    package func nodeHeartbeats() async throws -> [String: Int64] {
        let reply = try await client.send(RESPCommand("ZRANGE", keys.nodes, "0", "-1", "WITHSCORES"))
        // RESP2: a flat [member, score, ...]; RESP3: [[member, score], ...].
        let elements = reply.array ?? []
        let pairs: [(RESPValue, RESPValue)] =
            elements.allSatisfy({ $0.array?.count == 2 })
            ? elements.compactMap { pair in pair.array.map { ($0[0], $0[1]) } }
            : stride(from: 0, to: elements.count - 1, by: 2).map { (elements[$0], elements[$0 + 1]) }
        var nodes: [String: Int64] = [:]
        for (member, score) in pairs {
            guard let node = member.string, let millis = score.string.flatMap(Double.init) else { continue }
            nodes[node] = Int64(millis)
        }
        return nodes
    }
}
