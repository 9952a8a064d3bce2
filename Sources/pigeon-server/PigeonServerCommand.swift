import ArgumentParser
import Foundation
import Logging
import PigeonServer

@main
struct PigeonServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pigeon-server",
        abstract: "Pigeon: reliable message delivery for chat apps.",
        subcommands: [Serve.self, Contract.self, Backup.self, Restore.self, Rekey.self],
        defaultSubcommand: Serve.self)
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the server. Without --store/--buffer it runs the embedded default (SQLite under --data-dir).",
        discussion: "PIGEON_HOST, PIGEON_PORT, PIGEON_DATA_DIR, PIGEON_STORE, PIGEON_BUFFER, PIGEON_NODE_ID, PIGEON_LOG_LEVEL, PIGEON_JWT_SECRET, PIGEON_ADMIN_TOKEN, PIGEON_CORS_ORIGINS and PIGEON_WEB set the same; flags win.")

    @OptionGroup(title: "Where it listens and keeps its data")
    var listen: ListenOptions

    @OptionGroup(title: "Store, buffer and processing")
    var storage: StorageOptions

    @OptionGroup(title: "Registration and the operator")
    var access: AccessOptions

    @OptionGroup(title: "Device tokens")
    var auth: AuthOptions

    @OptionGroup(title: "Connection limits")
    var connections: ConnectionOptions

    @OptionGroup(title: "Stream limits")
    var streams: StreamOptions

    @OptionGroup(title: "Abuse limits")
    var abuse: AbuseOptions

    @OptionGroup(title: "Push notifications")
    var push: PushOptions

    @OptionGroup(title: "Browsers")
    var web: WebOptions

    @OptionGroup(title: "The app's backend: webhooks, before-send hook, server API, consent")
    var appBackend: AppBackendOptions

    @OptionGroup(title: "Encryption at rest")
    var atRest: AtRestOptions

    func validate() throws {
        if let port = listen.port, !(0...65535).contains(port) { throw ValidationError("--port must be 0-65535") }
        guard storage.maxBuffered > 0, storage.batchSize > 0, storage.processingConcurrency > 0, storage.maxAttempts > 0, storage.eventRetentionHours > 0 else {
            throw ValidationError(
                "--max-buffered, --batch-size, --processing-concurrency, --max-attempts and --event-retention-hours must be positive")
        }
        if access.noOpenRegistration && access.openRegistration { throw ValidationError("--open-registration and --no-open-registration exclude each other") }
        guard storage.rateLimit >= 0, storage.rateLimitBurst >= 1 else { throw ValidationError("--rate-limit must be ≥ 0 and --rate-limit-burst ≥ 1") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        var configuration = ServerConfiguration()
        configuration.host = listen.host ?? environment["PIGEON_HOST"] ?? configuration.host
        if let port = try listen.port ?? environment["PIGEON_PORT"].map(Self.parsePort) { configuration.port = port }
        configuration.dataDirectory = listen.dataDir ?? environment["PIGEON_DATA_DIR"] ?? configuration.dataDirectory
        configuration.store = try Self.parseStore(storage.store ?? environment["PIGEON_STORE"])
        configuration.buffer = try Self.parseBuffer(storage.buffer ?? environment["PIGEON_BUFFER"])
        let levelName = listen.logLevel ?? environment["PIGEON_LOG_LEVEL"] ?? "info"
        guard let level = Logger.Level(rawValue: levelName.lowercased()) else {
            throw ValidationError("unknown log level '\(levelName)'")
        }
        configuration.logLevel = level
        configuration.durable = !storage.noFsync
        configuration.separateEmbeddedBuffer = storage.separateBuffer
        configuration.rateLimitPerDevice = storage.rateLimit
        configuration.rateLimitBurst = storage.rateLimitBurst
        configuration.maxBufferedMessages = storage.maxBuffered
        configuration.batchSize = storage.batchSize
        configuration.processingConcurrency = storage.processingConcurrency
        configuration.maxAttempts = storage.maxAttempts
        configuration.eventRetention = .seconds(storage.eventRetentionHours * 3600)
        configuration.nodeId = storage.nodeId ?? environment["PIGEON_NODE_ID"]
        if let id = configuration.nodeId, !ServerConfiguration.isValidNodeId(id) {
            throw ValidationError("the node id must be 1-64 characters of [A-Za-z0-9._-]")
        }
        configuration.adminToken = access.adminToken ?? environment["PIGEON_ADMIN_TOKEN"]
        if configuration.adminToken?.isEmpty == true { throw ValidationError("the admin token must not be empty") }
        try auth.apply(to: &configuration, environment: environment)
        try connections.apply(to: &configuration, environment: environment)
        try streams.apply(to: &configuration, environment: environment)
        try abuse.apply(to: &configuration, environment: environment)
        try push.apply(to: &configuration, environment: environment)
        try web.apply(to: &configuration, environment: environment)
        try appBackend.apply(to: &configuration, environment: environment)
        try atRest.apply(to: &configuration, environment: environment)
        if access.openRegistration { configuration.openRegistration = true }
        if access.noOpenRegistration { configuration.openRegistration = false }

        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        var logger = Logger(label: "pigeon")
        logger.logLevel = level
        // Nothing is created before the address is known to be free: a refused start leaves no data directory behind.
        let dataDirectoryExisted = FileManager.default.fileExists(atPath: configuration.dataDirectory)
        let app: any ApplicationRunnable
        do {
            try await ListenCheck.checkFree(host: configuration.host, port: configuration.port)
            app = try await PigeonApplication.make(configuration: configuration, logger: logger)
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(String(reflecting: error))"])
            throw ExitCode.failure
        }
        logger.info(
            "pigeon-server starting",
            metadata: ["address": "\(configuration.host):\(configuration.port)", "dataDir": "\(configuration.dataDirectory)"])
        let signals = Self.logStopSignals(logger)
        defer { signals.forEach { $0.cancel() } }
        do {
            try await app.runService()
        } catch {
            // Another process bound the address between the check and the server's own bind.
            guard let refusal = ListenCheck.refusal(for: error, host: configuration.host, port: configuration.port) else { throw error }
            if !dataDirectoryExisted { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
            logger.critical("cannot start", metadata: ["error": "\(refusal)"])
            throw ExitCode.failure
        }
        logger.info("pigeon-server stopped")
    }

    /// Logs SIGTERM and SIGINT when they arrive (the graceful shutdown they start is the service group's).
    static func logStopSignals(_ logger: Logger) -> [any DispatchSourceSignal] {
        [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")].map { signal, name in
            let source = DispatchSource.makeSignalSource(signal: signal, queue: .global())
            source.setEventHandler {
                logger.notice("\(name) received: stopping gracefully (no new connections; streams closed; what was accepted is stored)")
            }
            source.resume()
            return source
        }
    }

    static func parsePort(_ text: String) throws -> Int {
        guard let port = Int(text), (0...65535).contains(port) else { throw ValidationError("PIGEON_PORT must be 0-65535") }
        return port
    }

    static func parseStore(_ text: String?) throws -> ServerConfiguration.StoreBackend {
        guard let text, text != "embedded" else { return .embedded }
        guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") else {
            throw ValidationError("--store must be 'embedded' or a postgres:// URL")
        }
        return .postgres(text)
    }

    static func parseBuffer(_ text: String?) throws -> ServerConfiguration.BufferBackend {
        guard let text, text != "embedded" else { return .embedded }
        guard text.hasPrefix("redis://") else { throw ValidationError("--buffer must be 'embedded' or a redis:// URL") }
        return .redis(text)
    }
}

/// `serve`'s options of where it listens and keeps its data, shown first in `--help`.
struct ListenOptions: ParsableArguments {
    @Option(help: "Address to listen on (default 127.0.0.1).")
    var host: String?

    @Option(help: "Port to listen on (default 8080; 0 picks a free one).")
    var port: Int?

    @Option(name: .customLong("data-dir"), help: "Directory of the embedded store and buffer (default ./pigeon-data).")
    var dataDir: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical (default info).")
    var logLevel: String?
}

/// `serve`'s options of the store, the ingest buffer and processing.
struct StorageOptions: ParsableArguments {
    @Option(help: "Store: 'embedded' (SQLite, default) or a postgres:// URL.")
    var store: String?

    @Option(help: "Ingest buffer: 'embedded' (default) or a redis:// URL. With the embedded store, 'embedded' writes a send straight into the store (one durable write per message).")
    var buffer: String?

    @Flag(
        name: .customLong("separate-buffer"),
        help: "With the embedded store and buffer: keep accepted messages in a separate SQLite buffer and store them in batches (two durable writes per message).")
    var separateBuffer = false

    @Option(name: .customLong("node-id"), help: "This node's name among several sharing Redis and PostgreSQL, claimed in Redis while it runs (default: a random one per start; embedded: kept in <data-dir>/node-id).")
    var nodeId: String?

    @Flag(name: .customLong("no-fsync"), help: "Do not fsync commits: a ✓ survives a crash of the process but not of the machine.")
    var noFsync = false

    @Option(name: .customLong("rate-limit"), help: "Sends per second per device; 0 turns the limit off.")
    var rateLimit: Double = 0

    @Option(name: .customLong("rate-limit-burst"), help: "Burst size of the per-device rate limit.")
    var rateLimitBurst: Double = 100

    @Option(name: .customLong("max-buffered"), help: "Unprocessed messages beyond which sends answer 503 overloaded.")
    var maxBuffered: Int = 100_000

    @Option(name: .customLong("batch-size"), help: "Messages stored per processing transaction at most.")
    var batchSize: Int = 1_000

    @Option(name: .customLong("processing-concurrency"), help: "Store batches in flight at once, each of another buffer partition (Redis buffer).")
    var processingConcurrency: Int = 8

    @Option(name: .customLong("max-attempts"), help: "Processing attempts before a message is dead-lettered.")
    var maxAttempts: Int = 3

    @Option(name: .customLong("event-retention-hours"), help: "How long events stay resumable by cursor (168 = 7 days).")
    var eventRetentionHours: Int = 168
}

/// `serve`'s options of who may register and the operator's token.
struct AccessOptions: ParsableArguments {
    @Flag(name: .customLong("no-open-registration"), help: "Refuse POST /v1/devices (the default with a JWT key).")
    var noOpenRegistration = false

    @Flag(name: .customLong("open-registration"), help: "Allow POST /v1/devices even with a JWT key.")
    var openRegistration = false

    @Option(name: .customLong("admin-token"), help: "Bearer token of the admin routes (dead letters, stats, conversations); also serves the operator's page at /admin (better: PIGEON_ADMIN_TOKEN).")
    var adminToken: String?
}
