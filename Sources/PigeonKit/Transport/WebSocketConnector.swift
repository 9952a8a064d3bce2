import Foundation
@_spi(WSInternal) import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// Opens a WebSocket and runs a handler on it: hummingbird-websocket's frame handling (pings, the closing
/// handshake, messages across frames) on a connection of PigeonKit's own making, whose end is seen at every stage.
///
/// hummingbird-websocket's `WebSocketClient` allows remote half-closure on its connections, and SwiftNIO's client
/// upgrade handler passes an end of input on without acting on it (its server-side twin fails the upgrade since
/// apple/swift-nio#2756). A server, proxy or network that closed the connection before the `101` answer left the
/// upgrade waiting forever: the attempt lasted the whole connect timeout, then its socket and task leaked. One that
/// closed it just after the `101`, before the WebSocket's handlers were in place, left an open-looking WebSocket on a
/// dead socket until a ping failed (the liveness interval, 15 s by default). Here an end of input closes the
/// connection, so the upgrade fails or the stream ends at once and the client reconnects; and a cancelled attempt
/// closes its connection, so nothing waits on an upgrade that is never answered (a black-holed network).
enum WebSocketConnector {
    /// The server answered the upgrade request without switching protocols (a refusal such as `401`, or a proxy that
    /// blocks WebSockets).
    struct UpgradeDeclined: Error {}

    /// The connection ended (the server, a proxy or the network closed it) before the upgrade completed.
    struct ClosedDuringUpgrade: Error, CustomStringConvertible {
        var description: String { "the connection closed during the upgrade" }
    }

    /// What the handler gets besides the socket.
    struct Context: WebSocketContext {
        let logger: Logger
    }

    /// How a connection is made and kept.
    struct Settings {
        /// Request headers besides the upgrade's own (`Authorization`).
        var headers: [(name: String, value: String)] = []
        /// How long the TCP connection may take.
        var connectTimeout: Duration
        /// Interval of the client's pings; a ping still unanswered at the next one closes the connection.
        var pingInterval: Duration
        /// How long the closing handshake may take before the socket is closed regardless.
        var closeTimeout: Duration
        /// The largest frame read or written.
        var maxFrameSize: Int
    }

    /// Connects to `url` (`http`/`ws`, or `https`/`wss` with TLS), upgrades, and runs `handler` until it returns and the
    /// closing handshake is done. Throws ``UpgradeDeclined`` when the server does not switch protocols, and the
    /// connection's error when it fails or ends before the upgrade completes.
    static func run(
        url: String, settings: Settings, logger: Logger, handler: @escaping WebSocketDataHandler<Context>
    ) async throws {
        guard let target = Target(url) else { throw PigeonClientError(.network, "\(url) is not a WebSocket URL") }
        let tls = try target.secure ? tlsContext.get() : nil
        let requestHead = target.requestHead(headers: settings.headers)
        let maxFrameSize = settings.maxFrameSize
        let (channel, upgrade) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(settings.connectTimeout))
            // The point of this type: an end of input closes the connection (hummingbird-websocket allows half-closure).
            .channelOption(.allowRemoteHalfClosure, value: false)
            .connect(host: target.host, port: target.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: target.serverName))
                    }
                    let upgrade = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: upgradeConfiguration(requestHead: requestHead, maxFrameSize: maxFrameSize))
                    return (channel, upgrade)
                }
            }
        let webSocket: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
        do {
            // A future ignores cancellation: closing the connection is what fails a pending upgrade.
            let upgraded = try await withTaskCancellationHandler {
                try await upgrade.get()
            } onCancel: {
                channel.close(promise: nil)
            }
            guard let upgraded else { throw UpgradeDeclined() }
            webSocket = upgraded
        } catch {
            try? await channel.close()
            // What the upgrade handler fails with when the connection closes under it.
            if let error = error as? ChannelError, [.inappropriateOperationForState, .ioOnClosedChannel, .eof].contains(error) {
                throw ClosedDuringUpgrade()
            }
            throw error
        }
        _ = try await WebSocketHandler.handle(
            type: .client,
            configuration: .init(
                extensions: [], autoPing: .enabled(timePeriod: settings.pingInterval), closeTimeout: settings.closeTimeout,
                validateUTF8: false, maxFrameSize: maxFrameSize),
            asyncChannel: webSocket, context: Context(logger: logger), handler: handler)
    }

    /// The upgrade: a WebSocket wrapped for async use, or `nil` (and the connection closed) when the server answered
    /// without switching protocols.
    private static func upgradeConfiguration(
        requestHead: HTTPRequestHead, maxFrameSize: Int
    ) -> NIOUpgradableHTTPClientPipelineConfiguration<NIOAsyncChannel<WebSocketFrame, WebSocketFrame>?> {
        let upgrader = NIOTypedWebSocketClientUpgrader<NIOAsyncChannel<WebSocketFrame, WebSocketFrame>?>(
            maxFrameSize: maxFrameSize,
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel)
                }
            })
        var configuration = NIOUpgradableHTTPClientPipelineConfiguration(
            upgradeConfiguration: NIOTypedHTTPClientUpgradeConfiguration(
                upgradeRequestHead: requestHead, upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.close(promise: nil)
                    return channel.eventLoop.makeSucceededFuture(nil)
                }))
        // Bytes after the `101` are WebSocket frames, for the frame decoder.
        configuration.leftOverBytesStrategy = .forwardBytes
        return configuration
    }

    /// One TLS context for every connection (building one loads the system's trust roots).
    private static let tlsContext = Result { try NIOSSLContext(configuration: .makeClientConfiguration()) }

    /// Where a WebSocket URL points.
    private struct Target {
        var secure: Bool
        var host: String
        var port: Int
        /// The path and query, as sent.
        var uri: String
        var explicitPort: Bool

        init?(_ url: String) {
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
                let host = components.host, !host.isEmpty
            else { return nil }
            switch scheme {
            case "http", "ws": secure = false
            case "https", "wss": secure = true
            default: return nil
            }
            self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
            port = components.port ?? (secure ? 443 : 80)
            explicitPort = components.port != nil
            let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            uri = path + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
        }

        /// The name sent for TLS's server name indication: none for an IP address, which SNI does not allow.
        var serverName: String? {
            (try? SocketAddress(ipAddress: host, port: port)) == nil ? host : nil
        }

        func requestHead(headers: [(name: String, value: String)]) -> HTTPRequestHead {
            var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: uri)
            let name = host.contains(":") ? "[\(host)]" : host
            head.headers.add(name: "Host", value: explicitPort ? "\(name):\(port)" : name)
            for (field, value) in headers { head.headers.add(name: field, value: value) }
            return head
        }
    }
}
