import Hummingbird
import HummingbirdWebSocket
import NIOCore
import PigeonDomain

/// The request context of every Pigeon route: Hummingbird's core storage, the WebSocket upgrade slot, and
/// the authenticated device once a route or middleware has established it.
public struct PigeonRequestContext: RequestContext, WebSocketRequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<PigeonRequestContext>
    /// The TCP peer (a reverse proxy when there is one: see ``ClientAddress``).
    public let remoteAddress: SocketAddress?
    /// The request's connection (its ``ConnectionGuardHandler`` tells an SSE stream when the client closed it).
    let channel: any Channel
    var device: DeviceIdentity?
    /// When the token that authenticated ``device`` was issued (a JWT's `iat`, seconds; `nil`: opaque or no `iat`).
    var tokenIssuedAt: Int64?
    /// Where a WebSocket's stream starts, fixed before the upgrade is answered (so nothing committed after the
    /// client sees the upgrade can be missed).
    var streamStart: StreamStart?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.remoteAddress = source.channel.remoteAddress
        self.channel = source.channel
        self.device = nil
        self.tokenIssuedAt = nil
        self.streamStart = nil
    }
}
