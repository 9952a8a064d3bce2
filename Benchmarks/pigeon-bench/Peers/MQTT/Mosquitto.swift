import Foundation
import NIOCore
import PigeonBenchSupport

/// A mosquitto broker this run started on a free loopback port: anonymous, persistent (sessions and queued messages
/// are saved in its directory), without limits on queued or in-flight messages, and with `TCP_NODELAY` like the
/// Pigeon server, so that small messages are not held back by Nagle's algorithm.
struct MosquittoBroker: Sendable {
    let port: Int
    let pid: pid_t
    /// The version the broker logged at start-up.
    let version: String?

    /// Starts `binary` with a generated configuration in `workDirectory`, waits until it accepts an MQTT session,
    /// runs `body`, and stops the broker with SIGTERM whatever happens.
    static func withBroker<T>(binary: String, workDirectory: String, _ body: (MosquittoBroker) async throws -> T) async throws -> T {
        let port = try await LocalEnvironment.freeLoopbackPort()
        let directory = workDirectory + "/mosquitto"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let configuration = """
            listener \(port) 127.0.0.1
            allow_anonymous true
            persistence true
            persistence_location \(directory)/
            max_queued_messages 0
            max_inflight_messages 0
            set_tcp_nodelay true

            """
        try configuration.write(toFile: directory + "/mosquitto.conf", atomically: true, encoding: .utf8)
        let process = try ChildProcess(
            name: "mosquitto",
            executable: binary,
            arguments: ["-c", directory + "/mosquitto.conf"],
            logPath: directory + "/mosquitto.log"
        )
        let result: T
        do {
            try await waitUntilAcceptingSessions(port: port, process: process)
            let broker = MosquittoBroker(port: port, pid: process.pid, version: loggedVersion(process.logTail()))
            result = try await body(broker)
        } catch {
            await process.stop()
            throw error
        }
        await process.stop()
        return result
    }

    private static func waitUntilAcceptingSessions(port: Int, process: ChildProcess) async throws {
        let ready = try await waitUntil(.now + .seconds(10), polling: .milliseconds(50)) {
            try process.checkRunning()
            let accepted = try? await withTimeLimit(.seconds(1), "an MQTT session with mosquitto") {
                try await MQTTClient.withSession(port: port, clientId: "pigeon-bench-probe", cleanSession: true) { _, _ in true }
            }
            return accepted ?? false
        }
        guard ready else { throw BenchError.timedOut("mosquitto did not accept an MQTT session on port \(port) within 10 s") }
    }

    /// The version in mosquitto's "mosquitto version X starting" log line.
    private static func loggedVersion(_ log: String) -> String? {
        guard let range = log.range(of: "mosquitto version ") else { return nil }
        return log[range.upperBound...].split(separator: " ").first.map(String.init)
    }
}

extension MosquittoBroker: Broker {
    static let labels = BrokerLabels(
        executable: "mosquitto", residentWhen: "at start", name: "mosquitto", inFlight: "QoS 1 publishes",
        throughputReceivers: "a consuming subscriber per topic", acks: "PUBACKs", receiver: "subscriber")

    func load(settings: BenchSettings) -> MQTTLoad {
        MQTTLoad(broker: self, settings: settings)
    }
}

/// The Pigeon load shapes against an MQTT broker at QoS 1. Each publisher has its own topic, and a persistent-session
/// subscriber on that topic is connected and consuming (acknowledging every message) before publishing starts.
struct MQTTLoad: BrokerLoad {
    let broker: MosquittoBroker
    let settings: BenchSettings

    /// Pipelined publishing: each publisher keeps `settings.window` QoS 1 PUBLISHes in flight, publishing the next one
    /// whenever a PUBACK arrives; counts PUBACKs per second, then waits until the subscribers have every acked message.
    /// Each payload starts with the publisher's count of messages so far (8 bytes, so payloads are at least 8 bytes),
    /// by which the subscriber tells a redelivery from a new message.
    func throughput() async throws -> ThroughputResult {
        try await ThroughputResult.brokerThroughput(
            settings: settings, brokerPid: broker.pid,
            receiver: { index, ready, ledger in
                try await subscribe(clientId: "tput-sub-\(index)", topic: "bench/tput/\(index)", ready: ready) { payload in
                    if let number = payload.getInteger(at: payload.readerIndex, as: Int64.self) {
                        ledger.record(number)
                    }
                }
            },
            sender: { index, window, tally in
                try await publishPipelined(clientId: "tput-pub-\(index)", topic: "bench/tput/\(index)", window: window, tally: tally)
            }
        )
    }

    /// Paced publishing at `rate` messages/s in total; measures publish → subscriber receive. Each payload starts
    /// with a UUID that identifies the message (so payloads are at least 36 bytes).
    func latency(rate: Int) async throws -> LatencyResult {
        try await PacedLatencyRun.brokerLatency(
            rate: rate, settings: settings, brokerPid: broker.pid,
            receiver: { index, ready, tracker in
                try await subscribe(clientId: "lat\(rate)-sub-\(index)", topic: "bench/lat\(rate)/\(index)", ready: ready) { payload in
                    if let id = payload.getString(at: payload.readerIndex, length: Self.idLength) {
                        tracker.received(id, at: .now)
                    }
                }
            },
            sender: { index, schedule, window, tracker in
                try await publishPaced(
                    clientId: "lat\(rate)-pub-\(index)", topic: "bench/lat\(rate)/\(index)", schedule: schedule, window: window, tracker: tracker)
            }
        )
    }

    private static let idLength = 36

    /// A persistent session subscribed to `topic` at QoS 1: increments `ready` on SUBACK, then hands every PUBLISH's
    /// payload to `onMessage` and acknowledges it, until cancelled.
    private func subscribe(clientId: String, topic: String, ready: Counter, onMessage: (ByteBuffer) -> Void) async throws {
        try await MQTTClient.withSession(port: broker.port, clientId: clientId, cleanSession: false) { packets, writer in
            try await writer.write(.subscribe(packetId: 1, topicFilter: topic))
            for try await packet in packets {
                switch packet {
                case .suback(_, let returnCodes):
                    guard returnCodes == [1] else { throw BenchError.mqttProtocol("\(clientId): SUBACK granted \(returnCodes)") }
                    ready.increment()
                case .publish(_, let packetId, let payload):
                    onMessage(payload)
                    if let packetId { try await writer.write(.puback(packetId: packetId)) }
                default:
                    continue
                }
            }
        }
    }

    private func publishPipelined(
        clientId: String,
        topic: String,
        window: MeasurementWindow,
        tally: ThroughputTally
    ) async throws -> ConnectionAnswers {
        let padding = max(0, settings.bodySize - MemoryLayout<Int64>.size)
        let depth = settings.window
        return try await MQTTClient.withSession(port: broker.port, clientId: clientId, cleanSession: false) { packets, writer in
            var packetIDs = MQTTPacketIDs()
            var answers = ConnectionAnswers()
            var inFlight = 0
            var published: Int64 = 0
            func publishNext() async throws {
                published += 1
                var payload = ByteBuffer()
                payload.writeInteger(published)
                payload.writeRepeatingByte(UInt8(ascii: "x"), count: padding)
                try await writer.write(.publish(topic: topic, packetId: packetIDs.next(), payload: payload))
                inFlight += 1
            }
            for _ in 0..<depth {
                try await publishNext()
            }
            for try await packet in packets {
                guard case .puback = packet else { continue }
                let now = ContinuousClock.now
                answers.accepted += 1
                tally.recordAccepted(at: now)
                inFlight -= 1
                if now < window.end {
                    try await publishNext()
                } else if inFlight == 0 {
                    break
                }
            }
            answers.unanswered = inFlight
            return answers
        }
    }

    private func publishPaced(
        clientId: String,
        topic: String,
        schedule: PacedSchedule,
        window: MeasurementWindow,
        tracker: DeliveryTracker
    ) async throws {
        let padding = max(0, settings.bodySize - Self.idLength)
        try await MQTTClient.withSession(port: broker.port, clientId: clientId, cleanSession: false) { packets, writer in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    var packetIDs = MQTTPacketIDs()
                    for instant in schedule {
                        try await Task.sleep(until: instant)
                        let (_, payload) = tracker.nextPacedPayload(padding: padding, window: window)
                        try await writer.write(.publish(topic: topic, packetId: packetIDs.next(), payload: payload))
                    }
                }
                for try await _ in packets {}
                try await group.waitForAll()
            }
        }
    }
}
