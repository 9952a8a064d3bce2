import HummingbirdCore
import Logging
import NIOCore

/// Wraps a server child channel so that graceful shutdown also closes connections that never sent a byte.
///
/// Hummingbird's HTTP/WebSocket channel installs its connection-state handler (which closes idle connections
/// when the server quiesces) only once a request head arrives; a client that opened a connection and sent
/// nothing (a connection pool's spare) would otherwise hold the shutdown forever.
struct CloseIdleConnectionsOnShutdown<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(CloseIfSilentOnQuiesce(), position: .first)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// Closes the connection on `ChannelShouldQuiesceEvent` if nothing was read yet; steps aside at the first read.
final class CloseIfSilentOnQuiesce: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}
