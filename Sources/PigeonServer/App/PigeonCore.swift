import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PigeonProtocol
import ServiceLifecycle

/// The server's parts, wired together once per server instance.
final class PigeonCore: Sendable {
    let configuration: ServerConfiguration
    let logger: Logger
    let metrics: PigeonMetrics
    let hub: StreamHub
    let store: any MessageStore
    let buffer: any IngestBuffer
    let ingest: Ingest
    let authenticator: Authenticator
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
        switch configuration.store {
        case .embedded:
            let path = dataDirectory.appendingPathComponent("store.sqlite").path
            self.store = try SQLiteMessageStore(
                path: path, durable: configuration.durable, sink: hub, faultInjector: configuration.processingFaultInjector)
            sqliteFiles.append(path)
        case .postgres(let url):
            let store = try await PostgresMessageStore.open(
                url: url, sink: hub, faultInjector: configuration.processingFaultInjector, logger: logger)
            self.store = store
            backendServices.append(store)
        }
        switch configuration.buffer {
        case .embedded:
            let path = dataDirectory.appendingPathComponent("buffer.sqlite").path
            self.buffer = try EmbeddedBuffer(path: path, durable: configuration.durable)
            sqliteFiles.append(path)
        case .redis:
            throw PigeonError.invalid("--buffer redis is not supported yet; run with the embedded buffer")
        }
        self.ingest = Ingest(buffer: buffer, store: store, metrics: metrics, configuration: configuration)
        self.authenticator = Authenticator(store: store, jwtSecret: configuration.jwtSecret)
        self.processor = Processor(buffer: buffer, store: store, metrics: metrics, configuration: configuration, logger: logger)
        if let postgres = store as? PostgresMessageStore {
            // Typing reaches devices connected to the other nodes through PostgreSQL notifications.
            postgres.onEphemeralFrame { [hub] frame in hub.publishEphemeral(type: frame.type, json: frame.json, to: frame.users, excluding: nil) }
            // Which devices are connected to which node (`recipientsOnline` counts every node's).
            hub.observePresence { device, online in postgres.devicePresence(device, online: online) }
            self.typing = TypingTracker(hub: hub, timeout: configuration.typingTimeout) { type, json, users in
                postgres.broadcast(PostgresMessageStore.EphemeralFrame(type: type, json: json, users: users))
            }
        } else {
            self.typing = TypingTracker(hub: hub, timeout: configuration.typingTimeout)
        }
        self.housekeeping = Housekeeping(store: store, configuration: configuration, logger: logger)
        self.checkpointer = sqliteFiles.isEmpty ? nil : WALCheckpointer(paths: sqliteFiles, logger: logger)
        self.backendServices = backendServices
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
        let outcome = try await store.recordReceipt(
            conversationId: conversation.id, userId: device.userId, kind: receipt.kind, upToSeq: receipt.upToSeq)
        if let storedAt = outcome.deliveredMessageStoredAt {
            metrics.storedToDelivered.record(.milliseconds(max(0, WallClock.nowMillis() - storedAt)))
        }
        return outcome.watermarks
    }

    /// Validates and pushes a typing change (HTTP and WebSocket).
    func recordTyping(active: Bool, conversationId: String, device: DeviceIdentity) async throws {
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
