import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging

/// Builds a runnable Pigeon server.
public enum PigeonApplication {
    /// The Hummingbird application for `configuration`: HTTP routes, the WebSocket endpoint, and the
    /// processor, typing and housekeeping services. Opening the data files (or connecting to PostgreSQL and Redis) and migrating happen here, before
    /// the server accepts anything.
    ///
    /// Run it with `runService()` (graceful shutdown on SIGINT/SIGTERM: stop accepting, close streams,
    /// drain the buffer, exit) or inside a `ServiceGroup`.
    public static func make(configuration: ServerConfiguration, logger: Logger) async throws -> Application<RouterResponder<PigeonRequestContext>> {
        ConnectionDescriptorLimit.raise(logger: logger)
        let core = try await PigeonCore(configuration: configuration, logger: logger)
        if configuration.isOpenRegistrationEnabled { core.warnOpenRegistration() }
        let router = Router(context: PigeonRequestContext.self)
        router.middlewares.add(ErrorMiddleware())
        core.addDeviceRoutes(to: router)
        core.addRoutes(to: router)
        core.addStreamRoutes(to: router)
        core.addOperationsRoutes(to: router)
        core.addAdminRoutes(to: router)
        let webSocketResponder = core.makeWebSocketRouter().buildResponder()
        let limits = configuration.connectionLimits
        // The connection guard keeps the idle and head deadlines (Hummingbird's idle timeout would only start after
        // the first head); the parser's own limits are a backstop for heads that arrive pipelined behind a request.
        let channelConfiguration = HTTP1WebSocketUpgradeChannel.Configuration(
            http1: .init(
                idleTimeout: nil,
                httpDecoderConfiguration: .init(
                    maxHeaderFieldSize: limits.maxHeaderBytes, maxHeaderListSize: limits.maxHeaderBytes, maxHeaderFieldCount: limits.maxHeaderCount)),
            ws: .init(maxFrameSize: 1 << 20, autoPing: .enabled(timePeriod: .seconds(30)), closeTimeout: configuration.streamLimits.closeTimeout, validateUTF8: true))
        return Application(
            router: router,
            server: HTTPServerBuilder { responder in
                ConnectionGuard(
                    base: HTTP1WebSocketUpgradeChannel(
                        responder: responder, webSocketResponder: webSocketResponder, configuration: channelConfiguration),
                    limits: limits, trustedProxies: configuration.trustedProxies, metrics: core.metrics)
            },
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "pigeon"),
            services: core.backendServices + [core.checkpointer].compactMap { $0 } + [core.authenticator, core.housekeeping, core.processor, core.typing],
            logger: logger)
    }
}

/// A built server, ready to run (hides the concrete Hummingbird application type).
public protocol ApplicationRunnable: Sendable {
    /// Runs until SIGINT/SIGTERM, then shuts down gracefully.
    func runService() async throws
}

extension Application: ApplicationRunnable {
    public func runService() async throws {
        try await runService(gracefulShutdownSignals: [.sigterm, .sigint])
    }
}
