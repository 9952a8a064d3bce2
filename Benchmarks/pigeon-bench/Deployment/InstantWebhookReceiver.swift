import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A webhook endpoint on loopback that answers every request `204` at once and counts them: what recording and
/// sending webhook events costs the hot path is measured against it (`--webhook-receiver`).
final class InstantWebhookReceiver: Sendable {
    let port: Int
    private let channel: any Channel
    private let count = NIOLockedValueBox(0)

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// The one receiver of a run (every spawned server points at it; it lives as long as the process).
    static let shared = Result { try start() }

    private static func start() throws -> InstantWebhookReceiver {
        let box = NIOLockedValueBox<InstantWebhookReceiver?>(nil)
        let channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 1024)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(Handler { box.withLockedValue { $0 }?.count.withLockedValue { $0 += 1 } })
                }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
        let receiver = InstantWebhookReceiver(channel: channel)
        box.withLockedValue { $0 = receiver }
        return receiver
    }

    /// Requests answered so far.
    var received: Int { count.withLockedValue { $0 } }

    /// The `pigeon-server` arguments that point it here (every event type).
    var serverArguments: [String] {
        [
            "--webhook", "http://127.0.0.1:\(port)/hooks", "--webhook-secret", "bench-webhook-secret",
            "--webhook-events", "message.stored,message.edited,message.deleted,reaction,members.changed,conversation.created,device.registered,device.revoked,receipt.read",
        ]
    }

    private final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        private let counted: () -> Void

        init(counted: @escaping () -> Void) {
            self.counted = counted
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .end = unwrapInboundIn(data) else { return }
            counted()
            var headers = HTTPHeaders()
            headers.add(name: "Content-Length", value: "0")
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .noContent, headers: headers))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
