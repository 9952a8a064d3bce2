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
///
/// This type is the front the node's accept path and processor see; the work is done by its parts, which share a
/// ``PartitionBook``: ``RedisPartitionLeases`` (heartbeats, leases, take-overs, sweeps), ``RedisStreamReader`` (reads,
/// claims, acknowledgements) and ``RedisBufferSetup`` (what is done to Redis once, and the depth). ``RedisIngest``
/// assembles it for the composition root.
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

    /// This node's name (see ``Configuration/nodeId``).
    public var nodeId: String { configuration.nodeId }

    private let context: RedisBufferContext
    private let reader: RedisStreamReader
    private let leases: RedisPartitionLeases

    private var client: RedisClient { context.client }
    private var configuration: Configuration { context.configuration }
    private var keys: Keys { context.keys }
    private var book: PartitionBook { context.book }

    /// Sets the buffer up: checks durability, loads the scripts, checks the partition count, creates the consumer
    /// groups and takes this node's first leases.
    ///
    /// If Redis cannot be reached now, the buffer starts anyway (not ready, refusing appends with 503) and
    /// ``run()`` finishes the setup once Redis is back. Throws ``SetupError`` if Redis holds a buffer with
    /// another number of partitions under this prefix.
    ///
    /// `clock` paces the heartbeats and times the leases locally (`ContinuousClock` unless a test injects its own).
    public init(client: RedisClient, configuration: Configuration, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) async throws {
        precondition(configuration.partitions >= 1, "a Redis Streams buffer needs at least one partition")
        precondition(configuration.heartbeatInterval < configuration.leaseTTL, "the heartbeat must come more often than the lease TTL")
        context = RedisBufferContext(client: client, configuration: configuration, logger: logger, clock: ElapsedClock(clock))
        reader = RedisStreamReader(context: context)
        leases = RedisPartitionLeases(context: context, reader: reader)
        let connected = (try? await client.waitUntilConnected(timeout: .seconds(3))) != nil
        // Registered even while Redis is down: the client loads them on every connection it opens.
        try? await client.loadScripts(Scripts.all)
        do {
            guard connected else { throw RedisError.notConnected("not connected within 3 s") }
            try await leases.heartbeat()
        } catch let error as SetupError {
            throw error
        } catch {
            context.logger.warning(
                "Redis is not reachable: the ingest buffer is not ready and refuses messages until it is", metadata: ["error": "\(error)"])
        }
    }

    /// The partition of a conversation: ``EventPartitioning`` (FNV-1a of its UTF-8 bytes, the same on every node and every run).
    public static func partition(ofConversation conversationId: String, partitions: Int) -> Int {
        EventPartitioning.partition(ofConversation: conversationId, partitions: partitions)
    }

    public var heldPartitionCount: Int? { ownedPartitions.count }

    /// The partitions this node holds the lease of now.
    public var ownedPartitions: [Int] { book.held }

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
            [book] result in
            switch result {
            case .success(let reply) where reply.isNull:
                book.appended(1)
                completion(.success(.accepted))
            case .success(let reply):
                if let duplicate = Self.duplicate(reply) {
                    completion(.success(duplicate))
                } else {
                    self.context.logProblem("unexpected reply to the append script", RedisError.protocolError("\(reply)"))
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
            context.logProblem("the ingest buffer's append failed", error)
            return .overloaded("the ingest buffer (Redis) failed to take the message; retry shortly")
        }
    }

    public func requeue(_ message: BufferedMessage) async throws {
        let partition = Self.partition(ofConversation: message.conversationId, partitions: configuration.partitions)
        _ = try await client.send(RESPCommand("XADD", keys.stream(partition), "*", "m", encode(message)))
        book.appended(1)
    }

    /// An entry's bytes: the message with its body sealed.
    private func encode(_ message: BufferedMessage) -> ByteBuffer {
        var sealed = message
        sealed.body = configuration.cipher.seal(message.body)
        return BufferedMessageCodec.encode(sealed)
    }

    public var depth: Int { book.depth }

    public func isReady() async -> Bool {
        guard client.isConnected, book.isPrepared, !book.isStopped, let last = book.lastHeartbeat else { return false }
        return context.clock.now - last < configuration.heartbeatInterval * 3
    }

    // MARK: Handing out and acknowledging

    public func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry] {
        guard max > 0, !book.isStopped else {
            await context.pause(wait)
            return []
        }
        do {
            let batch = try await reader.nextBatch(max: max, wait: wait)
            await leases.releaseDrainedPartitions()
            return batch
        } catch let error as RedisError {
            await leases.releaseDrainedPartitions()
            // Redis trouble is not the processor's: it asks again, after a pause so that it does not spin.
            context.logProblem("reading the ingest buffer failed; retrying", error)
            if error.code == "NOGROUP" { try? await RedisBufferSetup.createGroups(context) }
            await context.pause(Swift.min(Swift.max(wait, .milliseconds(100)), .seconds(1)))
            return []
        }
    }

    public func acknowledge(entryIds: [String]) async throws {
        do {
            try await reader.acknowledge(entryIds: entryIds)
        } catch {
            await leases.releaseDrainedPartitions()
            throw error
        }
        await leases.releaseDrainedPartitions()
    }

    public func recordFailedAttempt(entryId: String, attempts: Int) async throws {
        try await reader.recordFailedAttempt(entryId: entryId, attempts: attempts)
    }

    // MARK: Leases

    /// Heartbeats, renews and rebalances the leases until cancelled; on graceful shutdown it releases them
    /// (``shutdown()``) and returns. Throws ``SetupError`` if the partition count does not match Redis's.
    public func run() async throws {
        while !book.isStopped {
            do {
                try await leases.heartbeat()
            } catch let error as SetupError {
                throw error
            } catch {
                context.logProblem("the ingest buffer's heartbeat failed; retrying", error)
            }
            try? await cancelWhenGracefulShutdown { try await self.context.clock.sleep(for: self.configuration.heartbeatInterval) }
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
        await leases.releaseAll()
        reader.closeReadingConnection()
    }

    /// Reads Redis's persistence settings and warns when acknowledged messages could be lost in a Redis crash.
    @discardableResult
    public static func checkDurability(client: RedisClient, logger: Logger) async -> Durability {
        await RedisBufferSetup.checkDurability(client: client, logger: logger)
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
