import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PigeonProtocol
import PigeonRedis
import ServiceLifecycle

/// The server's parts, wired together once per server instance.
final class PigeonCore: Sendable {
    let configuration: ServerConfiguration
    let logger: Logger
    let metrics: PigeonMetrics
    let hub: StreamHub
    /// How committed events, presence and typing reach the devices of every node.
    let fanout: any Fanout
    let store: any MessageStore
    let buffer: any IngestBuffer
    let ingest: Ingest
    let authenticator: Authenticator
    /// Registrations per address, conversations and stored bytes per user.
    let abuse: AbuseGuard
    let processor: Processor
    let typing: TypingTracker
    let housekeeping: Housekeeping
    /// Background WAL checkpoints of the embedded files (nil when neither store nor buffer is embedded).
    let checkpointer: WALCheckpointer?
    /// Services of the production backends (connection pools, event tail, buffer heartbeats), to run before the
    /// processor so they stop after it.
    let backendServices: [any Service]

    init(configuration: ServerConfiguration, logger: Logger) async throws {
        self.configuration = configuration
        self.logger = logger
        self.metrics = PigeonMetrics()
        self.hub = StreamHub()
        let dataDirectory = URL(fileURLWithPath: configuration.dataDirectory)
        var sqliteFiles: [String] = []
        var backendServices: [any Service] = []
        let nodeId = try configuration.nodeId ?? Self.persistentNodeId(dataDirectory: dataDirectory)
        var sqliteStore: SQLiteMessageStore?
        switch configuration.store {
        case .embedded:
            let path = dataDirectory.appendingPathComponent("store.sqlite").path
            let fanout = LocalFanout(hub: hub)
            let store = try SQLiteMessageStore(
                path: path, durable: configuration.durable, fanout: fanout, faultInjector: configuration.processingFaultInjector)
            self.store = store
            self.fanout = fanout
            sqliteStore = store
            sqliteFiles.append(path)
        case .postgres(let url):
            let store = try await PostgresMessageStore.open(
                url: url, local: LocalFanout(hub: hub), faultInjector: configuration.processingFaultInjector, logger: logger, nodeId: nodeId,
                stageTimer: metrics.stageTimer)
            self.store = store
            self.fanout = store.fanout
            // Which devices are connected to which node (`recipientsOnline` counts every node's).
            hub.observePresence { [fanout = store.fanout] device, online in fanout.devicePresence(device, online: online) }
            backendServices.append(store)
        }
        switch configuration.buffer {
        case .embedded:
            let path = dataDirectory.appendingPathComponent("buffer.sqlite").path
            if let sqliteStore, !configuration.separateEmbeddedBuffer {
                // One durable write per message; a buffer file left by a separate-buffer run is drained, not appended to.
                let legacy = FileManager.default.fileExists(atPath: path) ? try EmbeddedBuffer(path: path, durable: configuration.durable) : nil
                self.buffer = StoreIngestBuffer(store: sqliteStore, legacy: legacy)
                if legacy != nil { sqliteFiles.append(path) }
            } else {
                self.buffer = try EmbeddedBuffer(path: path, durable: configuration.durable)
                sqliteFiles.append(path)
            }
        case .redis(let url):
            let client = RedisClient(configuration: try RedisConfiguration(url: url), logger: logger)
            do {
                let buffer = try await RedisStreamsBuffer(
                    client: client, configuration: try Self.redisBufferConfiguration(url: url, nodeId: nodeId), logger: logger)
                self.buffer = buffer
                backendServices.append(RedisBufferService(buffer: buffer, client: client))
            } catch {
                await client.shutdown()
                throw error
            }
        }
        self.abuse = AbuseGuard(limits: configuration.abuseLimits, metrics: metrics)
        self.ingest = Ingest(buffer: buffer, store: store, metrics: metrics, abuse: abuse, configuration: configuration)
        self.authenticator = try await Authenticator(store: store, configuration: configuration.auth, logger: logger)
        self.processor = Processor(buffer: buffer, store: store, metrics: metrics, configuration: configuration, logger: logger)
        self.typing = TypingTracker(fanout: fanout, timeout: configuration.typingTimeout)
        self.housekeeping = Housekeeping(store: store, configuration: configuration, logger: logger)
        self.checkpointer = sqliteFiles.isEmpty ? nil : WALCheckpointer(paths: sqliteFiles, logger: logger)
        self.backendServices = backendServices
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

    /// The Redis buffer's options from its URL's query: `prefix`, `partitions`, `lease_ms`, `dedupe_hours`.
    static func redisBufferConfiguration(url: String, nodeId: String) throws -> RedisStreamsBuffer.Configuration {
        let query = try RedisConfiguration(url: url).queryItems
        func integer(_ name: String, _ range: ClosedRange<Int>) throws -> Int? {
            guard let text = query[name] else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw PigeonError.invalid("the Redis URL's \(name) must be an integer from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
            }
            return value
        }
        if let unknown = query.keys.sorted().first(where: { !["prefix", "partitions", "lease_ms", "dedupe_hours"].contains($0) }) {
            throw PigeonError.invalid("the Redis URL has an unknown option '\(unknown)' (known: prefix, partitions, lease_ms, dedupe_hours)")
        }
        var configuration = RedisStreamsBuffer.Configuration(nodeId: nodeId)
        if let prefix = query["prefix"] {
            guard !prefix.isEmpty, prefix.count <= 64, !prefix.contains(where: { $0 == "{" || $0 == "}" || $0.isWhitespace }) else {
                throw PigeonError.invalid("the Redis URL's prefix must be 1-64 characters without braces or spaces")
            }
            configuration.keyPrefix = prefix
        }
        if let partitions = try integer("partitions", 1...1024) { configuration.partitions = partitions }
        if let lease = try integer("lease_ms", 500...600_000) {
            configuration.leaseTTL = .milliseconds(lease)
            configuration.heartbeatInterval = min(configuration.heartbeatInterval, .milliseconds(lease / 4))
        }
        if let hours = try integer("dedupe_hours", 1...24 * 365) { configuration.dedupeTTL = .seconds(hours * 3600) }
        return configuration
    }

    /// The device behind a request's bearer token.
    func authenticate(_ request: Request, allowQuery: Bool = false) async throws -> DeviceIdentity {
        let token = try Authenticator.token(
            authorization: request.headers[.authorization], queryToken: request.uri.queryParameters.get("access_token"),
            allowQuery: allowQuery)
        return try await authenticator.device(token: token)
    }

    /// A conversation id from the path, checked to be a UUID (400) and the caller's (404).
    func memberConversation(_ rawId: String?, device: DeviceIdentity) async throws -> (id: String, members: [String]) {
        guard let rawId, let id = Validation.canonicalUUID(rawId) else { throw PigeonError.invalid("conversation id must be a UUID") }
        guard let members = try await store.members(of: id), members.contains(device.userId) else { throw PigeonError.conversationNotFound }
        return (id, members)
    }

    /// Validates and records a receipt (HTTP and WebSocket).
    func recordReceipt(_ receipt: ReceiptRequest, conversationId: String, device: DeviceIdentity) async throws -> ReceiptResponse {
        let conversation = try await memberConversation(conversationId, device: device)
        guard receipt.upToSeq >= 0 else { throw PigeonError.invalid("upToSeq must be 0 or more") }
        try abuse.checkStorage(of: device.userId)
        let outcome = try await store.recordReceipt(
            conversationId: conversation.id, userId: device.userId, kind: receipt.kind, upToSeq: receipt.upToSeq)
        // A receipt that moves a watermark writes an event row per member (two when read moves delivered too).
        abuse.chargeStorage(of: device.userId, bytes: abuse.storageCost(bytes: 128, members: 2 * conversation.members.count))
        if let storedAt = outcome.deliveredMessageStoredAt {
            metrics.storedToDelivered.record(.milliseconds(max(0, WallClock.nowMillis() - storedAt)))
        }
        return outcome.watermarks
    }

    /// Validates and pushes a typing change (HTTP and WebSocket).
    func recordTyping(active: Bool, conversationId: String, device: DeviceIdentity) async throws {
        let limits = configuration.streamLimits
        if let wait = typing.admit(device, rate: limits.typingPerSecond, burst: limits.typingBurst) {
            metrics.limitHit("typing_rate")
            throw PigeonError(.rateLimited, "too many typing updates from this device; retry in \(wait) s", retryAfter: wait)
        }
        let conversation = try await memberConversation(conversationId, device: device)
        typing.update(conversationId: conversation.id, device: device, active: active, members: conversation.members)
    }

    /// The `cursor` of a stream or sync request (`?cursor=`, or `Last-Event-ID` when `allowHeader`).
    func cursorParameter(_ request: Request, allowHeader: Bool) throws -> String? {
        let query: String? = request.uri.queryParameters.get("cursor")
        let header: String? = allowHeader ? request.headers[HTTPField.Name("Last-Event-ID")!] : nil
        let cursor = query ?? header
        if let cursor, EventCursor.isMalformed(cursor) { throw PigeonError.invalid("cursor is malformed") }
        return cursor
    }
}

/// Runs the Redis buffer's heartbeats and leases; when they end (graceful shutdown releases the leases), closes
/// the Redis connections. Listed before the processor, so it stops after the processor drained.
struct RedisBufferService: Service {
    let buffer: RedisStreamsBuffer
    let client: RedisClient

    func run() async throws {
        do {
            try await buffer.run()
        } catch {
            await client.shutdown()
            throw error
        }
        await client.shutdown()
    }
}
