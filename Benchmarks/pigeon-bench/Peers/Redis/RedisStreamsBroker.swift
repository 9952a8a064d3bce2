import Foundation
import Logging
import NIOCore
import PigeonBenchSupport
import PigeonRedis
import Synchronization

/// A redis-server this run started on a free loopback port, durable like Pigeon: append-only file on with
/// `appendfsync always` (the AOF is written and fsynced before the replies of the commands that changed it go out),
/// no RDB snapshots (`save ""`), its files in the run's directory. The automatic AOF rewrite is off, so that no
/// forked child rewrites the file in the middle of a measured window (its CPU would not be the server's).
struct RedisStreamsBroker: Sendable {
    let port: Int
    let pid: pid_t
    /// The `redis_version` of its `INFO server`.
    let version: String?

    /// Starts `binary` storing in `workDirectory`, waits until it answers `PING`, runs `body`, and stops the server
    /// with SIGTERM whatever happens.
    static func withBroker<T>(binary: String, workDirectory: String, _ body: (RedisStreamsBroker) async throws -> T) async throws -> T {
        let port = try await LocalEnvironment.freeLoopbackPort()
        let directory = workDirectory + "/redis"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = try ChildProcess(
            name: "redis-server",
            executable: binary,
            arguments: [
                "--port", String(port), "--bind", "127.0.0.1", "--dir", directory, "--daemonize", "no",
                "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                "--auto-aof-rewrite-percentage", "0",
            ],
            logPath: directory + "/redis-server.log"
        )
        let result: T
        do {
            try await waitUntilAnsweringPing(port: port, process: process)
            let version = try await RedisStreamsLoad.withConnection(port: port) { connection in
                let info = try await connection.send(RESPCommand("INFO", "server")).string ?? ""
                return info.split(whereSeparator: \.isNewline).first { $0.hasPrefix("redis_version:") }
                    .map { String($0.dropFirst("redis_version:".count)) }
            }
            result = try await body(RedisStreamsBroker(port: port, pid: process.pid, version: version))
        } catch {
            await process.stop()
            throw error
        }
        await process.stop()
        return result
    }

    private static func waitUntilAnsweringPing(port: Int, process: ChildProcess) async throws {
        let ready = try await waitUntil(.now + .seconds(10), polling: .milliseconds(50)) {
            try process.checkRunning()
            let answer = try? await withTimeLimit(.seconds(1), "a PING to redis-server") {
                try await RedisStreamsLoad.withConnection(port: port) { try await $0.send(RESPCommand("PING")).string }
            }
            return answer == "PONG"
        }
        guard ready else {
            throw BenchError.timedOut("redis-server did not answer PING on port \(port) within 10 s:\n\(process.logTail())")
        }
    }
}

extension RedisStreamsBroker: Broker {
    static let labels = BrokerLabels(
        executable: "redis-server", residentWhen: "at start (AOF, appendfsync always)", name: "Redis Streams",
        inFlight: "XADDs", throughputReceivers: "a consumer group per stream reading with XREADGROUP and XACKing every entry",
        acks: "XADD replies", receiver: "consumer")

    func load(settings: BenchSettings) -> RedisStreamsLoad {
        RedisStreamsLoad(broker: self, settings: settings)
    }
}

/// The Pigeon load shapes against Redis Streams, the same as ``MQTTLoad``'s and ``NATSLoad``'s: each publisher has
/// its own stream (`stream:<run>-<pair>`) and adds entries with `XADD stream * body <payload>`, the reply being the
/// accept answer; a consumer in the stream's consumer group reads it with `XREADGROUP … BLOCK … STREAMS stream >`
/// and acknowledges every entry with an `XACK` of its own, before publishing starts. Each message thus costs two
/// writes to the fsynced AOF, as it does a durable consumer.
struct RedisStreamsLoad: BrokerLoad {
    let broker: RedisStreamsBroker
    let settings: BenchSettings

    /// Entries one `XREADGROUP` may return.
    private static let readCount = 256
    /// How long one `XREADGROUP` blocks when the stream has nothing new, in milliseconds.
    private static let blockMilliseconds = 1000
    private static let group = "g"
    private static let bodyField = "body"

    /// Pipelined publishing: each publisher keeps `settings.window` XADDs in flight on its connection, adding the
    /// next entry whenever a reply arrives; counts replies per second, then waits until the consumers have every
    /// added entry. Each payload starts with the publisher's count of messages so far (8 bytes, so payloads are at
    /// least 8 bytes), by which the consumer tells a redelivery from a new message.
    func throughput() async throws -> ThroughputResult {
        try await ThroughputResult.brokerThroughput(
            settings: settings, brokerPid: broker.pid,
            receiver: { index, ready, ledger in
                try await consume(stream: "stream:tput-\(index)", ready: ready) { payload in
                    if let number = payload.getInteger(at: payload.readerIndex, as: Int64.self) {
                        ledger.record(number)
                    }
                }
            },
            sender: { index, window, tally in
                try await publishPipelined(stream: "stream:tput-\(index)", window: window, tally: tally)
            }
        )
    }

    /// Paced publishing at `rate` messages/s in total; measures XADD → consumer receive. Each payload starts with a
    /// UUID that identifies the message (so payloads are at least 36 bytes).
    func latency(rate: Int) async throws -> LatencyResult {
        try await PacedLatencyRun.brokerLatency(
            rate: rate, settings: settings, brokerPid: broker.pid,
            receiver: { index, ready, tracker in
                try await consume(stream: "stream:lat\(rate)-\(index)", ready: ready) { payload in
                    if let id = payload.getString(at: payload.readerIndex, length: Self.idLength) {
                        tracker.received(id, at: .now)
                    }
                }
            },
            sender: { index, schedule, window, tracker in
                try await publishPaced(stream: "stream:lat\(rate)-\(index)", schedule: schedule, window: window, tracker: tracker)
            }
        )
    }

    private static let idLength = 36

    /// Opens a connection to the broker on `port`, runs `body` with it and closes it, whatever happens.
    static func withConnection<T: Sendable>(port: Int, _ body: (RedisConnection) async throws -> T) async throws -> T {
        let connection = try await RedisConnection.connect(
            configuration: RedisConfiguration(host: "127.0.0.1", port: port, connectTimeout: .seconds(2)),
            logger: Logger(label: "pigeon-bench.redis")
        )
        do {
            let result = try await body(connection)
            await connection.close()
            return result
        } catch {
            await connection.close()
            throw error
        }
    }

    /// Creates the consumer group of `stream` (and the stream), increments `ready`, then reads new entries as the
    /// group's consumer, hands each entry's body to `onEntry` and acknowledges the entry with its own `XACK`, until
    /// cancelled. The XACKs are pipelined ahead of the next `XREADGROUP` on the same connection.
    private func consume(stream: String, ready: Counter, onEntry: (ByteBuffer) -> Void) async throws {
        try await Self.withConnection(port: broker.port) { connection in
            try await withTaskCancellationHandler {
                _ = try await connection.send(RESPCommand("XGROUP", "CREATE", stream, Self.group, "0", "MKSTREAM"))
                ready.increment()
                let ackFailure = FirstFailure()
                let read = RESPCommand(
                    "XREADGROUP", "GROUP", Self.group, "consumer", "COUNT", Self.readCount, "BLOCK", Self.blockMilliseconds,
                    "STREAMS", stream, ">")
                while !Task.isCancelled {
                    let reply = try await connection.send(read)
                    // The XACKs sent before this read were answered before it (replies come in order).
                    if let failure = ackFailure.value { throw BenchError.redisProtocol("XACK on \(stream) failed: \(failure)") }
                    for entry in try Self.entries(of: reply, stream: stream) {
                        onEntry(entry.body)
                        connection.send(RESPCommand("XACK", stream, Self.group, entry.id)) { result in
                            if case .failure(let error) = result { ackFailure.record(error) }
                        }
                    }
                }
            } onCancel: {
                connection.closeInBackground()
            }
        }
    }

    /// The entries (id and body) of an `XREADGROUP` reply for one stream: `[[stream, [[id, [field, value, …]], …]]]`,
    /// or the null array when the block timed out.
    private static func entries(of reply: RESPValue, stream: String) throws -> [(id: ByteBuffer, body: ByteBuffer)] {
        guard let streams = reply.array else {
            if reply.isNull { return [] }
            throw BenchError.redisProtocol("XREADGROUP on \(stream) answered \(reply)")
        }
        var entries: [(id: ByteBuffer, body: ByteBuffer)] = []
        for streamReply in streams {
            guard let parts = streamReply.array, parts.count == 2, let list = parts[1].array else {
                throw BenchError.redisProtocol("XREADGROUP on \(stream): unexpected element \(streamReply)")
            }
            for entry in list {
                guard let fields = entry.array, fields.count == 2, let id = fields[0].buffer, let values = fields[1].array else {
                    throw BenchError.redisProtocol("XREADGROUP on \(stream): unexpected entry \(entry)")
                }
                var body: ByteBuffer?
                var index = 0
                while index + 1 < values.count {
                    if values[index].string == bodyField { body = values[index + 1].buffer }
                    index += 2
                }
                guard let body else { throw BenchError.redisProtocol("XREADGROUP on \(stream): an entry without a body: \(entry)") }
                entries.append((id, body))
            }
        }
        return entries
    }

    private func publishPipelined(stream: String, window: MeasurementWindow, tally: ThroughputTally) async throws -> ConnectionAnswers {
        let padding = max(0, settings.bodySize - MemoryLayout<Int64>.size)
        let depth = settings.window
        return try await Self.withConnection(port: broker.port) { connection in
            let (replies, continuation) = AsyncStream.makeStream(of: Result<RESPValue, RedisError>.self)
            var answers = ConnectionAnswers()
            var inFlight = 0
            var published: Int64 = 0
            func publishNext() {
                published += 1
                var payload = ByteBuffer()
                payload.writeInteger(published)
                payload.writeRepeatingByte(UInt8(ascii: "x"), count: padding)
                connection.send(RESPCommand("XADD", stream, "*", Self.bodyField, payload)) { continuation.yield($0) }
                inFlight += 1
            }
            for _ in 0..<depth {
                publishNext()
            }
            // Ends early, with the XADDs still in flight counted unanswered, when the run cancels the sender.
            for await reply in replies {
                let now = ContinuousClock.now
                switch reply {
                case .success:
                    answers.accepted += 1
                    tally.recordAccepted(at: now)
                case .failure(.server(let message)):
                    tally.recordError(RedisError.server(message).code ?? message)
                case .failure(let error):
                    throw BenchError.connectionFailed("XADD on \(stream): \(error)")
                }
                inFlight -= 1
                if now < window.end {
                    publishNext()
                } else if inFlight == 0 {
                    break
                }
            }
            continuation.finish()
            answers.unanswered = inFlight
            return answers
        }
    }

    /// Adds an entry at every instant of `schedule` without waiting for the replies (an error reply counts the
    /// message refused); at the end waits for the replies to everything sent (a `PING` is answered after them).
    private func publishPaced(stream: String, schedule: PacedSchedule, window: MeasurementWindow, tracker: DeliveryTracker) async throws {
        let padding = max(0, settings.bodySize - Self.idLength)
        try await Self.withConnection(port: broker.port) { connection in
            for instant in schedule {
                try await Task.sleep(until: instant)
                let (id, payload) = tracker.nextPacedPayload(padding: padding, window: window)
                connection.send(RESPCommand("XADD", stream, "*", Self.bodyField, payload)) { result in
                    if case .failure(let error) = result { tracker.refused(id, code: error.code ?? "\(error)") }
                }
            }
            _ = try await connection.send(RESPCommand("PING"))
        }
    }
}

/// The first error recorded by callbacks on a connection's event loop, read by the task that owns the connection.
private final class FirstFailure: Sendable {
    private let first = Mutex<RedisError?>(nil)

    func record(_ error: RedisError) {
        first.withLock { if $0 == nil { $0 = error } }
    }

    var value: RedisError? { first.withLock { $0 } }
}
