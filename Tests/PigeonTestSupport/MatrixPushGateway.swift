import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A push gateway on loopback that answers like Sygnal, for tests: it speaks the Matrix Push Gateway API
/// (https://spec.matrix.org/latest/push-gateway-api/, `POST /_matrix/push/v1/notify`) and checks each request the
/// way the specification and Sygnal's `notifications.py` read it:
///
/// - The body is a JSON object with a `notification` object (else `400`, as Sygnal answers an invalid notification).
/// - `notification.devices` is required, a non-empty list; each device has a string `app_id` and a string
///   `pushkey`, an integer `pushkey_ts` when present, an object `data` when present, an object `tweaks` when present.
/// - `event_id`, `room_id`, `type`, `sender` are strings when present; `prio` is `"high"` or `"low"` when present;
///   `counts` is an object whose `unread` and `missed_calls` are integers when present; `content` is an object.
/// - The answer is `200 {"rejected": [pushkey, ...]}`: the pushkeys of the request this gateway was told to reject.
///
/// Its behaviour can be switched while it runs: accept (`200`), answer another status (a `500`, a `429`), or hang
/// (never answer: a timeout for the server). It keeps every notification it received and which it accepted.
public final class MatrixPushGateway: Sendable {
    /// How the gateway answers a well-formed notification.
    public enum Mode: Sendable, Equatable {
        case accept
        case status(Int)
        case hang
    }

    /// One notification as received, with the fields a test checks.
    public struct Notification: Sendable, Equatable {
        public var eventId: String?
        public var roomId: String?
        public var type: String?
        public var sender: String?
        public var prio: String?
        public var unread: Int?
        public var content: [String: String]?
        public var devices: [Device]
        /// The fields of `notification`, to check that nothing else is sent.
        public var keys: Set<String>
        /// Whether this gateway answered it `200`.
        public var accepted: Bool
    }

    public struct Device: Sendable, Equatable {
        public var appId: String
        public var pushkey: String
        public var pushkeyTs: Int?
        public var data: [String: String]?
    }

    private struct State {
        var mode = Mode.accept
        var rejected: Set<String> = []
        var received: [Notification] = []
        var malformed = 0
    }

    private let state = NIOLockedValueBox(State())
    private let channel: any Channel
    public let port: Int

    public var url: String { "http://127.0.0.1:\(port)" }

    private init(channel: any Channel, port: Int) {
        self.channel = channel
        self.port = port
    }

    /// Starts a gateway on a free loopback port.
    public static func start() async throws -> MatrixPushGateway {
        let box = NIOLockedValueBox<MatrixPushGateway?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(Handler(gateway: { box.withLockedValue { $0 } }))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let gateway = MatrixPushGateway(channel: channel, port: channel.localAddress?.port ?? 0)
        box.withLockedValue { $0 = gateway }
        return gateway
    }

    public func stop() async {
        try? await channel.close()
    }

    public func setMode(_ mode: Mode) {
        state.withLockedValue { $0.mode = mode }
    }

    /// Answers these pushkeys in `rejected` from now on (an expired APNs token).
    public func reject(pushkeys: Set<String>) {
        state.withLockedValue { $0.rejected = pushkeys }
    }

    /// Forgets the notifications received so far.
    public func reset() {
        state.withLockedValue { $0.received = [] }
    }

    /// Every notification received, in order.
    public var received: [Notification] { state.withLockedValue { $0.received } }
    /// The notifications answered `200`.
    public var accepted: [Notification] { received.filter(\.accepted) }
    /// Requests refused with `400` (none is expected from Pigeon).
    public var malformedCount: Int { state.withLockedValue { $0.malformed } }

    /// The answer to one request body: status and JSON.
    fileprivate func answer(method: HTTPMethod, uri: String, body: Data) -> (status: Int, json: String)? {
        guard uri == "/_matrix/push/v1/notify" else { return (404, #"{"errcode":"M_UNRECOGNIZED","error":"Unrecognized request"}"#) }
        guard method == .POST else { return (405, #"{"errcode":"M_UNRECOGNIZED","error":"Unrecognized request"}"#) }
        guard let notification = Self.parse(body) else {
            state.withLockedValue { $0.malformed += 1 }
            return (400, #"{"errcode":"M_BAD_JSON","error":"Invalid notification"}"#)
        }
        return state.withLockedValue { state -> (Int, String)? in
            var notification = notification
            switch state.mode {
            case .hang:
                state.received.append(notification)
                return nil
            case .status(let code):
                state.received.append(notification)
                return (code, #"{"error":"test gateway failure"}"#)
            case .accept:
                notification.accepted = true
                state.received.append(notification)
                let rejected = notification.devices.map(\.pushkey).filter { state.rejected.contains($0) }
                let list = rejected.map { "\"\($0)\"" }.joined(separator: ",")
                return (200, "{\"rejected\":[\(list)]}")
            }
        }
    }

    /// A notification read as the specification says, or `nil` when it is not one.
    static func parse(_ body: Data) -> Notification? {
        guard let root = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
            let notification = root["notification"] as? [String: Any],
            let devices = notification["devices"] as? [[String: Any]], !devices.isEmpty
        else { return nil }
        func string(_ key: String) -> (ok: Bool, value: String?) {
            guard let value = notification[key] else { return (true, nil) }
            guard let text = value as? String else { return (false, nil) }
            return (true, text)
        }
        let fields = ["event_id", "room_id", "type", "sender", "prio"].map(string)
        guard fields.allSatisfy(\.ok) else { return nil }
        if let prio = fields[4].value, !["high", "low"].contains(prio) { return nil }
        var unread: Int?
        if let counts = notification["counts"] {
            guard let counts = counts as? [String: Any] else { return nil }
            if let value = counts["unread"] {
                guard let number = value as? NSNumber, number.doubleValue == number.doubleValue.rounded()
                else { return nil }
                unread = number.intValue
            }
            if let value = counts["missed_calls"], !(value is NSNumber) { return nil }
        }
        var content: [String: String]?
        if let value = notification["content"] {
            guard let object = value as? [String: Any] else { return nil }
            content = object.compactMapValues { $0 as? String }
        }
        var parsedDevices: [Device] = []
        for device in devices {
            guard let appId = device["app_id"] as? String, let pushkey = device["pushkey"] as? String else { return nil }
            var pushkeyTs: Int?
            if let value = device["pushkey_ts"] {
                guard let number = value as? NSNumber, number.doubleValue == number.doubleValue.rounded() else { return nil }
                pushkeyTs = number.intValue
            }
            var data: [String: String]?
            if let value = device["data"] {
                guard let object = value as? [String: Any] else { return nil }
                data = object.compactMapValues { $0 as? String }
            }
            if let tweaks = device["tweaks"], !(tweaks is [String: Any]) { return nil }
            parsedDevices.append(Device(appId: appId, pushkey: pushkey, pushkeyTs: pushkeyTs, data: data))
        }
        return Notification(
            eventId: fields[0].value, roomId: fields[1].value, type: fields[2].value, sender: fields[3].value, prio: fields[4].value,
            unread: unread, content: content, devices: parsedDevices, keys: Set(notification.keys), accepted: false)
    }

    private final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        private let gateway: () -> MatrixPushGateway?
        private var head: HTTPRequestHead?
        private var body = Data()

        init(gateway: @escaping () -> MatrixPushGateway?) {
            self.gateway = gateway
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                body = Data()
            case .body(let buffer):
                body.append(contentsOf: buffer.readableBytesView)
            case .end:
                guard let head, let gateway = gateway() else { return }
                guard let (status, json) = gateway.answer(method: head.method, uri: head.uri, body: body) else { return }  // hang
                var headers = HTTPHeaders()
                headers.add(name: "Content-Type", value: "application/json")
                headers.add(name: "Content-Length", value: String(json.utf8.count))
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: headers))), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: json)))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
