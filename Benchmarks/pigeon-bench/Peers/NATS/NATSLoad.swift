import Foundation
import NIOCore

extension NATSBroker: Broker {
    static let labels = BrokerLabels(
        executable: "nats-server", residentWhen: "with the stream created; JetStream file storage", name: "NATS JetStream",
        inFlight: "publishes", throughputReceivers: "a consumer per subject acknowledging every message", acks: "PubAcks",
        receiver: "consumer")

    func load(settings: BenchSettings) -> NATSLoad {
        NATSLoad(broker: self, settings: settings)
    }
}

/// The Pigeon load shapes against NATS JetStream, the same as ``MQTTLoad``'s: each publisher has its own subject of
/// the file-stored stream, and a durable push consumer with explicit acknowledgements on that subject is being
/// consumed (every message acknowledged) before publishing starts. A publish is accepted when its PubAck comes back.
/// Publishes carry a `Nats-Msg-Id` header, so that JetStream checks them for duplicates as Pigeon checks its
/// `clientMessageId`s.
struct NATSLoad: BrokerLoad {
    let broker: NATSBroker
    let settings: BenchSettings

    /// Pipelined publishing: each publisher keeps `settings.window` publishes in flight, publishing the next one
    /// whenever a PubAck (or an error) answers one; counts PubAcks per second, then waits until the consumers have
    /// every acknowledged message.
    func throughput() async throws -> ThroughputResult {
        try await ThroughputResult.brokerThroughput(
            settings: settings, brokerPid: broker.pid,
            receiver: { index, ready, ledger in
                try await consume(durable: "tput-\(index)", subject: "bench.tput.\(index)", ready: ready) { message in
                    guard let delivery = message.replyTo.flatMap(NATSJetStream.delivery(ofReplySubject:)) else { return }
                    ledger.record(delivery.streamSeq)
                }
            },
            sender: { index, window, tally in
                try await publishPipelined(name: "tput-pub-\(index)", subject: "bench.tput.\(index)", window: window, tally: tally)
            }
        )
    }

    /// Paced publishing at `rate` messages/s in total; measures publish → consumer receive. Each payload starts with
    /// a UUID that identifies the message (so payloads are at least 36 bytes).
    func latency(rate: Int) async throws -> LatencyResult {
        try await PacedLatencyRun.brokerLatency(
            rate: rate, settings: settings, brokerPid: broker.pid,
            receiver: { index, ready, tracker in
                try await consume(durable: "lat\(rate)-\(index)", subject: "bench.lat\(rate).\(index)", ready: ready) { message in
                    if let id = message.payload.getString(at: message.payload.readerIndex, length: Self.idLength) {
                        tracker.received(id, at: .now)
                    }
                }
            },
            sender: { index, schedule, window, tracker in
                try await publishPaced(
                    name: "lat\(rate)-pub-\(index)", subject: "bench.lat\(rate).\(index)", schedule: schedule, window: window, tracker: tracker)
            }
        )
    }

    private static let idLength = 36

    /// Creates the durable push consumer `durable` on `subject`, delivering to a subject of this connection;
    /// increments `ready` once it exists, then hands every delivered message to `onMessage` and acknowledges it,
    /// until cancelled.
    private func consume(durable: String, subject: String, ready: Counter, onMessage: (NATSMessage) -> Void) async throws {
        try await NATSClient.withConnection(port: broker.port, name: durable) { inbound, writer in
            let deliverSubject = "_DELIVER.\(durable)"
            try await writer.subscribe(deliverSubject, sid: "deliver")
            try await NATSJetStream.createPushConsumer(
                durable: durable,
                filterSubject: subject,
                deliverSubject: deliverSubject,
                inbound: &inbound,
                writer: writer
            )
            ready.increment()
            while let message = try await inbound.next() {
                guard message.sid == "deliver", message.status == nil, let replyTo = message.replyTo else { continue }
                onMessage(message)
                try await writer.publish(replyTo, payload: NATSJetStream.acknowledgement)
            }
        }
    }

    private func publishPipelined(name: String, subject: String, window: MeasurementWindow, tally: ThroughputTally) async throws -> ConnectionAnswers {
        let payload = ByteBuffer(repeating: UInt8(ascii: "x"), count: settings.bodySize)
        let depth = settings.window
        return try await NATSClient.withConnection(port: broker.port, name: name) { inbound, writer in
            let inbox = NATSClient.makeInbox()
            try await writer.subscribe(inbox, sid: "acks")
            var answers = ConnectionAnswers()
            var inFlight = 0
            for _ in 0..<depth {
                try await writer.publish(subject, replyTo: inbox, headers: Self.messageIdHeader(), payload: payload)
                inFlight += 1
            }
            while let message = try await inbound.next() {
                guard message.sid == "acks" else { continue }
                let now = ContinuousClock.now
                switch NATSJetStream.publishAnswer(message) {
                case .accepted:
                    answers.accepted += 1
                    tally.recordAccepted(at: now)
                case .refused(let error):
                    tally.recordError(error)
                }
                inFlight -= 1
                if now < window.end {
                    try await writer.publish(subject, replyTo: inbox, headers: Self.messageIdHeader(), payload: payload)
                    inFlight += 1
                } else if inFlight == 0 {
                    break
                }
            }
            answers.unanswered = inFlight
            return answers
        }
    }

    /// Publishes at every instant of `schedule`, each with a reply subject of its own so that a refusal names the
    /// message.
    private func publishPaced(
        name: String,
        subject: String,
        schedule: PacedSchedule,
        window: MeasurementWindow,
        tracker: DeliveryTracker
    ) async throws {
        let padding = max(0, settings.bodySize - Self.idLength)
        try await NATSClient.withConnection(port: broker.port, name: name) { inbound, writer in
            let inbox = NATSClient.makeInbox()
            try await writer.subscribe(inbox + ".*", sid: "acks")
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for instant in schedule {
                        try await Task.sleep(until: instant)
                        let (id, payload) = tracker.nextPacedPayload(padding: padding, window: window)
                        try await writer.publish(subject, replyTo: "\(inbox).\(id)", headers: [("Nats-Msg-Id", id)], payload: payload)
                    }
                }
                while let message = try await inbound.next() {
                    guard message.sid == "acks", case .refused(let error) = NATSJetStream.publishAnswer(message) else { continue }
                    tracker.refused(message.subject.split(separator: ".").last.map(String.init), code: error)
                }
                try await group.waitForAll()
            }
        }
    }

    /// A fresh `Nats-Msg-Id`, the message's idempotency key in the stream's duplicate window.
    private static func messageIdHeader() -> [(String, String)] {
        [("Nats-Msg-Id", UUID().uuidString.lowercased())]
    }
}
