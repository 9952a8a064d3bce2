import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonRedis

/// Reads the partition streams this node leases: one `XREADGROUP` over all of them on a connection of its own, the
/// entries queued per partition in the ``PartitionBook`` and handed out from there; takes back what a read left pending
/// (its answer lost) or a previous owner handed out and never acknowledged (`XAUTOCLAIM`), with the attempt counts;
/// and acknowledges (`XACK` + `XDEL`, one script per partition).
final class RedisStreamReader: Sendable {
    private let context: RedisBufferContext
    private let partitionOfStream: [String: Int]
    /// The connection for blocking reads (they would hold up the client's shared connections).
    private let readConnection = NIOLockedValueBox<RedisConnection?>(nil)

    init(context: RedisBufferContext) {
        self.context = context
        self.partitionOfStream = Dictionary(
            uniqueKeysWithValues: (0..<context.configuration.partitions).map { (context.keys.stream($0), $0) })
    }

    private var book: PartitionBook { context.book }

    /// What is ready, or else one read of the leased partitions blocking up to `wait`.
    func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry] {
        try await recoverInterruptedReads()
        let ready = book.takeReady(max: max)
        if !ready.isEmpty { return ready }
        return try await read(max: max, wait: wait)
    }

    /// One XREADGROUP over the partitions this node reads now, blocking up to `wait`.
    private func read(max: Int, wait: Duration) async throws -> [BufferEntry] {
        let partitions = book.beginRead(at: context.clock.now)
        guard !partitions.isEmpty else {
            await context.pause(wait)
            return []
        }
        // Not longer than a heartbeat, so that partitions gained or given up count soon.
        let block = min(wait, context.configuration.heartbeatInterval)
        var command = RESPCommand("XREADGROUP", "GROUP", RedisStreamsBuffer.group, context.nodeId, "COUNT", max)
        let blockMilliseconds = Int64(block / .milliseconds(1))
        if blockMilliseconds > 0 {
            command.append("BLOCK")
            command.append(blockMilliseconds)
        }
        command.append("STREAMS")
        for partition in partitions { command.append(context.keys.stream(partition)) }
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
            // Not an error reply: Redis may have delivered entries that never arrived (or were not understood).
            let isErrorReply = (error as? RedisError)?.code != nil
            book.endRead(partitions, read: [:], needsRecovery: !isErrorReply)
            if !isErrorReply { closeReadingConnection() }
            throw error
        }
        book.endRead(partitions, read: read)
        return book.takeReady(max: max)
    }

    private func readingConnection() async throws -> RedisConnection {
        if let connection = readConnection.withLockedValue({ $0 }), connection.isConnected { return connection }
        let connection = try await context.client.dedicatedConnection()
        let previous = readConnection.withLockedValue { current in
            defer { current = connection }
            return current
        }
        previous?.closeInBackground()
        return connection
    }

    func closeReadingConnection() {
        readConnection.withLockedValue { connection in
            defer { connection = nil }
            return connection
        }?.closeInBackground()
    }

    /// Takes back, for partitions whose read was interrupted, what Redis delivered and the node never saw.
    private func recoverInterruptedReads() async throws {
        for partition in book.needingRecovery {
            try await takeBackPending(partition, minimumIdle: .zero)
            book.recovered(partition)
        }
    }

    /// Claims the partition's pending entries idle for `minimumIdle` that the node's books do not hold, and queues
    /// them for handing out in stream order.
    func takeBackPending(_ partition: Int, minimumIdle: Duration) async throws {
        let found = try await claimPending(partition, minimumIdle: minimumIdle, skipping: book.known(in: partition))
        guard !found.isEmpty else { return }
        book.takenBack(found, in: partition)
        context.logger.warning(
            "took back entries left in the pending list by an interrupted read", metadata: ["partition": "\(partition)", "entries": "\(found.count)"])
    }

    /// XAUTOCLAIM of the partition's pending entries to this node, in stream order, with their attempt counts.
    func claimPending(_ partition: Int, minimumIdle: Duration, skipping known: Set<String>) async throws -> [BufferEntry] {
        let (client, keys) = (context.client, context.keys)
        let stream = keys.stream(partition)
        var cursor = "0-0"
        var claimed: [(streamId: String, message: BufferedMessage)] = []
        repeat {
            let reply = try await client.send(
                RESPCommand("XAUTOCLAIM", stream, RedisStreamsBuffer.group, context.nodeId, Int64(minimumIdle / .milliseconds(1)), cursor, "COUNT", 1000))
            guard let parts = reply.array, parts.count >= 2, let next = parts[0].string, let entries = parts[1].array else {
                throw RedisError.protocolError("unexpected XAUTOCLAIM reply \(reply)")
            }
            for entry in entries {
                guard let (streamId, message) = decodeEntry(entry, partition: partition), !known.contains(streamId) else { continue }
                claimed.append((streamId, message))
            }
            // Pending entries whose stream entry is gone: nothing to hand out, settle them.
            if parts.count >= 3, let deleted = parts[2].array?.compactMap(\.string), !deleted.isEmpty {
                _ = try await client.evalScript(RedisStreamsBuffer.Scripts.acknowledge, keys: [stream, keys.attempts(partition)], arguments: deleted)
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
        return zip(claimed, attempts).map {
            BufferEntry(id: RedisEntryId.make(partition: partition, streamId: $0.streamId), message: $0.message, attempts: $1, partition: partition)
        }
    }

    // MARK: Acknowledging

    /// One pipeline for all: a script per partition (its keys share a hash slot) and per 500 entries, sent together
    /// over one connection, so acknowledging batches of several partitions costs one round trip.
    func acknowledge(entryIds: [String]) async throws {
        var byPartition: [Int: [String]] = [:]
        for entryId in entryIds {
            guard let (partition, streamId) = RedisEntryId.parse(entryId, partitions: context.configuration.partitions) else { continue }
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
        let keys = context.keys
        let replies = await context.client.evalScripts(
            chunks.map {
                RedisScript.Call(RedisStreamsBuffer.Scripts.acknowledge, keys: [keys.stream($0.partition), keys.attempts($0.partition)], arguments: $0.streamIds)
            })
        var failure: RedisError?
        for (chunk, reply) in zip(chunks, replies) {
            switch reply {
            case .success(let deleted): book.acknowledged(chunk.streamIds, in: chunk.partition, deleted: Int(deleted.int ?? 0))
            case .failure(let error): failure = error
            }
        }
        // Acknowledging again is harmless: the caller retries the whole list.
        if let failure { throw failure }
    }

    func recordFailedAttempt(entryId: String, attempts: Int) async throws {
        guard let (partition, streamId) = RedisEntryId.parse(entryId, partitions: context.configuration.partitions) else { return }
        _ = try await context.client.send(RESPCommand("HSET", context.keys.attempts(partition), streamId, attempts))
    }

    // MARK: Entries

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
                decodeEntry(entry, partition: partition).map {
                    BufferEntry(id: RedisEntryId.make(partition: partition, streamId: $0.0), message: $0.1, attempts: 0, partition: partition)
                }
            }
        }
        return result
    }

    /// `[id, ["m", encoded]]` as (stream id, message); `nil` (and an error log) for an entry that is not a message.
    private func decodeEntry(_ entry: RESPValue, partition: Int) -> (String, BufferedMessage)? {
        guard let parts = entry.array, parts.count == 2, let streamId = parts[0].string else { return nil }
        guard let fields = parts[1].array, fields.count >= 2, fields[0].string == "m", let encoded = fields[1].buffer,
            var message = BufferedMessageCodec.decode(encoded), let body = try? context.configuration.cipher.open(message.body)
        else {
            // Left pending where it is (a newer node may understand it), never handed out or deleted.
            context.logger.error("a buffer entry cannot be decoded; leaving it pending", metadata: ["partition": "\(partition)", "id": "\(streamId)"])
            return nil
        }
        message.body = body
        return (streamId, message)
    }
}
