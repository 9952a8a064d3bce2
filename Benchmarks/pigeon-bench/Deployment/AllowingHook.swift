import NIOCore
import NIOHTTP1
import NIOPosix
import PigeonBenchSupport

/// A before-send hook that allows every message at once: a loopback HTTP/1.1 server (keep-alive) answering each request
/// `200 {"action":"allow"}` as soon as its body has arrived, without checking the signature. What asking the app's
/// backend costs a send, beyond the backend's own work, is measured against it (`--allowing-hook`).
final class AllowingHook: Sendable {
    let port: Int
    private let channel: any Channel

    private init() throws {
        channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 1024)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap { channel.pipeline.addHandler(Handler()) }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
        port = channel.localAddress?.port ?? 0
    }

    /// The one hook of a run (every spawned server points at it; it lives as long as the process).
    static let shared = Result { try AllowingHook() }

    /// The `pigeon-server` arguments that point it here.
    var serverArguments: [String] {
        ["--before-send-hook", "http://127.0.0.1:\(port)/hook", "--webhook-secret", "pigeon-bench-hook-secret"]
    }

    private final class Handler: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private static let answer = #"{"action":"allow"}"#

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .end = unwrapInboundIn(data) else { return }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "Content-Length", value: String(Self.answer.utf8.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: Self.answer)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
