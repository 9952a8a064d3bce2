import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// Opens a WebSocket: connects (``ClientConnector``: TLS for `https`/`wss`), sends the upgrade request, and hands the
/// upgraded connection to a ``WebSocketSession``.
///
/// The end of the connection is seen at every stage. SwiftNIO's client upgrade handler passes an end of input on
/// without acting on it, so a server, proxy or network that closed the connection before the `101` answer would
/// leave the upgrade waiting until the connect timeout; one that closed it just after the `101`, before the
/// WebSocket's handlers were in place, would leave an open-looking WebSocket on a dead socket until a ping failed.
/// Here the connection does not allow half-closure: an end of input closes it, so the upgrade fails or the session
/// ends at once and the client reconnects. A cancelled attempt closes its connection, so nothing waits on an upgrade
/// that is never answered (a black-holed network).
enum WebSocketConnector {
    /// The server answered the upgrade request without switching protocols (a refusal such as `401`, or a proxy that
    /// blocks WebSockets).
    struct UpgradeDeclined: Error {}

    /// The connection ended (the server, a proxy or the network closed it) before the upgrade completed.
    struct ClosedDuringUpgrade: Error, CustomStringConvertible {
        var description: String { "the connection closed during the upgrade" }
    }

    /// Connects to `url` (`http`/`ws`, or `https`/`wss` with TLS trusting `trust`) and upgrades; throws
    /// ``UpgradeDeclined`` when the server does not switch protocols, and the connection's error when it fails or ends
    /// before the upgrade completes.
    static func connect(
        url: String, headers: [(name: String, value: String)], trust: TLSTrust, connectTimeout: Duration, maxFrameSize: Int
    ) async throws -> NIOAsyncChannel<WebSocketFrame, WebSocketFrame> {
        guard let target = ServerAddress(url) else { throw PigeonClientError(.network, "\(url) is not a WebSocket URL") }
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: target.uri)
        head.headers.add(name: "Host", value: target.hostHeader)
        for (field, value) in headers { head.headers.add(name: field, value: value) }
        let requestHead = head
        let (channel, upgrade) = try await ClientConnector.connect(to: target, trust: trust, timeout: connectTimeout) { channel in
            channel.eventLoop.makeCompletedFuture {
                let upgrade = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                    configuration: upgradeConfiguration(requestHead: requestHead, maxFrameSize: maxFrameSize))
                return (channel, upgrade)
            }
        }
        do {
            // A future ignores cancellation: closing the connection is what fails a pending upgrade.
            let upgraded = try await withTaskCancellationHandler {
                try await upgrade.get()
            } onCancel: {
                channel.close(promise: nil)
            }
            guard let upgraded else { throw UpgradeDeclined() }
            return upgraded
        } catch {
            try? await channel.close()
            // What the upgrade handler fails with when the connection closes under it.
            if let error = error as? ChannelError, [.inappropriateOperationForState, .ioOnClosedChannel, .eof].contains(error) {
                throw ClosedDuringUpgrade()
            }
            throw error
        }
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
                    // Frames are read ahead in large runs (a resumed stream replays thousands): a low watermark of
                    // two stopped and restarted the socket's reads every few frames.
                    try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                        wrappingChannelSynchronously: channel,
                        configuration: .init(backPressureStrategy: .init(lowWatermark: 256, highWatermark: 1024)))
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
}
