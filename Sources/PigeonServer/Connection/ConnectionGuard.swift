import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1

/// Wraps the server's child channel (HTTP/1 with the WebSocket upgrade) with the guard of ``ConnectionLimits``:
/// a ``ConnectionGuardHandler`` first in every connection's pipeline (head deadlines and sizes, closing at graceful
/// shutdown), a ``ConnectionExchangeObserver`` behind the HTTP parser (which also refuses a WebSocket request from an
/// origin `cors` does not allow), and the per-address connection count; and, nearest the socket, the
/// ``FlushCoalescingHandler`` (one flush per event loop turn); and at the end the ``WebSocketUpgradeWatcher``, which
/// puts a ``WebSocketConnection`` into a connection upgraded to a WebSocket.
///
/// Hummingbird's upgradable HTTP/1 pipeline installs its idle handler only after a complete request head and leaves
/// parser errors unanswered; without this guard a connection that never completes a head stays open for ever and
/// holds graceful shutdown.
struct ConnectionGuard<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let limits: ConnectionLimits
    let connections: ConnectionsPerAddress
    let metrics: PigeonMetrics
    let cors: CORSPolicy?

    init(base: Base, limits: ConnectionLimits, trustedProxies: [AddressBlock], metrics: PigeonMetrics, cors: CORSPolicy?) {
        self.base = base
        self.limits = limits
        self.connections = ConnectionsPerAddress(limit: limits.maxConnectionsPerAddress, trustedProxies: trustedProxies)
        self.metrics = metrics
        self.cors = cors
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let refusal = connections.admit(channel) ? nil : ConnectionRefusal.tooManyConnections
        let connectionGuard = ConnectionGuardHandler(limits: limits, metrics: metrics, refusal: refusal)
        do {
            if limits.socketSendBufferBytes > 0 {
                // A fixed send buffer: the kernel's autotuning would let a client that never reads pin megabytes of it.
                try channel.syncOptions?.setOption(ChannelOptions.socketOption(.so_sndbuf), value: SocketOptionValue(limits.socketSendBufferBytes))
            }
            try channel.pipeline.syncOperations.addHandler(connectionGuard, position: .first)
            try channel.pipeline.syncOperations.addHandler(FlushCoalescingHandler(), position: .first)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return base.setup(channel: channel, logger: logger).assumeIsolated().flatMapThrowing { value in
            let decoder = try channel.pipeline.syncOperations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try channel.pipeline.syncOperations.addHandler(
                ConnectionExchangeObserver(connectionGuard: connectionGuard, cors: cors), position: .after(decoder))
            // Behind the upgrade handler: it sees the upgrade complete, before the WebSocket's first frame is read.
            try channel.pipeline.syncOperations.addHandler(WebSocketUpgradeWatcher())
            return value
        }.nonisolated()
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

extension ConnectionGuardHandler {
    /// A future completed once the client of `channel` has closed its side of the connection
    /// (``ConnectionGuardHandler/clientClosed``); the channel's close when it has no guard (any more).
    static func clientClosed(on channel: any Channel) async -> EventLoopFuture<Void> {
        let guarded = try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: ConnectionGuardHandler.self).clientClosed
        }.get()
        return (guarded ?? nil) ?? channel.closeFuture
    }

    /// Makes `refusal` the answer of the WebSocket upgrade under way on `channel`, which the caller refuses
    /// (`.dontUpgrade`); done before it returns, so before the refusal is written. Nothing when `channel` has no guard.
    static func refuseUpgrade(with refusal: ConnectionRefusal, on channel: any Channel) async {
        _ = try? await channel.eventLoop.submit {
            try channel.pipeline.syncOperations.handler(type: ConnectionGuardHandler.self).setUpgradeRefusal(refusal)
        }.get()
    }
}
