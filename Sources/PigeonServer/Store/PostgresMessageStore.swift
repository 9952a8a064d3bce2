import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol
import PostgresNIO
import ServiceLifecycle

/// The production store: PostgreSQL through postgres-nio's pooled `PostgresClient`.
///
/// - One transaction per processing batch: the batch's conversations are locked (`FOR UPDATE`, in id order),
///   seqs assigned, messages, dead letters and events inserted with one `UNNEST` statement per table.
/// - The event log is split in partitions (``EventPartitioning`` of the conversation id). A partition's offsets
///   come from its row in `event_partitions`, bumped inside each writing transaction and locked to its commit, so
///   offsets are in commit order within a partition: a reader that sees offset n has seen every lower one. Writers of
///   different partitions share no row and no lock (docs/PRODUCTION.md).
/// - Events reach devices on every node, each exactly once and in offset order per partition: the node that
///   committed them hands them to its sink at once when they follow what it handed over already; otherwise, and
///   for the other nodes' commits, a tail of the events table reads them, woken by local commits, by
///   `NOTIFY pigeon_events_<epoch>` (sent after commit, coalesced) and every second as a safety net.
public final class PostgresMessageStore: MessageStore, Service {
    /// Notification channels are database-wide: they carry the store's epoch, so Pigeon deployments sharing a
    /// database in different schemas never hear each other.
    var notificationChannel: String { "pigeon_events_\(epoch)" }
    var ephemeralChannel: String { "pigeon_ephemeral_\(epoch)" }

    public let epoch: String
    /// Internal for the store contract tests, which inspect the tables.
    let client: PostgresClient
    private let sink: any EventSink
    private let logger: Logger
    private let faultInjector: ProcessingFaultInjector?
    private let membersCache = NIOLockedValueBox([String: [String]]())
    /// How many partitions the event log has (fixed while the node runs).
    public let eventPartitions: Int
    /// Per partition, the last offset handed to the sink (by the committing path or the tail).
    private let handedOver: NIOLockedValueBox<[Int64]>
    private let tailWakeUp = AsyncSignal()
    /// Set after local commits: the other nodes are to be told (one `NOTIFY` at a time, coalesced).
    private let notifyWakeUp = AsyncSignal()
    /// This store instance (one per node) in ephemeral notifications, to skip its own.
    private let nodeId: String
    private let ephemeralOutbox: AsyncStream<EphemeralFrame>.Continuation
    private let ephemeralQueue: AsyncStream<EphemeralFrame>
    private let ephemeralReceiver = NIOLockedValueBox<(@Sendable (EphemeralFrame) -> Void)?>(nil)

    /// Connects, applies migrations and reads the store's identity; ``run()`` must run for queries to be served.
    public static func open(
        url: String, sink: any EventSink, faultInjector: ProcessingFaultInjector? = nil, logger: Logger, maxConnections: Int = 20,
        nodeId: String? = nil
    ) async throws -> PostgresMessageStore {
        let nodeId = nodeId ?? "node-" + Identifiers.randomHex(bytes: 8)
        let parsed = try PostgresURL(url)
        let connection = try await PostgresConnection.connect(configuration: parsed.connectionConfiguration(), id: 1, logger: logger)
        do {
            if let schema = parsed.schema {
                try await connection.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger: logger)
            }
            try await PostgresSchema.migrate(connection, logger: logger)
            let (epoch, partitions) = try await PostgresSchema.applyLayout(
                connection, partitions: parsed.eventPartitions, nodeId: nodeId, logger: logger)
            var head = [Int64](repeating: 0, count: partitions)
            for try await (part, offset) in try await connection.query(
                "SELECT part, last_offset FROM event_partitions WHERE part < \(partitions)", logger: logger
            ).decode((Int32, Int64).self) {
                head[Int(part)] = offset
            }
            try await connection.close()
            let client = PostgresClient(configuration: parsed.clientConfiguration(maxConnections: maxConnections), backgroundLogger: logger)
            return PostgresMessageStore(
                epoch: epoch, head: head, client: client, sink: sink, faultInjector: faultInjector, logger: logger, nodeId: nodeId)
        } catch {
            try? await connection.close()
            throw error
        }
    }

    private init(
        epoch: String, head: [Int64], client: PostgresClient, sink: any EventSink, faultInjector: ProcessingFaultInjector?, logger: Logger,
        nodeId: String
    ) {
        self.epoch = epoch
        self.nodeId = nodeId
        self.client = client
        self.sink = sink
        self.faultInjector = faultInjector
        self.logger = logger
        self.eventPartitions = head.count
        self.handedOver = NIOLockedValueBox(head)
        (self.ephemeralQueue, self.ephemeralOutbox) = AsyncStream.makeStream(of: EphemeralFrame.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    /// Runs the connection pool, the `LISTEN` connection and the event tail until graceful shutdown or cancellation.
    /// List it before the processor among the services, so it stops after the processor drained.
    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.client.run() }
            await cancelWhenGracefulShutdown {
                await withTaskGroup(of: Void.self) { inner in
                    inner.addTask { await self.listen() }
                    inner.addTask { await self.listenForEphemeralFrames() }
                    inner.addTask { await self.tail() }
                    inner.addTask { await self.notifyOtherNodes() }
                    inner.addTask { await self.sendEphemeralFrames() }
                    inner.addTask { await self.maintainPresence() }
                    inner.addTask { await self.writeReceipts() }
                    await inner.waitForAll()
                }
            }
            // The pool stops last: the tail and the listener no longer need it.
            group.cancelAll()
        }
    }

    public func isReady() async -> Bool {
        do {
            return try await withTimeout(.seconds(2)) { [client] in
                try await client.query("SELECT 1").collect().count == 1
            }
        } catch {
            return false
        }
    }

    /// A transaction; the closure's own error is rethrown as it is (not wrapped), after the rollback.
    private func transaction<Result>(_ body: (PostgresConnection) async throws -> sending Result) async throws -> sending Result {
        do {
            return try await client.withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
    }

    // MARK: Devices

    public func registerDevice(userId: String, name: String?, tokenHash: String, rule: DeviceRegistrationRule) async throws -> DeviceIdentity {
        let deviceId = Identifiers.uuidV4()
        try await transaction { connection in
            // One registration of a user at a time, so the count below cannot change before the insert commits.
            try await connection.query("SELECT pg_advisory_xact_lock(hashtextextended(\("pigeon-devices:" + userId), 0))", logger: logger)
            var existing = 0
            for try await count in try await connection.query(
                "SELECT COUNT(*)::BIGINT FROM devices WHERE user_id = \(userId)", logger: logger
            ).decode(Int64.self) { existing = Int(count) }
            if let refusal = rule.refusal(existing: existing) { throw refusal }
            try await connection.query(
                "INSERT INTO devices(id, user_id, name, token_hash, created_at) VALUES (\(deviceId), \(userId), \(name), \(tokenHash), \(WallClock.nowMillis()))",
                logger: logger)
        }
        return DeviceIdentity(userId: userId, deviceId: deviceId)
    }

    public func device(tokenHash: String) async throws -> DeviceIdentity? {
        for try await (userId, deviceId) in try await client.query(
            "SELECT user_id, id FROM devices WHERE token_hash = \(tokenHash)", logger: logger
        ).decode((String, String).self) {
            return DeviceIdentity(userId: userId, deviceId: deviceId)
        }
        return nil
    }

    // MARK: Conversations

    public func createConversation(creator: String, members: [String], name: String?) async throws -> Conversation {
        let (conversation, userIds, payload) = try NewConversation.make(creator: creator, members: members, name: name)
        let (id, now) = (conversation.id, conversation.createdAt)
        let committed = try await transaction { connection in
            try await connection.query(
                "INSERT INTO conversations(id, name, created_by, created_at, updated_at) VALUES (\(id), \(name), \(creator), \(now), \(now))",
                logger: logger)
            try await connection.query(
                "INSERT INTO members(conversation_id, user_id) SELECT \(id), u FROM unnest(\(userIds)::text[]) AS u", logger: logger)
            var events = EventRows()
            events.append(type: "conversation.created", userIds: userIds, sharedPayload: payload, at: now, partition: partition(of: id))
            return try await insert(events, connection)
        }
        membersCache.withLockedValue { $0[id] = userIds }
        handOver(committed)
        return conversation
    }

    public func conversations(of userId: String, before: ConversationCursor?, limit: Int) async throws -> ConversationList {
        let position: PostgresQuery
        switch before {
        case nil:
            position = "SELECT c.id, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id WHERE m.user_id = \(userId)"
        case let cursor? where cursor.id == nil:
            position = """
                SELECT c.id, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id
                WHERE m.user_id = \(userId) AND c.updated_at < \(cursor.updatedAt)
                """
        case let cursor?:
            position = """
                SELECT c.id, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id
                WHERE m.user_id = \(userId) AND (c.updated_at, c.id) < (\(cursor.updatedAt), \(cursor.id ?? ""))
                """
        }
        var query = position
        query.sql += " ORDER BY c.updated_at DESC, c.id DESC LIMIT \(limit + 1)"
        var conversations: [Conversation] = []
        for try await (id, name, createdAt, lastSeq, updatedAt) in try await client.query(query, logger: logger)
            .decode((String, String?, Int64, Int64, Int64).self)
        {
            conversations.append(Conversation(id: id, name: name, createdAt: createdAt, lastSeq: lastSeq, updatedAt: updatedAt, members: []))
        }
        let ids = conversations.prefix(limit).map(\.id)
        var membersByConversation: [String: [ConversationMember]] = [:]
        for try await (conversationId, member, delivered, read) in try await client.query(
            """
            SELECT conversation_id, user_id, delivered_seq, read_seq FROM members
            WHERE conversation_id = ANY(\(ids)) ORDER BY conversation_id, user_id
            """, logger: logger
        ).decode((String, String, Int64, Int64).self) {
            membersByConversation[conversationId, default: []].append(ConversationMember(userId: member, deliveredSeq: delivered, readSeq: read))
        }
        for index in conversations.indices {
            conversations[index].members = membersByConversation[conversations[index].id] ?? []
        }
        return ConversationList(page: conversations, limit: limit)
    }

    public func conversation(id: String, for userId: String) async throws -> Conversation? {
        guard let members = try await members(of: id), members.contains(userId) else { return nil }
        var conversation: Conversation?
        for try await (id, name, createdAt, lastSeq, updatedAt) in try await client.query(
            "SELECT id, name, created_at, last_seq, updated_at FROM conversations WHERE id = \(id)", logger: logger
        ).decode((String, String?, Int64, Int64, Int64).self) {
            conversation = Conversation(id: id, name: name, createdAt: createdAt, lastSeq: lastSeq, updatedAt: updatedAt, members: [])
        }
        guard var conversation else { return nil }
        for try await (member, delivered, read) in try await client.query(
            "SELECT user_id, delivered_seq, read_seq FROM members WHERE conversation_id = \(id) ORDER BY user_id", logger: logger
        ).decode((String, Int64, Int64).self) {
            conversation.members.append(ConversationMember(userId: member, deliveredSeq: delivered, readSeq: read))
        }
        return conversation
    }

    public func members(of conversationId: String) async throws -> [String]? {
        if let cached = membersCache.withLockedValue({ $0[conversationId] }) { return cached }
        var members: [String] = []
        for try await member in try await client.query(
            "SELECT user_id FROM members WHERE conversation_id = \(conversationId) ORDER BY user_id", logger: logger
        ).decode(String.self) {
            members.append(member)
        }
        guard !members.isEmpty else { return nil }
        membersCache.withLockedValue { $0[conversationId] = members }
        return members
    }

    // MARK: Processing

    public func process(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        do {
            return try await processBatch(items)
        } catch let error where Self.isMessageError(error) {
            // Something in the batch was refused by the database (bad data): one message per transaction, so
            // the one at fault fails alone and the rest are stored.
            logger.warning("batch refused by PostgreSQL; processing its messages one by one", metadata: ["error": "\(String(reflecting: error))"])
            var results: [ProcessingResult] = []
            var blocked = Set<String>()
            for item in items {
                if blocked.contains(item.entry.message.conversationId) {
                    results.append(.deferred)
                    continue
                }
                let result: ProcessingResult
                do {
                    result = try await processBatch([item]).first ?? .deferred
                } catch let error where Self.isMessageError(error) {
                    if item.isFinalAttempt {
                        try await deadLetterAlone(item.entry.message, error: error)
                        result = .deadLettered(error)
                    } else {
                        result = .failed(error)
                    }
                }
                if case .failed = result { blocked.insert(item.entry.message.conversationId) }
                results.append(result)
            }
            return results
        }
    }

    /// Whether a database error is about the data of a message (it fails that message) rather than the store
    /// being unavailable (the batch waits and is tried again).
    static func isMessageError(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server, let state = error.serverInfo?[.sqlState] else { return false }
        // 22: data exception (e.g. a NUL character in text); 23: integrity constraint; 54: program limit exceeded.
        return state.hasPrefix("22") || state.hasPrefix("23") || state.hasPrefix("54")
    }

    private func processBatch(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        let messages = items.map(\.entry.message)
        let conversationIds = Array(Set(messages.map(\.conversationId))).sorted()
        let missingMembers = conversationIds.filter { id in membersCache.withLockedValue { $0[id] == nil } }
        let (results, committed) = try await transaction { connection -> ([ProcessingResult], [StoredEvent]) in
            var lastSeqs: [String: Int64] = [:]
            for try await (id, lastSeq) in try await connection.query(
                "SELECT id, last_seq FROM conversations WHERE id = ANY(\(conversationIds)) ORDER BY id FOR UPDATE", logger: logger
            ).decode((String, Int64).self) {
                lastSeqs[id] = lastSeq
            }
            if !missingMembers.isEmpty {
                var fetched: [String: [String]] = [:]
                for try await (conversationId, userId) in try await connection.query(
                    "SELECT conversation_id, user_id FROM members WHERE conversation_id = ANY(\(missingMembers)) ORDER BY conversation_id, user_id",
                    logger: logger
                ).decode((String, String).self) {
                    fetched[conversationId, default: []].append(userId)
                }
                membersCache.withLockedValue { cache in cache.merge(fetched) { old, _ in old } }
            }
            // Stored before (a redelivery after a crash between commit and acknowledgement, or a resend whose
            // buffer de-duplication record expired): by serverId or by (sender, device, clientMessageId).
            var storedByServerId: [String: Int64] = [:]
            var storedByClientId: [[String]: Int64] = [:]
            for try await (serverId, senderId, deviceId, clientMessageId, seq) in try await connection.query(
                """
                SELECT m.server_id, m.sender_id, m.sender_device_id, m.client_message_id, m.seq FROM messages m
                WHERE m.server_id = ANY(\(messages.map(\.serverId)))
                UNION ALL
                SELECT m.server_id, m.sender_id, m.sender_device_id, m.client_message_id, m.seq FROM messages m
                JOIN unnest(\(messages.map(\.senderId))::text[], \(messages.map(\.senderDeviceId))::text[],
                    \(messages.map(\.clientMessageId))::text[]) AS k(u, d, c)
                    ON m.sender_id = k.u AND m.sender_device_id = k.d AND m.client_message_id = k.c
                """, logger: logger
            ).decode((String, String, String, String, Int64).self) {
                storedByServerId[serverId] = seq
                storedByClientId[[senderId, deviceId, clientMessageId]] = seq
            }

            let remoteDevices = try await remoteOnlineDevices(of: conversationIds, connection)
            let payloads = EventPayload()
            let now = WallClock.nowMillis()
            var results: [ProcessingResult] = []
            results.reserveCapacity(items.count)
            var blocked = Set<String>()
            var rows = MessageRows()
            var deadLetters = DeadLetterRows()
            var events = EventRows()
            var newLastSeqs: [String: Int64] = [:]
            for item in items {
                let message = item.entry.message
                if blocked.contains(message.conversationId) {
                    results.append(.deferred)
                    continue
                }
                if let seq = storedByServerId[message.serverId]
                    ?? storedByClientId[[message.senderId, message.senderDeviceId, message.clientMessageId]]
                {
                    results.append(.alreadyStored(seq: seq))
                    continue
                }
                do {
                    try faultInjector?(message)
                    guard let lastSeq = newLastSeqs[message.conversationId] ?? lastSeqs[message.conversationId],
                        let members = membersCache.withLockedValue({ $0[message.conversationId] }), members.contains(message.senderId)
                    else { throw PigeonError.conversationNotFound }
                    let seq = lastSeq + 1
                    newLastSeqs[message.conversationId] = seq
                    let stored = Message(
                        serverId: message.serverId, clientMessageId: message.clientMessageId, conversationId: message.conversationId,
                        seq: seq, senderId: message.senderId, senderDeviceId: message.senderDeviceId, type: message.type, body: message.body,
                        clientTimestamp: message.clientTimestamp, acceptedAt: message.acceptedAt, storedAt: now)
                    rows.append(stored)
                    let part = partition(of: message.conversationId)
                    let rendered = payloads.messageNew(stored)
                    for userId in members {
                        events.append(
                            type: "message.new", userId: userId,
                            excludedDeviceId: userId == message.senderId ? message.senderDeviceId : nil, payload: nil, at: now,
                            partition: part, message: (message.conversationId, seq, rendered))
                    }
                    let recipients = members.filter { $0 != message.senderId }
                    var online = sink.onlineDeviceIds(of: recipients)
                    for recipient in recipients { online.formUnion(remoteDevices[recipient] ?? []) }
                    online.remove(message.senderDeviceId)
                    events.append(
                        type: "message.stored", userId: message.senderId, deviceId: message.senderDeviceId,
                        payload: payloads.messageStored(
                            MessageStoredEvent(
                                conversationId: message.conversationId, serverId: message.serverId,
                                clientMessageId: message.clientMessageId, seq: seq, storedAt: now,
                                recipientsOnline: online.count)),
                        at: now, partition: part)
                    results.append(.stored(seq: seq))
                } catch {
                    let permanent = (error as? PigeonError)?.isPermanent ?? false
                    if item.isFinalAttempt || permanent {
                        let detail = Self.errorDetail(error)
                        deadLetters.append(message, failedAt: now, error: detail)
                        events.append(
                            type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId,
                            payload: try payloads.messageFailed(
                                MessageFailedEvent(
                                    conversationId: message.conversationId, serverId: message.serverId,
                                    clientMessageId: message.clientMessageId, error: detail)),
                            at: now, partition: partition(of: message.conversationId))
                        results.append(.deadLettered(error))
                    } else {
                        blocked.insert(message.conversationId)
                        results.append(.failed(error))
                    }
                }
            }
            try await rows.insert(connection, logger: logger)
            try await deadLetters.insert(connection, logger: logger)
            if !newLastSeqs.isEmpty {
                let ids = Array(newLastSeqs.keys)
                try await connection.query(
                    """
                    UPDATE conversations c SET last_seq = u.seq, updated_at = GREATEST(c.updated_at, \(now))
                    FROM unnest(\(ids)::text[], \(ids.map { newLastSeqs[$0]! })::bigint[]) AS u(id, seq)
                    WHERE c.id = u.id
                    """, logger: logger)
            }
            return (results, try await insert(events, connection))
        }
        handOver(committed)
        return results
    }

    /// Dead-letters one message in a transaction of its own (after the database refused it). If the database
    /// refuses the dead letter too (text it cannot hold), U+0000 characters are kept as U+FFFD.
    private func deadLetterAlone(_ message: BufferedMessage, error: any Error) async throws {
        do {
            try await deadLetterAlone(message, detail: Self.errorDetail(error))
        } catch let refusal where Self.isMessageError(refusal) {
            func storable(_ text: String) -> String { text.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") }
            var sanitized = message
            sanitized.body = storable(message.body)
            sanitized.type = storable(message.type)
            var detail = Self.errorDetail(error)
            detail.message = storable(detail.message) + " (U+0000 kept as U+FFFD in this dead letter)"
            try await deadLetterAlone(sanitized, detail: detail)
        }
    }

    private func deadLetterAlone(_ message: BufferedMessage, detail: ErrorDetail) async throws {
        let now = WallClock.nowMillis()
        var deadLetters = DeadLetterRows()
        deadLetters.append(message, failedAt: now, error: detail)
        var events = EventRows()
        events.append(
            type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId,
            payload: try EventPayload().messageFailed(
                MessageFailedEvent(
                    conversationId: message.conversationId, serverId: message.serverId, clientMessageId: message.clientMessageId, error: detail)),
            at: now, partition: partition(of: message.conversationId))
        let committed = try await transaction { connection in
            try await deadLetters.insert(connection, logger: logger)
            return try await insert(events, connection)
        }
        handOver(committed)
    }

    private static func errorDetail(_ error: any Error) -> ErrorDetail {
        if let error = error as? PigeonError { return error.detail }
        if let error = error as? PSQLError, let message = error.serverInfo?[.message] {
            return ErrorDetail(code: .invalidRequest, message: "the store refused the message: \(message)")
        }
        return ErrorDetail(code: .internalError, message: "processing failed: \(error)")
    }

    public func status(ofMessage serverId: String) async throws -> (status: ServerMessageStatus, seq: Int64?)? {
        for try await (kind, seq) in try await client.query(
            """
            SELECT 's', seq FROM messages WHERE server_id = \(serverId)
            UNION ALL SELECT 'f', 0 FROM dead_letters WHERE server_id = \(serverId)
            """, logger: logger
        ).decode((String, Int64).self) {
            return kind == "s" ? (.stored, seq) : (.failed, nil)
        }
        return nil
    }

    // MARK: History

    static let messageColumns = """
        server_id, client_message_id, conversation_id, seq, sender_id, sender_device_id, type, body, client_timestamp, accepted_at, stored_at
        """

    private typealias MessageTuple = (String, String, String, Int64, String, String, String, String, Int64, Int64, Int64)

    private static func message(_ t: MessageTuple) -> Message {
        Message(
            serverId: t.0, clientMessageId: t.1, conversationId: t.2, seq: t.3, senderId: t.4, senderDeviceId: t.5, type: t.6, body: t.7,
            clientTimestamp: t.8, acceptedAt: t.9, storedAt: t.10)
    }

    public func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int) async throws -> MessagePage {
        let query: PostgresQuery
        if let after {
            query = """
                SELECT \(unescaped: Self.messageColumns) FROM messages WHERE conversation_id = \(conversationId) AND seq > \(after)
                ORDER BY seq LIMIT \(limit + 1)
                """
        } else {
            query = """
                SELECT \(unescaped: Self.messageColumns) FROM messages WHERE conversation_id = \(conversationId) AND seq < \(before ?? Int64.max)
                ORDER BY seq DESC LIMIT \(limit + 1)
                """
        }
        var messages: [Message] = []
        for try await row in try await client.query(query, logger: logger).decode(MessageTuple.self) {
            messages.append(Self.message(row))
        }
        let hasMore = messages.count > limit
        if hasMore { messages.removeLast() }
        return MessagePage(messages: after == nil ? messages.reversed() : messages, hasMore: hasMore)
    }

    // MARK: Receipts

    /// A receipt waiting for the next receipt transaction.
    private struct PendingReceipt {
        var conversationId: String
        var userId: String
        var kind: ReceiptKind
        var upToSeq: Int64
        var members: [String]
        var continuation: CheckedContinuation<ReceiptOutcome, any Error>
    }

    private let pendingReceipts = NIOLockedValueBox([PendingReceipt]())
    private let receiptWakeUp = AsyncSignal()

    /// Receipts are written in groups: a transaction that writes events holds its partitions' rows through its
    /// commit, so one transaction per receipt would cap a partition at one receipt per fsync. The writer takes
    /// every receipt that arrived while the previous group was being committed.
    public func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome {
        guard let members = try await members(of: conversationId), members.contains(userId) else { throw PigeonError.conversationNotFound }
        return try await withCheckedThrowingContinuation { continuation in
            pendingReceipts.withLockedValue {
                $0.append(
                    PendingReceipt(
                        conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq, members: members,
                        continuation: continuation))
            }
            receiptWakeUp.notify()
        }
    }

    /// Writes the queued receipts, a group per transaction, until cancelled; then fails what is left.
    private func writeReceipts() async {
        while true {
            await receiptWakeUp.wait(timeout: .seconds(1))
            let group = pendingReceipts.withLockedValue { pending -> [PendingReceipt] in
                let group = Array(pending.prefix(1_000))
                pending.removeFirst(group.count)
                return group
            }
            if Task.isCancelled && group.isEmpty { break }
            guard !group.isEmpty else { continue }
            if pendingReceipts.withLockedValue({ !$0.isEmpty }) { receiptWakeUp.notify() }
            do {
                let (outcomes, committed) = try await withDeadline(.seconds(10)) { try await self.writeReceiptGroup(group) }
                handOver(committed)
                for (receipt, outcome) in zip(group, outcomes) { receipt.continuation.resume(returning: outcome) }
            } catch {
                for receipt in group { receipt.continuation.resume(throwing: error) }
            }
        }
        let left = pendingReceipts.withLockedValue { pending in
            defer { pending = [] }
            return pending
        }
        for receipt in left { receipt.continuation.resume(throwing: PigeonError.overloaded("the server is shutting down")) }
    }

    /// One transaction for a group of receipts: lock the members' rows (in key order, so concurrent groups of
    /// several nodes cannot deadlock), apply the receipts in arrival order, write watermarks and events once.
    private func writeReceiptGroup(_ group: [PendingReceipt]) async throws -> ([ReceiptOutcome], [StoredEvent]) {
        struct Key: Hashable {
            var conversationId: String
            var userId: String
        }
        let keys = Array(Set(group.map { Key(conversationId: $0.conversationId, userId: $0.userId) }))
            .sorted { ($0.conversationId, $0.userId) < ($1.conversationId, $1.userId) }
        return try await transaction { connection -> ([ReceiptOutcome], [StoredEvent]) in
            var watermarks: [Key: (delivered: Int64, read: Int64, lastSeq: Int64)] = [:]
            for try await (conversationId, userId, delivered, read, lastSeq) in try await connection.query(
                """
                SELECT m.conversation_id, m.user_id, m.delivered_seq, m.read_seq, c.last_seq
                FROM members m JOIN conversations c ON c.id = m.conversation_id
                JOIN unnest(\(keys.map(\.conversationId))::text[], \(keys.map(\.userId))::text[]) AS k(c, u)
                    ON m.conversation_id = k.c AND m.user_id = k.u
                ORDER BY m.conversation_id, m.user_id FOR UPDATE OF m
                """, logger: logger
            ).decode((String, String, Int64, Int64, Int64).self) {
                watermarks[Key(conversationId: conversationId, userId: userId)] = (delivered, read, lastSeq)
            }
            let now = WallClock.nowMillis()
            let payloads = EventPayload()
            var events = EventRows()
            var outcomes: [ReceiptOutcome] = []
            var changed = Set<Key>()
            /// Receipts whose delivered watermark moved: which message (for the stored → delivered latency).
            var deliveredMoves: [(index: Int, key: Key, seq: Int64)] = []
            for receipt in group {
                let key = Key(conversationId: receipt.conversationId, userId: receipt.userId)
                guard let (oldDelivered, oldRead, lastSeq) = watermarks[key] else {
                    outcomes.append(ReceiptOutcome(watermarks: ReceiptResponse(deliveredSeq: 0, readSeq: 0), deliveredMessageStoredAt: nil))
                    continue
                }
                let target = min(receipt.upToSeq, lastSeq)
                let delivered = max(oldDelivered, target)
                let read = receipt.kind == .read ? max(oldRead, target) : oldRead
                outcomes.append(ReceiptOutcome(watermarks: ReceiptResponse(deliveredSeq: delivered, readSeq: read), deliveredMessageStoredAt: nil))
                guard delivered != oldDelivered || read != oldRead else { continue }
                watermarks[key] = (delivered, read, lastSeq)
                changed.insert(key)
                var moved: [(ReceiptKind, Int64)] = []
                if delivered != oldDelivered {
                    moved.append((.delivered, delivered))
                    deliveredMoves.append((outcomes.count - 1, key, delivered))
                }
                if read != oldRead { moved.append((.read, read)) }
                for (movedKind, seq) in moved {
                    let payload = try payloads.receipt(
                        ReceiptEvent(conversationId: receipt.conversationId, userId: receipt.userId, kind: movedKind, upToSeq: seq, at: now))
                    events.append(
                        type: "receipt", userIds: receipt.members, sharedPayload: payload, at: now, partition: partition(of: receipt.conversationId))
                }
            }
            guard !changed.isEmpty else { return (outcomes, []) }
            let rows = Array(changed)
            try await connection.query(
                """
                UPDATE members m SET delivered_seq = u.d, read_seq = u.r
                FROM unnest(\(rows.map(\.conversationId))::text[], \(rows.map(\.userId))::text[],
                    \(rows.map { watermarks[$0]!.delivered })::bigint[], \(rows.map { watermarks[$0]!.read })::bigint[]) AS u(c, us, d, r)
                WHERE m.conversation_id = u.c AND m.user_id = u.us
                """, logger: logger)
            let committed = try await insert(events, connection)
            if !deliveredMoves.isEmpty {
                var storedAt: [String: (Int64, String)] = [:]
                for try await (conversationId, seq, stored, senderId) in try await connection.query(
                    """
                    SELECT m.conversation_id, m.seq, m.stored_at, m.sender_id FROM messages m
                    JOIN unnest(\(deliveredMoves.map(\.key.conversationId))::text[], \(deliveredMoves.map(\.seq))::bigint[]) AS k(c, s)
                        ON m.conversation_id = k.c AND m.seq = k.s
                    """, logger: logger
                ).decode((String, Int64, Int64, String).self) {
                    storedAt["\(conversationId) \(seq)"] = (stored, senderId)
                }
                for move in deliveredMoves {
                    if let (stored, senderId) = storedAt["\(move.key.conversationId) \(move.seq)"], senderId != move.key.userId {
                        outcomes[move.index].deliveredMessageStoredAt = stored
                    }
                }
            }
            return (outcomes, committed)
        }
    }

    // MARK: Events

    /// The partition of a conversation's events.
    func partition(of conversationId: String) -> Int {
        EventPartitioning.partition(ofConversation: conversationId, partitions: eventPartitions)
    }

    private typealias EventTuple = (
        Int32, Int64, String, String, String?, String?, String?,
        String?, String?, String?, Int64?, String?, String?, String?, String?, Int64?, Int64?, Int64?
    )

    /// The columns of an event row with its payload (stored, shared, or rendered from its message); `e` is the event.
    private static let eventColumns = """
        e.part, e.id, e.type, e.user_id, e.device_id, e.excluded_device_id, COALESCE(e.payload, p.payload),
            m.server_id, m.client_message_id, m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.type, m.body,
            m.client_timestamp, m.accepted_at, m.stored_at
        """

    private static let eventJoins = """
        LEFT JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
            LEFT JOIN event_payloads p ON p.part = e.part AND p.id = e.payload_id
        """

    private static func storedEvent(_ t: EventTuple, payloads: EventPayload) -> StoredEvent? {
        let payload: String
        if let stored = t.6 {
            payload = stored
        } else if let serverId = t.7, let clientMessageId = t.8, let conversationId = t.9, let seq = t.10, let senderId = t.11,
            let senderDeviceId = t.12, let type = t.13, let body = t.14, let clientTimestamp = t.15, let acceptedAt = t.16,
            let storedAt = t.17
        {
            payload = payloads.messageNew(
                Message(
                    serverId: serverId, clientMessageId: clientMessageId, conversationId: conversationId, seq: seq, senderId: senderId,
                    senderDeviceId: senderDeviceId, type: type, body: body, clientTimestamp: clientTimestamp, acceptedAt: acceptedAt,
                    storedAt: storedAt))
        } else {
            return nil
        }
        return StoredEvent(id: t.1, partition: Int(t.0), type: t.2, userId: t.3, deviceId: t.4, excludedDeviceId: t.5, payload: payload)
    }

    private func checkLayout(_ position: EventPosition) throws {
        guard position.offsets.count == eventPartitions else {
            throw PigeonError.invalid("an event position of \(position.offsets.count) partitions for a log of \(eventPartitions)")
        }
    }

    public func events(for device: DeviceIdentity, after position: EventPosition, limit: Int) async throws -> [StoredEvent] {
        try checkLayout(position)
        let parts = (0..<eventPartitions).map { Int32($0) }
        let payloads = EventPayload()
        var events: [StoredEvent] = []
        // In each partition the next `limit` of the device's events; of those, the first `limit` by (offset,
        // partition): a prefix of every partition, so the cursor after the last one skips nothing.
        for try await row in try await client.query(
            """
            SELECT \(unescaped: Self.eventColumns)
            FROM unnest(\(parts)::integer[], \(position.offsets)::bigint[]) AS t(part, after)
            CROSS JOIN LATERAL (
                SELECT * FROM events x
                WHERE x.user_id = \(device.userId) AND x.part = t.part AND x.id > t.after
                    AND (x.device_id IS NULL OR x.device_id = \(device.deviceId))
                    AND (x.excluded_device_id IS NULL OR x.excluded_device_id <> \(device.deviceId))
                ORDER BY x.id LIMIT \(limit)) e
            \(unescaped: Self.eventJoins)
            ORDER BY e.id, e.part LIMIT \(limit)
            """, logger: logger
        ).decode(EventTuple.self) {
            if let event = Self.storedEvent(row, payloads: payloads) { events.append(event) }
        }
        return events
    }

    public func headPosition() async throws -> EventPosition {
        var head = EventPosition.start(partitions: eventPartitions)
        for try await (part, offset) in try await client.query(
            "SELECT part, last_offset FROM event_partitions WHERE part < \(eventPartitions)", logger: logger
        ).decode((Int32, Int64).self) {
            head.offsets[Int(part)] = offset
        }
        return head
    }

    public func prunedThrough() async throws -> EventPosition {
        var pruned = EventPosition.start(partitions: eventPartitions)
        for try await (part, offset) in try await client.query(
            "SELECT part, pruned_through FROM event_partitions WHERE part < \(eventPartitions)", logger: logger
        ).decode((Int32, Int64).self) {
            pruned.offsets[Int(part)] = offset
        }
        return pruned
    }

    @discardableResult
    public func pruneEvents(olderThan cutoff: Int64) async throws -> Int {
        try await transaction { connection -> Int in
            // Offsets grow with time within a partition: the newest offset created before the cutoff bounds each.
            var parts: [Int32] = []
            var boundaries: [Int64] = []
            for try await (part, boundary) in try await connection.query(
                "SELECT part, MAX(id) FROM events WHERE created_at < \(cutoff) GROUP BY part", logger: logger
            ).decode((Int32, Int64).self) {
                parts.append(part)
                boundaries.append(boundary)
            }
            guard !parts.isEmpty else { return 0 }
            var deleted = 0
            for try await count in try await connection.query(
                """
                WITH d AS (
                    DELETE FROM events e USING unnest(\(parts)::integer[], \(boundaries)::bigint[]) AS b(part, id)
                    WHERE e.part = b.part AND e.id <= b.id RETURNING 1)
                SELECT COUNT(*) FROM d
                """, logger: logger
            ).decode(Int.self) {
                deleted = count
            }
            // A shared payload's id is its first event's id and its events are consecutive in their partition: it
            // goes with the last of them, so only the first event left in a partition can still point at one.
            try await connection.query(
                """
                DELETE FROM event_payloads p USING unnest(\(parts)::integer[], \(boundaries)::bigint[]) AS b(part, id)
                WHERE p.part = b.part AND p.id <= b.id
                    AND p.id IS DISTINCT FROM (SELECT e.payload_id FROM events e WHERE e.part = b.part AND e.id > b.id ORDER BY e.id LIMIT 1)
                """, logger: logger)
            try await connection.query(
                """
                UPDATE event_partitions x SET pruned_through = GREATEST(x.pruned_through, b.id)
                FROM unnest(\(parts)::integer[], \(boundaries)::bigint[]) AS b(part, id) WHERE x.part = b.part
                """, logger: logger)
            return deleted
        }
    }

    // MARK: Dead letters

    public func deadLetters(limit: Int) async throws -> [DeadLetter] {
        var letters: [DeadLetter] = []
        for try await t in try await client.query(
            """
            SELECT server_id, client_message_id, conversation_id, sender_id, sender_device_id, type, body, client_timestamp,
                accepted_at, failed_at, error_code, error_message FROM dead_letters ORDER BY failed_at, server_id LIMIT \(limit)
            """, logger: logger
        ).decode((String, String, String, String, String, String, String, Int64, Int64, Int64, String, String).self) {
            letters.append(
                DeadLetter(
                    message: Message(
                        serverId: t.0, clientMessageId: t.1, conversationId: t.2, seq: 0, senderId: t.3, senderDeviceId: t.4, type: t.5,
                        body: t.6, clientTimestamp: t.7, acceptedAt: t.8, storedAt: 0),
                    failedAt: t.9, error: ErrorDetail(code: ErrorCode(rawValue: t.10), message: t.11)))
        }
        return letters
    }

    public func deadLetter(serverId: String) async throws -> BufferedMessage? {
        for try await t in try await client.query(
            """
            SELECT server_id, conversation_id, sender_id, sender_device_id, client_message_id, type, body, client_timestamp, accepted_at
            FROM dead_letters WHERE server_id = \(serverId)
            """, logger: logger
        ).decode((String, String, String, String, String, String, String, Int64, Int64).self) {
            return BufferedMessage(
                serverId: t.0, conversationId: t.1, senderId: t.2, senderDeviceId: t.3, clientMessageId: t.4, type: t.5, body: t.6,
                clientTimestamp: t.7, acceptedAt: t.8)
        }
        return nil
    }

    public func removeDeadLetter(serverId: String) async throws {
        try await client.query("DELETE FROM dead_letters WHERE server_id = \(serverId)", logger: logger)
    }

    public func deadLetterCount() async throws -> Int {
        for try await count in try await client.query("SELECT COUNT(*) FROM dead_letters", logger: logger).decode(Int.self) {
            return count
        }
        return 0
    }

    // MARK: Event tail

    /// Hands committed events to the sink, partition by partition, where they follow what was handed over already;
    /// for a partition where they do not (another node's commit came in between), wakes the tail to read the gap.
    /// Tells the other nodes (coalesced) either way.
    private func handOver(_ committed: [StoredEvent]) {
        guard !committed.isEmpty else { return }
        notifyWakeUp.notify()
        var start = committed.startIndex
        while start < committed.endIndex {
            let part = committed[start].partition
            var end = start + 1
            while end < committed.endIndex, committed[end].partition == part { end += 1 }
            if !handOver(committed[start..<end]) { tailWakeUp.notify() }
            start = end
        }
    }

    /// Hands one partition's events (consecutive offsets, ascending) to the sink unless it had them; whether they
    /// followed what it had (false: a gap before them, nothing handed over).
    private func handOver(_ events: ArraySlice<StoredEvent>) -> Bool {
        guard let partition = events.first?.partition else { return true }
        return handedOver.withLockedValue { handed in
            let fresh = events.drop { $0.id <= handed[partition] }
            guard let first = fresh.first, let last = fresh.last else { return true }
            guard first.id == handed[partition] + 1 else { return false }
            handed[partition] = last.id
            // Under the lock, so that the committing path and the tail hand a partition's events over in order.
            sink.publish(Array(fresh))
            return true
        }
    }

    /// Reads what the sink has not had yet, in every partition, and hands it over: woken by local commits that
    /// could not be handed over directly, `NOTIFY`s of other nodes' commits, and every second.
    private func tail() async {
        let payloads = EventPayload()
        let parts = (0..<eventPartitions).map { Int32($0) }
        let pageSize = 500
        while !Task.isCancelled {
            await tailWakeUp.wait(timeout: .seconds(1))
            if Task.isCancelled { return }
            do {
                while true {
                    let after = handedOver.withLockedValue { $0 }
                    // Bounded: a read on a connection that died under it may never return (see ``withDeadline``).
                    let events = try await withDeadline(.seconds(10)) { [client, logger] in
                        var events: [StoredEvent] = []
                        for try await row in try await client.query(
                            """
                            SELECT \(unescaped: Self.eventColumns)
                            FROM unnest(\(parts)::integer[], \(after)::bigint[]) AS t(part, after)
                            CROSS JOIN LATERAL (SELECT * FROM events x WHERE x.part = t.part AND x.id > t.after ORDER BY x.id LIMIT \(pageSize)) e
                            \(unescaped: Self.eventJoins)
                            ORDER BY e.part, e.id
                            """, logger: logger
                        ).decode(EventTuple.self) {
                            if let event = Self.storedEvent(row, payloads: payloads) { events.append(event) }
                        }
                        return events
                    }
                    var full = false
                    var start = events.startIndex
                    while start < events.endIndex {
                        let part = events[start].partition
                        var end = start + 1
                        while end < events.endIndex, events[end].partition == part { end += 1 }
                        _ = handOver(events[start..<end])
                        if end - start == pageSize { full = true }
                        start = end
                    }
                    if !full { break }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("event tail failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                try? await Task.sleep(for: .milliseconds(200))
                tailWakeUp.notify()
            }
        }
    }

    /// Tells the other nodes that this one committed events: one `NOTIFY` (a wake-up without data) at a time, for
    /// every commit since the previous one. Sent after the commit, outside the writing transaction: a `NOTIFY` inside
    /// it would take PostgreSQL's database-wide notification lock through the commit (every writer of every node
    /// would commit one at a time). A node that dies between its commit and its `NOTIFY` delays the others by at most
    /// the tail's one-second poll; nothing is lost.
    private func notifyOtherNodes() async {
        while !Task.isCancelled {
            await notifyWakeUp.wait()
            if Task.isCancelled { return }
            do {
                _ = try await withDeadline(.seconds(10)) { [client, logger, notificationChannel] in
                    try await client.query("SELECT pg_notify(\(notificationChannel), '')", logger: logger)
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("event notification not sent", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    /// Holds a `LISTEN` on ``notificationChannel`` and wakes the tail for each notification (other nodes'
    /// commits) and after every (re)connection (notifications may have been missed while it was down).
    private func listen() async {
        await listen(on: notificationChannel) { [tailWakeUp] _ in tailWakeUp.notify() }
    }

    /// Listens on `channel` with reconnection; `handle` gets each payload, and `nil` after every (re)connection.
    private func listen(on channel: String, handle: @escaping @Sendable (String?) -> Void) async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        handle(nil)
                        delay = .milliseconds(100)
                        for try await notification in notifications {
                            handle(notification.payload)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("LISTEN connection lost; reconnecting", metadata: ["channel": "\(channel)", "error": "\(String(reflecting: error))"])
            }
            try? await Task.sleep(for: delay)
            delay = min(.seconds(2), delay * 2)
        }
    }

    // MARK: Ephemeral frames (typing) across nodes

    /// A frame that is pushed and never stored (typing), relayed to the other nodes.
    public struct EphemeralFrame: Sendable, Codable, Equatable {
        public var type: String
        public var json: String
        public var users: [String]
        /// The node that sent it.
        var node: String = ""

        public init(type: String, json: String, users: [String]) {
            self.type = type
            self.json = json
            self.users = users
        }

        enum CodingKeys: String, CodingKey {
            case type = "t", json = "j", users = "u", node = "n"
        }
    }


    /// Relays `frame` to the other nodes (in the order of calls; dropped if PostgreSQL is unreachable: typing is
    /// best effort by design).
    public func broadcast(_ frame: EphemeralFrame) {
        ephemeralOutbox.yield(frame)
    }

    /// Where frames from the other nodes go (this node's stream hub).
    public func onEphemeralFrame(_ receiver: @escaping @Sendable (EphemeralFrame) -> Void) {
        ephemeralReceiver.withLockedValue { $0 = receiver }
    }

    private func sendEphemeralFrames() async {
        let encoder = JSONEncoder()
        for await var frame in ephemeralQueue {
            frame.node = nodeId
            // NOTIFY payloads must stay under 8,000 bytes: large member lists go in several frames.
            var chunks: [EphemeralFrame] = []
            let budget = 7_000 - frame.json.utf8.count - frame.type.utf8.count - 64
            let perUser = (frame.users.map(\.utf8.count).max() ?? 0) + 3
            let chunkSize = max(1, budget / perUser)
            for start in stride(from: 0, to: frame.users.count, by: chunkSize) {
                var chunk = frame
                chunk.users = Array(frame.users[start..<min(frame.users.count, start + chunkSize)])
                chunks.append(chunk)
            }
            for chunk in chunks {
                guard let data = try? encoder.encode(chunk), data.count < 8_000 else { continue }
                do {
                    try await client.query("SELECT pg_notify(\(ephemeralChannel), \(String(decoding: data, as: UTF8.self)))", logger: logger)
                } catch {
                    if Task.isCancelled { return }
                    logger.debug("ephemeral frame not relayed", metadata: ["error": "\(String(reflecting: error))"])
                }
            }
        }
    }

    private func listenForEphemeralFrames() async {
        let nodeId = self.nodeId
        let receiver = ephemeralReceiver
        await listen(on: ephemeralChannel) { payload in
            guard let payload, let frame = try? JSONDecoder().decode(EphemeralFrame.self, from: Data(payload.utf8)), frame.node != nodeId
            else { return }
            receiver.withLockedValue { $0 }?(frame)
        }
    }

    // MARK: Presence across nodes

    /// A node that has not heart-beaten for this long is gone: its devices no longer count as online.
    static let nodeTimeoutMillis = PostgresSchema.nodeTimeoutMillis
    private let pendingPresence = NIOLockedValueBox([String: (userId: String, online: Bool)]())
    private let presenceWakeUp = AsyncSignal()
    /// Whether other live nodes were seen at the last heartbeat (if not, presence is all local).
    private let otherNodesAlive = NIOLockedValueBox(false)

    /// Records that `device` got its first stream on this node (`online`) or lost its last one.
    public func devicePresence(_ device: DeviceIdentity, online: Bool) {
        pendingPresence.withLockedValue { $0[device.deviceId] = (device.userId, online) }
        presenceWakeUp.notify()
    }

    /// Devices of the members of `conversationIds` with a stream open on another live node, by user.
    private func remoteOnlineDevices(of conversationIds: [String], _ connection: PostgresConnection) async throws -> [String: Set<String>] {
        guard otherNodesAlive.withLockedValue({ $0 }) else { return [:] }
        let users = Array(Set(conversationIds.flatMap { id in membersCache.withLockedValue { $0[id] } ?? [] }))
        var devices: [String: Set<String>] = [:]
        for try await (userId, deviceId) in try await connection.query(
            """
            SELECT p.user_id, p.device_id FROM presence p JOIN nodes n ON n.node_id = p.node_id
            WHERE p.user_id = ANY(\(users)) AND p.node_id <> \(nodeId) AND n.seen_at >= \(WallClock.nowMillis() - Self.nodeTimeoutMillis)
            """, logger: logger
        ).decode((String, String).self) {
            devices[userId, default: []].insert(deviceId)
        }
        return devices
    }

    /// Heart-beats this node every 2 s (and forgets nodes that stopped), and writes presence changes as they come.
    private func maintainPresence() async {
        var lastHeartbeat = ContinuousClock.now - .seconds(60)
        // A restarted node (same id) had devices that are gone now.
        var forgotEarlierPresence = false
        while !Task.isCancelled {
            do {
                if !forgotEarlierPresence {
                    try await client.query("DELETE FROM presence WHERE node_id = \(nodeId)", logger: logger)
                    forgotEarlierPresence = true
                }
                if ContinuousClock.now - lastHeartbeat >= .seconds(2) {
                    try await withDeadline(.seconds(10)) { try await self.heartbeat() }
                    lastHeartbeat = .now
                }
                let changes = pendingPresence.withLockedValue { pending in
                    defer { pending = [:] }
                    return pending
                }
                if !changes.isEmpty {
                    do {
                        try await withDeadline(.seconds(10)) { try await self.writePresence(changes) }
                    } catch {
                        // Put them back unless a newer change of the same device arrived meanwhile.
                        pendingPresence.withLockedValue { pending in for (device, change) in changes where pending[device] == nil { pending[device] = change } }
                        throw error
                    }
                }
            } catch {
                if Task.isCancelled { break }
                logger.warning("presence update failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                try? await Task.sleep(for: .milliseconds(500))
            }
            await presenceWakeUp.wait(timeout: .seconds(2))
        }
    }

    private func heartbeat() async throws {
        let now = WallClock.nowMillis()
        let cutoff = now - Self.nodeTimeoutMillis
        try await client.query(
            "INSERT INTO nodes(node_id, seen_at) VALUES (\(nodeId), \(now)) ON CONFLICT (node_id) DO UPDATE SET seen_at = excluded.seen_at",
            logger: logger)
        try await client.query("DELETE FROM presence WHERE node_id IN (SELECT node_id FROM nodes WHERE seen_at < \(cutoff))", logger: logger)
        try await client.query("DELETE FROM nodes WHERE seen_at < \(cutoff)", logger: logger)
        var others = 0
        for try await count in try await client.query("SELECT COUNT(*) FROM nodes WHERE node_id <> \(nodeId)", logger: logger).decode(Int.self) {
            others = count
        }
        otherNodesAlive.withLockedValue { $0 = others > 0 }
    }

    private func writePresence(_ changes: [String: (userId: String, online: Bool)]) async throws {
        let online = changes.filter { $0.value.online }
        let offline = changes.filter { !$0.value.online }.map(\.key)
        if !online.isEmpty {
            let devices = Array(online.keys)
            try await client.query(
                """
                INSERT INTO presence(node_id, device_id, user_id)
                SELECT \(nodeId), d, u FROM unnest(\(devices)::text[], \(devices.map { online[$0]!.userId })::text[]) AS x(d, u)
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        if !offline.isEmpty {
            try await client.query("DELETE FROM presence WHERE node_id = \(nodeId) AND device_id = ANY(\(offline))", logger: logger)
        }
    }

    // MARK: Writing rows

    /// Inserts `events` with offsets taken from their partitions' rows (locked to the commit), payloads shared by
    /// several events once; answers them as the sink gets them.
    private func insert(_ events: EventRows, _ connection: PostgresConnection) async throws -> [StoredEvent] {
        guard events.count > 0 else { return [] }
        var counts: [Int32: Int64] = [:]
        for part in events.parts { counts[part, default: 0] += 1 }
        let parts = counts.keys.sorted()
        var next: [Int32: Int64] = [:]
        for try await (part, first) in try await connection.query(
            "SELECT taken_part, first_offset FROM pigeon_take_offsets(\(parts)::integer[], \(parts.map { counts[$0]! })::bigint[])",
            logger: logger
        ).decode((Int32, Int64).self) {
            next[part] = first
        }
        var ids: [Int64] = []
        ids.reserveCapacity(events.count)
        for part in events.parts {
            guard let id = next[part] else { throw PigeonError(.internalError, "no offsets were taken in event partition \(part)") }
            ids.append(id)
            next[part] = id + 1
        }
        let payloadIds = events.payloadIndexes.map { $0 < 0 ? Int64(0) : ids[Int($0)] }
        let shared = events.sharedPayloads
        try await connection.query(
            """
            WITH shared AS (
                INSERT INTO event_payloads(part, id, payload)
                SELECT * FROM unnest(\(shared.map { events.parts[Int($0.firstIndex)] })::integer[],
                    \(shared.map { ids[Int($0.firstIndex)] })::bigint[], \(shared.map(\.payload))::text[]))
            INSERT INTO events(part, id, user_id, device_id, excluded_device_id, type, created_at, conversation_id, seq, payload, payload_id)
            SELECT p, i, u, NULLIF(d, ''), NULLIF(x, ''), t, c, NULLIF(ci, ''), NULLIF(s, 0), NULLIF(pl, ''), NULLIF(pi, 0)
            FROM unnest(\(events.parts)::integer[], \(ids)::bigint[], \(events.userIds)::text[], \(events.deviceIds)::text[],
                \(events.excludedDeviceIds)::text[], \(events.types)::text[], \(events.createdAt)::bigint[], \(events.conversationIds)::text[],
                \(events.seqs)::bigint[], \(events.payloads)::text[], \(payloadIds)::bigint[]) AS e(p, i, u, d, x, t, c, ci, s, pl, pi)
            """, logger: logger)
        var committed: [StoredEvent] = []
        committed.reserveCapacity(events.count)
        for index in 0..<events.count {
            committed.append(
                StoredEvent(
                    id: ids[index], partition: Int(events.parts[index]), type: events.types[index], userId: events.userIds[index],
                    deviceId: events.deviceIds[index].isEmpty ? nil : events.deviceIds[index],
                    excludedDeviceId: events.excludedDeviceIds[index].isEmpty ? nil : events.excludedDeviceIds[index],
                    payload: events.rendered[index]))
        }
        // The sink gets each partition's events in offset order.
        committed.sort { ($0.partition, $0.id) < ($1.partition, $1.id) }
        return committed
    }
}

/// Events to insert, column by column (`""` and 0 stand for NULL).
private struct EventRows {
    var parts: [Int32] = []
    var userIds: [String] = []
    var deviceIds: [String] = []
    var excludedDeviceIds: [String] = []
    var types: [String] = []
    var createdAt: [Int64] = []
    var conversationIds: [String] = []
    var seqs: [Int64] = []
    var payloads: [String] = []
    /// Each event's payload as the sink gets it (a `message.new`'s rendered from its message).
    var rendered: [String] = []
    /// For each event, the index (among these events) of the first event of its shared payload, or -1.
    var payloadIndexes: [Int64] = []
    /// Payloads stored once for several events, by the index of the first of them.
    var sharedPayloads: [(firstIndex: Int64, payload: String)] = []

    var count: Int { userIds.count }

    /// One event per user in `userIds`, all pointing at one stored copy of `payload`.
    mutating func append(type: String, userIds users: [String], sharedPayload payload: String, at now: Int64, partition: Int) {
        guard !users.isEmpty else { return }
        let firstIndex = Int64(count)
        sharedPayloads.append((firstIndex, payload))
        for userId in users {
            append(type: type, userId: userId, payload: nil, at: now, partition: partition)
            payloadIndexes[payloadIndexes.count - 1] = firstIndex
            rendered[rendered.count - 1] = payload
        }
    }

    /// `payload` nil: a `message.new` that refers to its message (conversation and seq) instead of copying it;
    /// `message.rendered` is what the sink gets.
    mutating func append(
        type: String, userId: String, deviceId: String? = nil, excludedDeviceId: String? = nil, payload: String?, at now: Int64,
        partition: Int, message: (conversationId: String, seq: Int64, rendered: String)? = nil
    ) {
        parts.append(Int32(partition))
        userIds.append(userId)
        deviceIds.append(deviceId ?? "")
        excludedDeviceIds.append(excludedDeviceId ?? "")
        types.append(type)
        createdAt.append(now)
        conversationIds.append(message?.conversationId ?? "")
        seqs.append(message?.seq ?? 0)
        payloads.append(payload ?? "")
        rendered.append(payload ?? message?.rendered ?? "")
        payloadIndexes.append(-1)
    }
}

/// Messages to insert, column by column.
private struct MessageRows {
    var serverIds: [String] = []
    var clientMessageIds: [String] = []
    var conversationIds: [String] = []
    var seqs: [Int64] = []
    var senderIds: [String] = []
    var senderDeviceIds: [String] = []
    var types: [String] = []
    var bodies: [String] = []
    var clientTimestamps: [Int64] = []
    var acceptedAt: [Int64] = []
    var storedAt: [Int64] = []

    mutating func append(_ message: Message) {
        serverIds.append(message.serverId)
        clientMessageIds.append(message.clientMessageId)
        conversationIds.append(message.conversationId)
        seqs.append(message.seq)
        senderIds.append(message.senderId)
        senderDeviceIds.append(message.senderDeviceId)
        types.append(message.type)
        bodies.append(message.body)
        clientTimestamps.append(message.clientTimestamp)
        acceptedAt.append(message.acceptedAt)
        storedAt.append(message.storedAt)
    }

    func insert(_ connection: PostgresConnection, logger: Logger) async throws {
        guard !serverIds.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO messages(server_id, client_message_id, conversation_id, seq, sender_id, sender_device_id, type, body,
                client_timestamp, accepted_at, stored_at)
            SELECT * FROM unnest(\(serverIds)::text[], \(clientMessageIds)::text[], \(conversationIds)::text[], \(seqs)::bigint[],
                \(senderIds)::text[], \(senderDeviceIds)::text[], \(types)::text[], \(bodies)::text[], \(clientTimestamps)::bigint[],
                \(acceptedAt)::bigint[], \(storedAt)::bigint[])
            """, logger: logger)
    }
}

/// Dead letters to insert, column by column.
private struct DeadLetterRows {
    var messages: [BufferedMessage] = []
    var failedAt: [Int64] = []
    var codes: [String] = []
    var errors: [String] = []

    mutating func append(_ message: BufferedMessage, failedAt now: Int64, error: ErrorDetail) {
        messages.append(message)
        failedAt.append(now)
        codes.append(error.code.rawValue)
        errors.append(error.message)
    }

    func insert(_ connection: PostgresConnection, logger: Logger) async throws {
        guard !messages.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO dead_letters(server_id, conversation_id, client_message_id, sender_id, sender_device_id, type, body,
                client_timestamp, accepted_at, failed_at, error_code, error_message)
            SELECT * FROM unnest(\(messages.map(\.serverId))::text[], \(messages.map(\.conversationId))::text[],
                \(messages.map(\.clientMessageId))::text[], \(messages.map(\.senderId))::text[], \(messages.map(\.senderDeviceId))::text[],
                \(messages.map(\.type))::text[], \(messages.map(\.body))::text[], \(messages.map(\.clientTimestamp))::bigint[],
                \(messages.map(\.acceptedAt))::bigint[], \(failedAt)::bigint[], \(codes)::text[], \(errors)::text[])
            ON CONFLICT (server_id) DO UPDATE SET failed_at = excluded.failed_at, error_code = excluded.error_code,
                error_message = excluded.error_message
            """, logger: logger)
    }
}

/// Runs `operation`, throwing `CancellationError` if it takes longer than `timeout`.
func withTimeout<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw CancellationError()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
