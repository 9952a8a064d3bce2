import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonRedis
import PigeonRedisBuffer
import PigeonSQLite
import ServiceLifecycle

/// The server's parts, opened and wired together once per server instance (``open(configuration:logger:)``); the
/// controllers get the parts they use, not this.
final class PigeonCore: Sendable {
    let configuration: ServerConfiguration
    let logger: Logger
    let metrics: PigeonMetrics
    let hub: StreamHub
    /// How committed events, presence and typing reach the devices of every node.
    let fanout: any Fanout
    let store: any MessageStore
    /// The uploads (API.md 1.2): beside the store, in the same database.
    let attachments: any AttachmentStore
    /// The same store's push registrations and owed pushes.
    let pushStore: any PushStore
    /// Sends the pushes owed to devices with no stream open (nil without `--push-gateway`).
    let pushDispatcher: PushDispatcher?
    /// The same store's webhook outbox, and what sends it (nil without `--webhook`).
    let webhookStore: any WebhookStore
    let webhookDispatcher: WebhookDispatcher?
    /// Where an accepted message is written durably: straight into the embedded store, or into a buffer that the
    /// processor empties (``PigeonCore/open(configuration:logger:)`` chooses, once).
    let accept: any AcceptPath
    let ingest: Ingest
    /// The app's before-send hook (nil without `--before-send-hook`), which the ingest asks.
    let beforeSendHook: BeforeSendHook?
    let authenticator: Authenticator
    /// When each device was last seen, written off the requests' path.
    let activity: DeviceActivity
    /// Registrations per address, conversations and stored bytes per user.
    let abuse: AbuseGuard
    /// Moves buffered messages into the store; `nil` on the direct path, where there is no buffer.
    let processor: Processor?
    let typing: TypingTracker
    let housekeeping: Housekeeping
    /// Erases the attachments no message carries.
    let attachmentSweeper: AttachmentSweeper
    /// Background WAL checkpoints of the embedded files (nil when neither store nor buffer is embedded).
    let checkpointer: WALCheckpointer?
    /// Services of the production backends (connection pools, event tail, buffer heartbeats), to run before the
    /// processor so they stop after it.
    let backendServices: [any Service]
    /// This node's name among the nodes sharing the production backends.
    let nodeId: String
    /// When this node started (milliseconds since the epoch).
    let startedAt: Int64
    /// The shared backends that know the deployment's nodes by their heartbeats (none for the embedded default).
    let nodeRosters: [any NodeRoster]
    /// The once-a-second samples of the operator's page.
    let sampler: StatisticsSampler

    /// Opens the configured store and buffer (creating or migrating the embedded files, connecting to PostgreSQL and
    /// Redis and migrating) and the token keys, then wires the parts: everything the server needs before it accepts a
    /// connection. The initialiser only wires; all startup I/O is here.
    static func open(configuration: ServerConfiguration, logger: Logger) async throws -> PigeonCore {
        if let problem = configuration.push.problem { throw PigeonError.invalid(problem) }
        if let problem = configuration.appBackend.problem { throw PigeonError.invalid(problem) }
        // Claimed before anything acts under it (the store's presence rows, the buffer's leases); released last, or at
        // once when the start fails after the claim (a restart with the same --node-id is not refused until it expires).
        var identity: NodeIdentityLease?
        if case .redis(let url) = configuration.buffer {
            identity = try await Self.claimNodeId(configuration.nodeId, bufferURL: url, logger: logger)
        }
        do {
            return try await open(configuration: configuration, identity: identity, logger: logger)
        } catch {
            await identity?.release()
            throw error
        }
    }

    private static func open(configuration: ServerConfiguration, identity: NodeIdentityLease?, logger: Logger) async throws -> PigeonCore {
        let metrics = PigeonMetrics()
        let hub = StreamHub()
        let dataDirectory = URL(fileURLWithPath: configuration.dataDirectory)
        var sqliteFiles: [String] = []
        var backendServices: [any Service] = []
        var nodeRosters: [any NodeRoster] = []
        // An embedded store or buffer lives in the data directory: claimed before anything in it is created or read,
        // held until the server has stopped (the first service, so the last to stop).
        if configuration.store == .embedded || configuration.buffer == .embedded {
            let claim = try DataDirectoryLock(
                directory: configuration.dataDirectory, holder: "pigeon-server (\(configuration.host):\(configuration.port))")
            backendServices.append(DataDirectoryClaim(lock: claim))
        }
        let nodeId: String
        if let identity {
            nodeId = identity.nodeId
            backendServices.append(identity)
        } else {
            nodeId =
                try configuration.nodeId
                ?? (configuration.isEmbedded ? Self.persistentNodeId(dataDirectory: dataDirectory) : "node-" + Identifiers.randomHex(bytes: 8))
        }
        let store: any MessageStore
        let pushStore: any PushStore
        let webhookStore: any WebhookStore
        // The webhook events the store records with what they report; none without `--webhook`.
        let webhooks = WebhookOutbox(typeNames: configuration.appBackend.enabledWebhookEvents)
        let attachments: any AttachmentStore
        let fanout: any Fanout
        var sqliteStore: SQLiteMessageStore?
        let local = LocalFanout(hub: hub)
        switch configuration.store {
        case .embedded:
            let path = dataDirectory.appendingPathComponent("store.sqlite").path
            let opened = try SQLiteMessageStore(
                path: path, durable: configuration.durable, fanout: local, faultInjector: configuration.processingFaultInjector, webhooks: webhooks,
                cipher: configuration.atRest)
            (store, fanout, sqliteStore) = (opened, local, opened)
            (pushStore, webhookStore) = (opened.push, opened.webhookDeliveries)
            sqliteFiles.append(path)
            attachments = try SQLiteAttachmentStore(
                messageStore: opened, directory: dataDirectory.appendingPathComponent("attachments"), durable: configuration.durable, logger: logger)
        case .postgres(let url):
            let opened = try await PostgresMessageStore.open(
                url: url, local: local, faultInjector: configuration.processingFaultInjector, logger: logger, nodeId: nodeId,
                stageTimer: metrics.stageTimer, clock: configuration.clock, webhooks: webhooks, cipher: configuration.atRest)
            (store, fanout) = (opened, opened.fanout)
            (pushStore, webhookStore) = (opened.push, opened.webhookDeliveries)
            attachments = PostgresAttachmentStore(messageStore: opened, logger: logger)
            backendServices.append(opened)
            nodeRosters.append(opened.fanout)
        }
        let appBackend = configuration.appBackend
        store.setConsentRules(ConsentRules(invitations: appBackend.consent == .invites, strangerAddsPerHour: appBackend.strangerAddsPerHour))
        // Which devices are connected to which node (`recipientsOnline` counts every node's).
        hub.observePresence { [fanout] device, online in fanout.devicePresence(device, online: online) }
        // The accept path, chosen once: direct (the embedded store writes an accepted message at once, one durable write,
        // no processor) or buffered (a buffer, and the processor that empties it into the store).
        let accept: any AcceptPath
        var buffer: (any IngestBuffer)?
        switch configuration.buffer {
        case .embedded:
            let path = dataDirectory.appendingPathComponent("buffer.sqlite").path
            if let sqliteStore, !configuration.separateEmbeddedBuffer {
                // A buffer file left by a separate-buffer run is drained into the store first, then never appended to.
                if FileManager.default.fileExists(atPath: path) {
                    try await drainLeftoverBuffer(path: path, store: sqliteStore, metrics: metrics, configuration: configuration, logger: logger)
                }
                accept = DirectAcceptPath(store: sqliteStore)
            } else {
                let embedded = try EmbeddedBuffer(path: path, durable: configuration.durable, cipher: configuration.atRest)
                (accept, buffer) = (embedded, embedded)
                sqliteFiles.append(path)
            }
        case .redis(let url):
            let redis = try await RedisIngest.open(url: url, nodeId: nodeId, cipher: configuration.atRest, logger: logger)
            (accept, buffer) = (redis.buffer, redis.buffer)
            nodeRosters.append(redis.buffer)
            backendServices.append(redis.service)
        }
        let activity = DeviceActivity(store: store, interval: configuration.deviceLastSeenInterval, logger: logger, clock: configuration.clock)
        let authenticator = try await Authenticator(
            store: store, configuration: configuration.auth, activity: activity, logger: logger, clock: configuration.clock)
        // Every revocation this node acts on (its own and the other nodes'): its tokens are checked against the store again.
        local.observeRevocations { [authenticator] revocation in authenticator.forget(revocation) }
        var pushDispatcher: PushDispatcher?
        if let notifyURL = configuration.push.notifyURL {
            let dispatcher = PushDispatcher(
                store: pushStore, presence: fanout, configuration: configuration.push, notifyURL: notifyURL, metrics: metrics, nodeId: nodeId,
                logger: logger, clock: configuration.clock)
            local.observePublications { [weak dispatcher] in dispatcher?.committed() }
            pushDispatcher = dispatcher
        }
        let webhookDispatcher = Self.webhookDispatcher(
            store: webhookStore, configuration: configuration, metrics: metrics, nodeId: nodeId, local: local, logger: logger)
        return PigeonCore(
            configuration: configuration, logger: logger, metrics: metrics, hub: hub, fanout: fanout, store: store, attachments: attachments,
            accept: accept, buffer: buffer, authenticator: authenticator, activity: activity, sqliteFiles: sqliteFiles, backendServices: backendServices,
            pushStore: pushStore, pushDispatcher: pushDispatcher, webhookStore: webhookStore, webhookDispatcher: webhookDispatcher, nodeId: nodeId,
            nodeRosters: nodeRosters)
    }

    private init(
        configuration: ServerConfiguration, logger: Logger, metrics: PigeonMetrics, hub: StreamHub, fanout: any Fanout,
        store: any MessageStore, attachments: any AttachmentStore, accept: any AcceptPath, buffer: (any IngestBuffer)?, authenticator: Authenticator, activity: DeviceActivity, sqliteFiles: [String],
        backendServices: [any Service], pushStore: any PushStore, pushDispatcher: PushDispatcher?, webhookStore: any WebhookStore,
        webhookDispatcher: WebhookDispatcher?, nodeId: String, nodeRosters: [any NodeRoster]
    ) {
        self.webhookStore = webhookStore
        self.webhookDispatcher = webhookDispatcher
        self.nodeId = nodeId
        self.startedAt = WallClock.nowMillis()
        self.nodeRosters = nodeRosters
        self.sampler = StatisticsSampler(metrics: metrics, buffer: accept, hub: hub, clock: configuration.clock)
        self.pushStore = pushStore
        self.pushDispatcher = pushDispatcher
        self.configuration = configuration
        self.logger = logger
        self.metrics = metrics
        self.hub = hub
        self.fanout = fanout
        self.store = store
        self.attachments = attachments
        self.accept = accept
        self.authenticator = authenticator
        self.activity = activity
        self.abuse = AbuseGuard(limits: configuration.abuseLimits, metrics: metrics)
        let beforeSendHook = BeforeSendHook(configuration: configuration, metrics: metrics, logger: logger)
        self.beforeSendHook = beforeSendHook
        self.ingest = Ingest(
            buffer: accept, store: store, attachments: attachments, metrics: metrics, abuse: abuse, configuration: configuration, hook: beforeSendHook)
        self.processor = buffer.map {
            Processor(buffer: $0, store: store, metrics: metrics, configuration: configuration, logger: logger, clock: configuration.clock)
        }
        self.typing = TypingTracker(fanout: fanout, timeout: configuration.typingTimeout, clock: configuration.clock)
        self.housekeeping = Housekeeping(store: store, configuration: configuration, logger: logger, clock: configuration.clock)
        self.attachmentSweeper = AttachmentSweeper(
            store: attachments, interval: configuration.attachments.sweepInterval, metrics: metrics, logger: logger, clock: configuration.clock)
        self.checkpointer = sqliteFiles.isEmpty ? nil : WALCheckpointer(paths: sqliteFiles, logger: logger)
        self.backendServices = backendServices
    }

    /// What a device may do in a conversation, for the HTTP routes and the WebSocket alike.
    var conversationAccess: ConversationAccess {
        ConversationAccess(
            store: store, abuse: abuse, metrics: metrics, typing: typing, streamLimits: configuration.streamLimits,
            invitesExist: configuration.appBackend.consent == .invites)
    }

    /// Stores what a `buffer.sqlite` left by a server that ran with `--separate-buffer` still holds, before the
    /// direct accept path takes sends (so that a conversation's leftover messages are stored before its new ones). The
    /// drained file is left in place, empty, for a later `--separate-buffer` run. Refuses to start when it cannot be
    /// emptied within the shutdown drain timeout.
    private static func drainLeftoverBuffer(
        path: String, store: SQLiteMessageStore, metrics: PigeonMetrics, configuration: ServerConfiguration, logger: Logger
    ) async throws {
        let leftover = try EmbeddedBuffer(path: path, durable: configuration.durable, cipher: configuration.atRest)
        guard leftover.depth > 0 else { return }
        logger.info("draining the messages left in a separate buffer into the store", metadata: ["path": "\(path)", "depth": "\(leftover.depth)"])
        let processor = Processor(buffer: leftover, store: store, metrics: metrics, configuration: configuration, logger: logger, clock: configuration.clock)
        guard try await processor.drain(within: configuration.shutdownDrainTimeout) else {
            throw PigeonError.overloaded(
                "\(path) still holds \(leftover.depth) messages after \(configuration.shutdownDrainTimeout) of draining; the store refused them (see the log)")
        }
    }

    /// Claims the node's id in the buffer's Redis (``NodeIdentityLease``). An id the operator gave (`explicit`) that
    /// another live process holds refuses the start (``NodeIdentityLease/Held``: one line naming it and when its lease
    /// ends); without one, a random id is drawn, and drawn again in the unlikely case it is held.
    private static func claimNodeId(_ explicit: String?, bufferURL: String, logger: Logger) async throws -> NodeIdentityLease {
        var candidate = explicit ?? "node-" + Identifiers.randomHex(bytes: 8)
        let buffer = try RedisStreamsBuffer.Configuration(url: bufferURL, nodeId: candidate)
        let client = RedisClient(configuration: try RedisConfiguration(url: bufferURL), connectionCount: 1, logger: logger)
        while true {
            do {
                return try await NodeIdentityLease.claim(
                    nodeId: candidate, keyPrefix: buffer.keyPrefix, ttl: buffer.leaseTTL, interval: buffer.heartbeatInterval, client: client,
                    logger: logger)
            } catch is NodeIdentityLease.Held where explicit == nil {
                logger.notice("a random node id was in use; drawing another", metadata: ["nodeId": "\(candidate)"])
                candidate = "node-" + Identifiers.randomHex(bytes: 8)
            } catch {
                await client.shutdown()
                throw error
            }
        }
    }

    /// The node id kept in `<dataDirectory>/node-id` (created with a random one at the first start).
    static func persistentNodeId(dataDirectory: URL) throws -> String {
        let file = dataDirectory.appendingPathComponent("node-id")
        if let text = try? String(contentsOf: file, encoding: .utf8) {
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard ServerConfiguration.isValidNodeId(id) else {
                throw PigeonError.invalid("\(file.path) does not hold a node id (1-64 characters of [A-Za-z0-9._-]); fix or delete it")
            }
            return id
        }
        try FileManager.default.createDirectory(at: dataDirectory, withIntermediateDirectories: true)
        let id = "node-" + Identifiers.randomHex(bytes: 8)
        try (id + "\n").write(to: file, atomically: true, encoding: .utf8)
        return id
    }
}

/// Holds the data directory's ``DataDirectoryLock`` while the server runs and lets it go once everything after it in
/// the service group has stopped (it is the first service, so the last to be shut down).
struct DataDirectoryClaim: Service {
    let lock: DataDirectoryLock

    func run() async throws {
        try? await gracefulShutdown()
        lock.release()
    }
}
