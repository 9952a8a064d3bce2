import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// An app backend's webhook endpoint on loopback, for tests: a real HTTP server that keeps every request it got (its
/// headers and raw body) and answers as it is told: `200`, another status (a `500`), or never (a timeout for the
/// server). A rule per request (``answer(with:)``) can answer differently by body, e.g. hang one conversation's events.
public final class WebhookReceiver: Sendable {
    /// How the receiver answers a request.
    public enum Mode: Sendable, Equatable {
        case accept
        case status(Int)
        case hang
        /// `200` with this JSON body (a before-send hook's answer).
        case json(String)
    }

    /// One request as received.
    public struct Request: Sendable {
        public var method: String
        public var uri: String
        /// Header values by lowercased name.
        public var headers: [String: String]
        public var body: Data
        /// What the receiver answered (`nil`: it never did).
        public var answered: Int?

        public var eventId: String? { headers["pigeon-event-id"] }
        public var signature: String? { headers["pigeon-signature"] }
        /// The body as JSON.
        public var json: [String: Any]? { try? JSONSerialization.jsonObject(with: body) as? [String: Any] }
        public var id: String? { json?["id"] as? String }
        public var type: String? { json?["type"] as? String }
        public var data: [String: Any]? { json?["data"] as? [String: Any] }
        public var accepted: Bool { answered.map { (200..<300).contains($0) } ?? false }
    }

    private struct State {
        var mode = Mode.accept
        var rule: (@Sendable (Request) -> Mode?)?
        var received: [Request] = []
    }

    private let state = NIOLockedValueBox(State())
    private let channel: any Channel
    public let port: Int

    public var url: String { "http://127.0.0.1:\(port)/hooks" }

    private init(channel: any Channel, port: Int) {
        self.channel = channel
        self.port = port
    }

    /// Starts a receiver on a free loopback port.
    public static func start() async throws -> WebhookReceiver {
        let box = NIOLockedValueBox<WebhookReceiver?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(Handler(receiver: { box.withLockedValue { $0 } }))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let receiver = WebhookReceiver(channel: channel, port: channel.localAddress?.port ?? 0)
        box.withLockedValue { $0 = receiver }
        return receiver
    }

    public func stop() async {
        try? await channel.close()
    }

    /// How every request is answered from now on (unless the rule says otherwise).
    public func setMode(_ mode: Mode) {
        state.withLockedValue { $0.mode = mode }
    }

    /// A rule asked first for each request: its answer, or nil for the mode's.
    public func answer(with rule: (@Sendable (Request) -> Mode?)?) {
        state.withLockedValue { $0.rule = rule }
    }

    /// Every request received, in arrival order.
    public var received: [Request] { state.withLockedValue { $0.received } }
    /// The requests answered `2xx`, in arrival order.
    public var accepted: [Request] { received.filter(\.accepted) }

    public func reset() {
        state.withLockedValue { $0.received = [] }
    }

    /// The status and body to answer `request` with (`nil`: never).
    fileprivate func reply(_ request: Request) -> (status: Int, body: String, json: Bool)? {
        let mode = state.withLockedValue { state in state.rule?(request) ?? state.mode }
        if case .json(let body) = mode {
            var recorded = request
            recorded.answered = 200
            state.withLockedValue { $0.received.append(recorded) }
            return (200, body, true)
        }
        guard let status = answer(request) else { return nil }
        return (status, status < 300 ? "ok" : "test endpoint failure", false)
    }

    fileprivate func answer(_ request: Request) -> Int? {
        state.withLockedValue { state -> Int? in
            var request = request
            let mode = state.rule?(request) ?? state.mode
            switch mode {
            case .accept: request.answered = 200
            case .status(let code): request.answered = code
            case .hang: request.answered = nil
            case .json: request.answered = 200
            }
            state.received.append(request)
            return request.answered
        }
    }

    private final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        private let receiver: () -> WebhookReceiver?
        private var head: HTTPRequestHead?
        private var body = Data()

        init(receiver: @escaping () -> WebhookReceiver?) {
            self.receiver = receiver
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
                body = Data()
            case .body(let buffer):
                body.append(contentsOf: buffer.readableBytesView)
            case .end:
                guard let head, let receiver = receiver() else { return }
                var headers: [String: String] = [:]
                for (name, value) in head.headers { headers[name.lowercased()] = value }
                let request = Request(method: "\(head.method)", uri: head.uri, headers: headers, body: body, answered: nil)
                guard let (status, text, json) = receiver.reply(request) else { return }  // hang
                var responseHeaders = HTTPHeaders()
                responseHeaders.add(name: "Content-Type", value: json ? "application/json" : "text/plain")
                responseHeaders.add(name: "Content-Length", value: String(text.utf8.count))
                context.write(
                    wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .init(statusCode: status), headers: responseHeaders))), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
