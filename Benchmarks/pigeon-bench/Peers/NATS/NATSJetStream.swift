import Foundation
import NIOCore
import NIOFoundationCompat
import PigeonBenchSupport

/// The JetStream API calls and answers the benchmark uses: requests to `$JS.API.…` on a NATS connection, the PubAck
/// that answers a publish to a stream's subject, and the acknowledgement of a consumed message.
enum NATSJetStream {
    /// The stream every NATS scenario publishes to; its subjects are `bench.>`.
    static let streamName = "BENCH"

    /// Creates the benchmark's stream: file storage, one replica, kept by limits (nothing is removed while a run
    /// lasts), on `bench.>`. Throws with JetStream's answer if it refuses.
    static func createStream(inbound: inout NATSInbound, writer: NATSWriter) async throws {
        let configuration: [String: Any] = [
            "name": streamName, "subjects": ["bench.>"], "storage": "file", "retention": "limits", "num_replicas": 1,
            "discard": "old", "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_consumers": -1,
        ]
        try await call("STREAM.CREATE.\(streamName)", configuration, inbound: &inbound, writer: writer)
    }

    /// Creates the durable push consumer `durable` on the stream for `filterSubject`: it delivers every message
    /// from the first to `deliverSubject` and waits for an explicit acknowledgement of each (redelivering after
    /// 30 s without one), with no limit on unacknowledged messages. Throws with JetStream's answer if it refuses.
    static func createPushConsumer(
        durable: String,
        filterSubject: String,
        deliverSubject: String,
        inbound: inout NATSInbound,
        writer: NATSWriter
    ) async throws {
        let request: [String: Any] = [
            "stream_name": streamName,
            "config": [
                "durable_name": durable, "deliver_subject": deliverSubject, "filter_subject": filterSubject,
                "deliver_policy": "all", "ack_policy": "explicit", "ack_wait": 30_000_000_000, "max_deliver": -1,
                "max_ack_pending": -1, "replay_policy": "instant",
            ] as [String: Any],
        ]
        try await call("CONSUMER.DURABLE.CREATE.\(streamName).\(durable)", request, inbound: &inbound, writer: writer)
    }

    /// The payload of an acknowledgement, published to a consumed message's reply subject.
    static let acknowledgement = ByteBuffer(string: "+ACK")

    /// Sends `body` as JSON to `$JS.API.<api>` and waits for the answer on a fresh inbox; throws with the answer
    /// when it holds an error, or when no JetStream answered. Messages of other subscriptions that arrive meanwhile
    /// are dropped, so it is for setting up before any load.
    private static func call(_ api: String, _ body: [String: Any], inbound: inout NATSInbound, writer: NATSWriter) async throws {
        let inbox = NATSClient.makeInbox()
        let sid = "api-" + inbox.suffix(8)
        try await writer.subscribe(inbox, sid: sid)
        let json = try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])
        try await writer.publish("$JS.API.\(api)", replyTo: inbox, payload: ByteBuffer(data: json))
        while let message = try await inbound.next() {
            guard message.sid == sid else { continue }
            if message.status == 503 {
                throw BenchError.natsProtocol("$JS.API.\(api): no responders (is JetStream enabled on the server?)")
            }
            if let error = apiError(in: message.payload) {
                throw BenchError.natsProtocol("$JS.API.\(api) failed: \(error); the answer was \(String(buffer: message.payload))")
            }
            return
        }
        throw BenchError.natsProtocol("\(inbound.name): the connection ended before $JS.API.\(api) answered")
    }

    /// What came back for a publish to a stream's subject.
    enum PublishAnswer {
        /// A PubAck: the stream holds the message.
        case accepted
        /// JetStream refused it, or no stream took it; the text is the error code and description.
        case refused(String)
    }

    private static let pubAckPrefix = Array(#"{"stream":"#.utf8)

    /// Reads the answer to a publish: a PubAck (`{"stream":…,"seq":…}`), an error (`{"error":{…}}`), or a
    /// no-responders status message.
    static func publishAnswer(_ message: NATSMessage) -> PublishAnswer {
        if let status = message.status {
            return .refused(status == 503 ? "503 no responders (no stream on the subject)" : "status \(status)")
        }
        let payload = message.payload
        if payload.readableBytesView.starts(with: pubAckPrefix) { return .accepted }
        return .refused(apiError(in: payload) ?? "unexpected answer \(String(buffer: payload))")
    }

    /// `"<code> <description>"` of an API answer's `error`, or `nil` if it has none.
    private static func apiError(in payload: ByteBuffer) -> String? {
        struct Answer: Decodable {
            struct APIError: Decodable {
                var code: Int
                var description: String?
            }
            var error: APIError?
        }
        guard let answer = try? JSONDecoder().decode(Answer.self, from: payload) else {
            return "an answer that is not JSON"
        }
        return answer.error.map { "\($0.code) \($0.description ?? "")" }
    }

    /// The stream sequence and the delivery count in a consumed message's reply subject:
    /// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`, or the longer form with
    /// a domain and an account hash after `$JS.ACK` (12 tokens and more).
    static func delivery(ofReplySubject subject: String) -> (streamSeq: Int64, deliveries: Int)? {
        let tokens = subject.split(separator: ".")
        guard tokens.count >= 9, tokens[0] == "$JS", tokens[1] == "ACK" else { return nil }
        let first = tokens.count >= 12 ? 6 : 4
        guard let deliveries = Int(tokens[first]), let streamSeq = Int64(tokens[first + 1]) else { return nil }
        return (streamSeq, deliveries)
    }
}
