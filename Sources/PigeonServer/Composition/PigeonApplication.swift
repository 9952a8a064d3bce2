import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore

/// Builds a runnable Pigeon server.
public enum PigeonApplication {
    /// The Hummingbird application for `configuration`: HTTP routes, the WebSocket endpoint, and the
    /// processor, typing and housekeeping services. Opening the data files (or connecting to PostgreSQL and Redis) and
    /// migrating happen here (``PigeonCore/open(configuration:logger:)``), before the server accepts anything.
    ///
    /// Run it with `runService()` (graceful shutdown on SIGINT/SIGTERM: stop accepting, close streams,
    /// drain the buffer, exit) or inside a `ServiceGroup`.
    public static func make(configuration: ServerConfiguration, logger: Logger) async throws -> Application<PigeonResponder> {
        let cors = try CORSPolicy(origins: configuration.corsOrigins)
        ConnectionDescriptorLimit.raise(logger: logger)
        let core = try await PigeonCore.open(configuration: configuration, logger: logger)
        let access = core.conversationAccess
        let streams = StreamController(
            store: core.store, hub: core.hub, ingest: core.ingest, access: access, authenticator: core.authenticator, metrics: core.metrics,
            streamLimits: configuration.streamLimits, keepAliveInterval: configuration.keepAliveInterval, maxBodyBytes: configuration.maxBodyBytes,
            logger: logger)
        let router = Router(context: PigeonRequestContext.self)
        router.middlewares.add(ErrorMiddleware())
        let v1 = router.group("/v1")
        let devices = DeviceController(
            authenticator: core.authenticator, store: core.store, pushStore: core.pushStore, fanout: core.fanout, abuse: core.abuse,
            metrics: core.metrics, openRegistration: configuration.isOpenRegistrationEnabled, trustedProxies: configuration.trustedProxies,
            maxBodyBytes: configuration.maxBodyBytes, logger: logger)
        devices.addRoutes(to: v1)
        // Routes of a device: the token in the Authorization header...
        let device = v1.group().add(middleware: DeviceAuthenticationMiddleware(authenticator: core.authenticator))
            .group(context: DeviceRequestContext.self)
        devices.addDeviceRoutes(to: device)
        ConversationController(
            store: core.store, ingest: core.ingest, access: access, abuse: core.abuse, maxMembers: configuration.maxMembers,
            maxBodyBytes: configuration.maxBodyBytes
        ).addRoutes(to: device)
        BlockController(store: core.store, abuse: core.abuse).addRoutes(to: device)
        streams.addSyncRoutes(to: device)
        // The server API: the app's backend, with the service credential.
        let serviceCredential = ServiceCredential(
            tokens: [configuration.appBackend.serviceToken, configuration.appBackend.previousServiceToken].compactMap { $0 })
        ServiceController(
            store: core.store, ingest: core.ingest, fanout: core.fanout, maxMembers: configuration.maxMembers, maxBodyBytes: configuration.maxBodyBytes,
            logger: logger
        ).addRoutes(
            to: v1.group("/service", context: ServiceRequestContext.self)
                .add(middleware: ServiceAuthenticationMiddleware(authenticator: core.authenticator, credential: serviceCredential)))
        // ...or, for the streams (a browser's EventSource cannot send a header) and attachment downloads (`<img src>`),
        // in `access_token`.
        let queryDevice = v1.group().add(middleware: DeviceAuthenticationMiddleware(authenticator: core.authenticator, allowQuery: true))
            .group(context: DeviceRequestContext.self)
        streams.addStreamRoutes(to: queryDevice)
        AttachmentController(store: core.attachments, configuration: configuration.attachments, metrics: core.metrics, logger: logger)
            .addRoutes(upload: device, download: queryDevice)
        OperationsController(
            store: core.store, buffer: core.accept, hub: core.hub, metrics: core.metrics,
            metricsToken: configuration.metricsToken.map(OperatorToken.init)
        ).addRoutes(to: router)
        ContractController(availabilities: configuration.contractAvailabilities).addRoutes(to: router)
        // Without an admin token the admin routes do not exist (404).
        if let adminToken = configuration.adminToken.map(OperatorToken.init) {
            let admin = v1.group("/admin").add(middleware: OperatorTokenMiddleware(token: adminToken))
            AdminController(
                store: core.store, attachments: core.attachments, buffer: core.accept, hub: core.hub, fanout: core.fanout, metrics: core.metrics, sampler: core.sampler,
                nodeId: core.nodeId, nodeRosters: core.nodeRosters, startedAt: core.startedAt, logger: logger
            ).addRoutes(to: admin)
            WebhookAdminController(
                store: core.webhookStore, dispatcher: core.webhookDispatcher, configuration: configuration.appBackend, logger: logger
            ).addRoutes(to: admin)
            // The page itself is public; it asks for the token and calls the routes above with it.
            router.get("/admin") { _, _ in AdminPage.response() }
        }
        // The browser SDK is served with and without --web: an app on any origin imports it.
        SDKController().addRoutes(to: router)
        // Without --web the demo page does not exist (404).
        if configuration.webDemo { WebDemoController().addRoutes(to: router) }
        let responder = PigeonResponder(
            router: router.buildResponder(), routeMethods: RouteMethods(router.routes.map { ($0.path, $0.method) }), cors: cors)
        let webSocketResponder = streams.makeWebSocketRouter().buildResponder()
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
            responder: responder,
            server: HTTPServerBuilder { responder in
                ConnectionGuard(
                    base: HTTP1WebSocketUpgradeChannel(
                        responder: responder, webSocketResponder: webSocketResponder, configuration: channelConfiguration),
                    limits: limits, trustedProxies: configuration.trustedProxies, metrics: core.metrics, cors: cors)
            },
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "pigeon"),
            services: core.backendServices + [core.checkpointer].compactMap { $0 } + [core.authenticator, core.activity, core.housekeeping, core.attachmentSweeper]
                + [core.processor].compactMap { $0 } + [core.typing, core.sampler] + [core.pushDispatcher].compactMap { $0 }
                + [core.webhookDispatcher].compactMap { $0 } + [core.beforeSendHook].compactMap { $0 },
            onServerRunning: { channel in
                logOptionalParts(configuration, address: channel.localAddress, logger: logger)
                logPush(configuration.push, logger: logger)
                if configuration.isOpenRegistrationEnabled { warnOpenRegistration(address: channel.localAddress, logger: logger) }
            },
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

/// Where push notifications go (or that none are sent), logged once the server listens: an operator sees at start
/// whether the gateway they configured is the one in use. A URL's user and password are left out.
/// One line once the server listens: where, on which store and buffer, and which optional parts are on (the web
/// page, the operator's page, webhooks, the before-send hook, the server API, push, encryption at rest, metrics).
private func logOptionalParts(_ configuration: ServerConfiguration, address: SocketAddress?, logger: Logger) {
    let port = address?.port ?? configuration.port
    let base = "http://\(configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host):\(port)"
    let appBackend = configuration.appBackend
    func origin(_ url: String?) -> String? {
        guard let url, let components = URLComponents(string: url), let host = components.host else { return url == nil ? nil : "on" }
        return "\(components.scheme ?? "http")://\(host)\(components.port.map { ":\($0)" } ?? "")"
    }
    let store: String
    switch configuration.store {
    case .embedded: store = "embedded (SQLite in \(configuration.dataDirectory))"
    case .postgres: store = "PostgreSQL"
    }
    let buffer: String
    switch configuration.buffer {
    case .embedded: buffer = configuration.store == .embedded && !configuration.separateEmbeddedBuffer ? "none (one durable write into the store)" : "embedded"
    case .redis: buffer = "Redis Streams"
    }
    let metadata: Logger.Metadata = [
        "address": "\(base)",
        "store": "\(store)",
        "buffer": "\(buffer)",
        "webPage": "\(configuration.webDemo ? base + "/" : "off (--web)")",
        "adminPage": "\(configuration.adminToken != nil ? base + "/admin" : "off (--admin-token)")",
        "webhooks": "\(origin(appBackend.webhookURL) ?? "off (--webhook)")",
        "beforeSendHook": "\(origin(appBackend.beforeSendHookURL) ?? "off (--before-send-hook)")",
        "serverAPI": "\(appBackend.serviceToken != nil ? "on" : "off (--service-token)")",
        "push": "\(origin(configuration.push.notifyURL) ?? "off (--push-gateway)")",
        "encryptionAtRest": "\(configuration.atRest.isOn ? "on" : "off (--encryption-key-file)")",
        "metrics": "\(configuration.metricsToken != nil ? "token required" : "open")",
        "fsync": "\(configuration.durable ? "on" : "off (--no-fsync)")",
    ]
    logger.info("pigeon-server listening", metadata: metadata)
}

private func logPush(_ push: PushConfiguration, logger: Logger) {
    guard let notifyURL = push.notifyURL else {
        logger.info("push notifications off (no --push-gateway): devices' registrations are kept, nothing is sent")
        return
    }
    var shown = URLComponents(string: notifyURL)
    shown?.user = nil
    shown?.password = nil
    logger.info(
        "push notifications through a Matrix push gateway",
        metadata: ["gateway": "\(shown?.string ?? notifyURL)", "includeBody": "\(push.includeBody)"])
}

/// The warning logged once the server listens (on `address`, the one it bound) while open registration is on.
private func warnOpenRegistration(address: SocketAddress?, logger: Logger) {
    logger.warning(
        "open registration is on: anyone who reaches this server can register a new userId's first device (further devices need a token of the user's devices); turn it off with --no-open-registration and mint JWTs in your backend",
        metadata: ["address": "\(address.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" } ?? "?")"])
}
