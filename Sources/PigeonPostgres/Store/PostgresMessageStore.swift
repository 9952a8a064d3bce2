import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PostgresNIO
import ServiceLifecycle

/// The production store: PostgreSQL through postgres-nio's pooled `PostgresClient`.
///
/// - One transaction per processing batch: the batch's conversations are locked (`FOR UPDATE`, in id order),
///   seqs assigned, messages, dead letters and events inserted with one `UNNEST` statement per table
///   (`+Processing`); receipts are written in groups (`+Receipts`).
/// - The event log is split in partitions (``EventPartitioning`` of the conversation id, `+Events`). A partition's
///   offsets come from its row in `event_partitions`, bumped inside each writing transaction and locked to its
///   commit, so offsets are in commit order within a partition: a reader that sees offset n has seen every lower
///   one. Writers of different partitions share no row and no lock (docs/PRODUCTION.md).
/// - What a commit wrote goes to ``fanout`` right after the commit, which brings it to the devices of every node.
public final class PostgresMessageStore: MessageStore, Service {
    public let epoch: String
    /// How many partitions the event log has (fixed while the node runs).
    public let eventPartitions: Int
    /// How committed events, presence and typing reach the devices connected to every node.
    public let fanout: PostgresFanout
    /// Internal for the store contract tests, which inspect the tables.
    package let client: PostgresClient
    /// A pool of its own for the uploads of attachments (``PostgresAttachmentStore``), each of which holds a connection
    /// for as long as its client takes to send the body: slow uploads wait for one another, never processing for a
    /// connection. It runs with ``run()`` and opens connections only when uploads come.
    package let attachmentClient: PostgresClient
    /// The key ring bodies, payloads, push data and attachment chunks are sealed with at rest (``AtRestCipher/off``:
    /// none): values are sealed in Swift before a statement carries them and opened as rows are decoded.
    package let cipher: AtRestCipher
    package let logger: Logger
    package let faultInjector: ProcessingFaultInjector?
    /// Where a batch's transaction reports the time of its stages (connection, begin, read, write, commit).
    package let stageTimer: ProcessingStageTimer
    /// Members by conversation; every node drops a conversation's entry when any node changes its members
    /// (``PostgresFanout/announceMembersChange(_:)``), and processing re-reads them under the conversation's lock.
    package let membersCache = MembersCache()
    /// The last seq of conversations as this node's own batches left them: a batch of these conversations is written
    /// in one statement that checks them (`+Processing`); a wrong one only costs a retry under the locks.
    package let lastSeqCache = NIOLockedValueBox([String: Int64]())
    /// Members' watermarks as this node's own receipt groups left them: a group of these members is written in one
    /// statement that checks them (`+Receipts`).
    package let watermarkCache = NIOLockedValueBox([WatermarkKey: (delivered: Int64, read: Int64)]())
    /// Receipts waiting for the next receipt transaction (``writeReceipts()``).
    package let pendingReceipts = NIOLockedValueBox([PendingReceipt]())
    package let receiptWakeUp = AsyncSignal()
    /// Reactions waiting for the next reaction transaction (``writeReactions()``).
    package let pendingReactions = NIOLockedValueBox([PendingReaction]())
    package let reactionWakeUp = AsyncSignal()
    /// The webhook events this store records with what they report (``WebhookOutbox/off``: none).
    package let webhooks: WebhookOutbox
    /// The consent rules creations and adds are held to (``setConsentRules(_:)``).
    package let consentRules = NIOLockedValueBox(ConsentRules.open)
    /// Blocked user id → the users who block it (sorted), for typing; every node forgets an entry when any node changes
    /// a block of that user (``PostgresFanout/announceBlocksChange(_:)``).
    package let blockersCache = MembersCache(limit: 100_000)
    /// Conversations whose batches this node stores on the locking path only, because a member blocks a sender there or
    /// is invited: the one-statement path refuses such batches (`+Processing`), so trying it first would only cost a retry.
    package let consentConversations = NIOLockedValueBox(Set<String>())

    /// Connects, applies migrations and the event log's partition layout, and reads the store's identity; ``run()``
    /// must run for queries to be served. `local` is this node's own fan-out (its stream hub). `uploadConnections` is
    /// the size of the uploads' own pool (``attachmentClient``): at most that many uploads are written at once, the
    /// others wait for a connection.
    public static func open(
        url: String, local: LocalFanout, faultInjector: ProcessingFaultInjector? = nil, logger: Logger, maxConnections: Int = 20,
        nodeId: String? = nil, stageTimer: ProcessingStageTimer = .none, clock: any Clock<Duration> = ContinuousClock(),
        uploadConnections: Int = 4, webhooks: WebhookOutbox = .off, cipher: AtRestCipher = .off
    ) async throws -> PostgresMessageStore {
        let nodeId = nodeId ?? "node-" + Identifiers.randomHex(bytes: 8)
        let parsed = try PostgresURL(url)
        let connection = try await PostgresConnection.connect(configuration: parsed.connectionConfiguration(), id: 1, logger: logger)
        do {
            if let schema = parsed.schema {
                try await connection.query(PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \(schema)"), logger: logger)
            }
            try await PostgresSchema.migrate(connection, logger: logger)
            try await Self.verifyAndRecord(cipher, connection, logger: logger)
            let (epoch, partitions) = try await PostgresSchema.applyLayout(
                connection, partitions: parsed.eventPartitions, nodeId: nodeId, logger: logger)
            var head = [Int64](repeating: 0, count: partitions)
            for try await (part, offset) in try await connection.query(
                "SELECT part, last_offset FROM event_partitions WHERE part < \(partitions)", logger: logger
            ).decode((Int32, Int64).self) {
                head[Int(part)] = offset
            }
            let revocationHead = try await Self.revocationHead(connection, logger: logger)
            try await connection.close()
            let client = PostgresClient(configuration: parsed.clientConfiguration(maxConnections: maxConnections), backgroundLogger: logger)
            var uploads = parsed.clientConfiguration(maxConnections: uploadConnections)
            uploads.options.maximumConnections = max(1, uploadConnections)
            uploads.options.minimumConnections = 0
            return PostgresMessageStore(
                epoch: epoch, head: head, revocationHead: revocationHead, client: client,
                attachmentClient: PostgresClient(configuration: uploads, backgroundLogger: logger), local: local, faultInjector: faultInjector,
                logger: logger, nodeId: nodeId, stageTimer: stageTimer, clock: clock, webhooks: webhooks, cipher: cipher)
        } catch {
            try? await connection.close()
            throw error
        }
    }

    private init(
        epoch: String, head: [Int64], revocationHead: Int64, client: PostgresClient, attachmentClient: PostgresClient, local: LocalFanout,
        faultInjector: ProcessingFaultInjector?, logger: Logger, nodeId: String, stageTimer: ProcessingStageTimer, clock: any Clock<Duration>,
        webhooks: WebhookOutbox, cipher: AtRestCipher
    ) {
        self.webhooks = webhooks
        self.cipher = cipher
        self.epoch = epoch
        self.stageTimer = stageTimer
        self.eventPartitions = head.count
        self.client = client
        self.attachmentClient = attachmentClient
        self.faultInjector = faultInjector
        self.logger = logger
        self.fanout = PostgresFanout(
            client: client, epoch: epoch, nodeId: nodeId, head: head, revocationHead: revocationHead, local: local, logger: logger,
            stageTimer: stageTimer, clock: clock,
            readEvents: { [client, logger] after, partitions, users, pageSize in
                try await Self.readEvents(
                    client, after: after, partitions: partitions, users: users, pageSize: pageSize, cipher: cipher, logger: logger)
            },
            readRevocations: { [client, logger] after, limit in
                try await Self.readRevocations(client, after: after, limit: limit, logger: logger)
            })
        fanout.onBlocksChanged { [blockersCache] userId in blockersCache.changed(userId, members: nil) }
        fanout.onMembersChanged { [membersCache, lastSeqCache, watermarkCache] conversationId in
            membersCache.changed(conversationId, members: nil)
            lastSeqCache.withLockedValue { $0[conversationId] = nil }
            watermarkCache.withLockedValue { cache in
                for key in cache.keys where key.conversationId == conversationId { cache[key] = nil }
            }
        }
    }

    /// Runs the connection pools (the uploads' too), the fan-out and the receipt writer until graceful shutdown or
    /// cancellation. List it before the processor among the services, so it stops after the processor drained.
    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.client.run() }
            group.addTask { await self.attachmentClient.run() }
            await cancelWhenGracefulShutdown {
                await withTaskGroup(of: Void.self) { inner in
                    inner.addTask { try? await self.fanout.run() }
                    inner.addTask { await self.writeReceipts() }
                    inner.addTask { await self.writeReactions() }
                    await inner.waitForAll()
                }
            }
            // The pools stop last: the fan-out and the receipt writer no longer need them. An upload still writing
            // fails with its connection, and its transaction is rolled back.
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

    /// ``transaction(_:)`` that reports how long it waited for a connection, its `BEGIN` and its `COMMIT` took.
    package func timedTransaction<Result>(_ body: (PostgresConnection) async throws -> sending Result) async throws -> sending Result {
        let clock = ContinuousClock()
        let started = clock.now
        do {
            return try await client.withConnection { [logger, stageTimer] connection in
                let leased = clock.now
                stageTimer.record(.connection, leased - started)
                var bodyEnded: ContinuousClock.Instant?
                let result = try await connection.withTransaction(logger: logger) { connection in
                    stageTimer.record(.begin, clock.now - leased)
                    let result = try await body(connection)
                    bodyEnded = clock.now
                    return result
                }
                if let bodyEnded { stageTimer.record(.commit, clock.now - bodyEnded) }
                return result
            }
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
    }

    /// A transaction; the closure's own error is rethrown as it is (not wrapped), after the rollback.
    package func transaction<Result>(_ body: (PostgresConnection) async throws -> sending Result) async throws -> sending Result {
        do {
            return try await client.withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
    }

    // MARK: Conversations

    public func createConversation(creator: String, members: [String], name: String?, admission: MemberAdmission) async throws -> Conversation {
        let (conversation, userIds, committed) = try await transaction { connection -> (Conversation, [String], [StoredEvent]) in
            let admitted = try await admit(
                connection, NewConversation.added(by: creator, members: members), by: creator, admission: admission, now: WallClock.nowMillis())
            let (conversation, userIds) = NewConversation.make(creator: creator, members: members, name: name, invited: admitted.invited)
            let payload = try EventPayload().conversationCreated(conversation)
            let (id, now) = (conversation.id, conversation.createdAt)
            try await connection.query(
                """
                INSERT INTO conversations(id, kind, name, created_by, created_at, updated_at)
                VALUES (\(id), \(conversation.kind.rawValue), \(name), \(creator), \(now), \(now))
                """,
                logger: logger)
            try await connection.query(
                """
                INSERT INTO members(conversation_id, user_id, role, joined_seq, membership)
                SELECT \(id), u, r, 0, s FROM unnest(\(userIds)::text[], \(conversation.members.map(\.role.rawValue))::text[],
                    \(conversation.members.map(\.membership.rawValue))::text[]) AS t(u, r, s)
                """, logger: logger)
            var events = EventRows()
            events.append(type: "conversation.created", userIds: userIds, sharedPayload: payload, at: now, partition: partition(of: id))
            events.webhooks.record(try webhooks.conversationCreated(conversation, at: now))
            return (conversation, userIds, try await insert(events, connection))
        }
        membersCache.changed(conversation.id, members: userIds)
        fanout.publish(committed)
        return conversation
    }

    public func conversations(of userId: String, before: ConversationCursor?, limit: Int, membership: MembershipState) async throws
        -> ConversationList
    {
        let position: PostgresQuery
        let state = membership.rawValue
        switch before {
        case nil:
            position = """
                SELECT c.id, c.kind, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id
                WHERE m.user_id = \(userId) AND m.membership = \(state)
                """
        case let cursor? where cursor.id == nil:
            position = """
                SELECT c.id, c.kind, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id
                WHERE m.user_id = \(userId) AND m.membership = \(state) AND c.updated_at < \(cursor.updatedAt)
                """
        case let cursor?:
            position = """
                SELECT c.id, c.kind, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id
                WHERE m.user_id = \(userId) AND m.membership = \(state) AND (c.updated_at, c.id) < (\(cursor.updatedAt), \(cursor.id ?? ""))
                """
        }
        var query = position
        query.sql += " ORDER BY c.updated_at DESC, c.id DESC LIMIT \(limit + 1)"
        var conversations: [Conversation] = []
        for try await (id, kind, name, createdAt, lastSeq, updatedAt) in try await client.query(query, logger: logger)
            .decode((String, String, String?, Int64, Int64, Int64).self)
        {
            conversations.append(
                Conversation(
                    id: id, kind: ConversationKind(rawValue: kind) ?? .group, name: name, createdAt: createdAt, lastSeq: lastSeq,
                    updatedAt: updatedAt, members: []))
        }
        let ids = conversations.prefix(limit).map(\.id)
        var membersByConversation: [String: [ConversationMember]] = [:]
        for try await (conversationId, member, role, joinedSeq, delivered, read, membership) in try await client.query(
            """
            SELECT conversation_id, \(unescaped: Self.memberColumns) FROM members
            WHERE conversation_id = ANY(\(ids)) ORDER BY conversation_id, user_id
            """, logger: logger
        ).decode((String, String, String, Int64, Int64, Int64, String).self) {
            membersByConversation[conversationId, default: []].append(Self.member((member, role, joinedSeq, delivered, read, membership)))
        }
        for index in conversations.indices {
            conversations[index].members = membersByConversation[conversations[index].id] ?? []
        }
        try await addCallerView(&conversations, ids: ids, userId: userId)
        return ConversationList(page: conversations, limit: limit)
    }

    public func conversation(id: String, for userId: String) async throws -> Conversation? {
        guard let members = try await members(of: id), members.contains(userId) else { return nil }
        return try await conversationView(id: id, for: userId)
    }

    public func conversation(id: String) async throws -> Conversation? {
        try await conversationView(id: id, for: nil)
    }

    /// The conversation with its members and `userId`'s view of it (nil: no one's), whether or not `userId` is a member.
    package func conversationView(id: String, for userId: String?) async throws -> Conversation? {
        let logger = logger
        guard let conversation = try await client.withConnection({ connection in try await Self.conversationRows(connection, id: id, logger: logger) })
        else { return nil }
        guard let userId else { return conversation }
        var one = [conversation]
        try await addCallerView(&one, ids: [id], userId: userId)
        return one[0]
    }

    /// The caller's view of conversations (API.md 1.1): each one's newest message (it is visible to every member:
    /// a late joiner joined at a seq at or below it), and the other members' messages above the caller's read
    /// watermark, not counting the server's own `pigeon.*` ones. Two statements for a whole page; a non-member (who
    /// just left) sees neither.
    ///
    /// A message hidden from the caller by a block is neither its last message nor unread (the newest one it may see is
    /// looked up only where the newest of all is hidden from it); an invited member has no unread count until it
    /// accepts; the other members' watermarks are shown as they are.
    private func addCallerView(_ conversations: inout [Conversation], ids: [String], userId: String) async throws {
        let ids = ids.filter { id in conversations.contains { $0.id == id && $0.members.contains { $0.userId == userId } } }
        guard !ids.isEmpty else { return }
        var last: [String: Message] = [:]
        for try await row in try await client.query(
            """
            SELECT \(unescaped: Self.joinedMessageColumns) FROM unnest(\(ids)::text[]) AS k(id)
            CROSS JOIN LATERAL (
                SELECT * FROM messages m WHERE m.conversation_id = k.id
                    AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = \(userId))
                ORDER BY m.seq DESC LIMIT 1) m
            """, logger: logger
        ).decode(MessageTuple.self) {
            let message = try Self.message(row, cipher: cipher)
            last[message.conversationId] = message
        }
        var lastMessages = Array(last.values)
        try await decorate(&lastMessages, reader: userId)
        for message in lastMessages { last[message.conversationId] = message }
        var unread: [String: Int] = [:]
        for try await (conversationId, count) in try await client.query(
            """
            SELECT me.conversation_id, count(m.seq) FROM members me
            JOIN messages m ON m.conversation_id = me.conversation_id AND m.seq > me.read_seq AND m.sender_id <> me.user_id
                AND m.type NOT LIKE 'pigeon.%'
                AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = me.user_id)
            WHERE me.user_id = \(userId) AND me.membership = 'joined' AND me.conversation_id = ANY(\(ids)) GROUP BY me.conversation_id
            """, logger: logger
        ).decode((String, Int64).self) {
            unread[conversationId] = Int(count)
        }
        for index in conversations.indices {
            conversations[index].lastMessage = last[conversations[index].id]
            conversations[index].unreadCount = unread[conversations[index].id] ?? 0
        }
    }

    public func cachedMembers(of conversationId: String) -> [String]? {
        membersCache[conversationId]
    }

    public func members(of conversationId: String) async throws -> [String]? {
        if let cached = membersCache[conversationId] { return cached }
        let generation = membersCache.generation(of: conversationId)
        var members: [String] = []
        for try await member in try await client.query(
            "SELECT user_id FROM members WHERE conversation_id = \(conversationId) ORDER BY user_id", logger: logger
        ).decode(String.self) {
            members.append(member)
        }
        guard !members.isEmpty else { return nil }
        membersCache.store(members, for: conversationId, ifGeneration: generation)
        return members
    }

    public func member(_ userId: String, of conversationId: String) async throws -> ConversationMember? {
        for try await row in try await client.query(
            "SELECT \(unescaped: Self.memberColumns) FROM members WHERE conversation_id = \(conversationId) AND user_id = \(userId)",
            logger: logger
        ).decode(MemberTuple.self) {
            return Self.member(row)
        }
        return nil
    }

    // MARK: History

    package static let messageColumnNames = [
        "server_id", "client_message_id", "conversation_id", "seq", "sender_id", "sender_device_id", "type", "body", "client_timestamp",
        "accepted_at", "stored_at", "edited_at", "deleted_at", "reply_to", "thread_root", "thread_count", "thread_last_at", "thread_senders",
        "attachments",
    ]

    /// A message row's columns, in ``MessageTuple``'s order.
    package static let messageColumns = messageColumnNames.joined(separator: ", ")

    /// ``messageColumns`` of the messages row `m`.
    package static let joinedMessageColumns = messageColumnNames.map { "m." + $0 }.joined(separator: ", ")

    package typealias MessageTuple = (
        String, String, String, Int64, String, String, String, String, Int64, Int64, Int64, Int64?, Int64?, String?, String?, Int32, Int64?, String?,
        String?
    )

    /// The message of a row as it is stored: its thread summary from the root's columns, its attachments from their
    /// column, without its reactions and reply preview (``decorate(_:reader:)`` adds them).
    package static func message(_ t: MessageTuple, cipher: AtRestCipher) throws -> Message {
        Message(
            serverId: t.0, clientMessageId: t.1, conversationId: t.2, seq: t.3, senderId: t.4, senderDeviceId: t.5, type: t.6,
            body: try cipher.open(t.7),
            clientTimestamp: t.8, acceptedAt: t.9, storedAt: t.10, editedAt: t.11, deletedAt: t.12, replyTo: t.13, threadRoot: t.14,
            thread: t.15 > 0 ? ThreadSummary(replyCount: Int(t.15), lastReplyAt: t.16 ?? 0, lastReplySenders: ReplyRules.senders(t.17)) : nil,
            attachments: AttachmentColumn.decode(t.18))
    }

    /// Adds to `messages` their reactions as `reader` sees them and their reply previews, as of now.
    package func decorate(_ messages: inout [Message], reader: String?) async throws {
        try await Self.decorate(&messages, readers: Array(repeating: reader, count: messages.count), client: client, cipher: cipher, logger: logger)
    }

    /// Adds to each of `messages` its reactions as the user of the same index in `readers` sees them, and its reply
    /// preview, as of now: one statement for all the messages' reactions, one for all their quotes.
    package static func decorate(
        _ messages: inout [Message], readers: [String?], client: PostgresClient, cipher: AtRestCipher, logger: Logger
    ) async throws {
        guard !messages.isEmpty else { return }
        let reactions = try await reactionRows(of: messages.map { ($0.conversationId, $0.seq) }, client: client, logger: logger)
        let previews = try await previews(
            of: messages.compactMap { message in message.replyTo.map { (message.conversationId, $0) } }, client: client, cipher: cipher,
            logger: logger)
        let blind = try await blindQuotes(
            messages.indices.compactMap { index in
                guard let replyTo = messages[index].replyTo, let reader = readers[index] else { return nil }
                return (messages[index].conversationId, replyTo, reader)
            }, client: client, logger: logger)
        // The versions the readers keep of edited messages, and of edited quoted ones (an edit hidden from them).
        var viewKeys: [(conversationId: String, seq: Int64, reader: String)] = []
        for index in messages.indices {
            guard let reader = readers[index] else { continue }
            if messages[index].editedAt != nil { viewKeys.append((messages[index].conversationId, messages[index].seq, reader)) }
            if let replyTo = messages[index].replyTo, let quoted = previews[MessageKey(conversationId: messages[index].conversationId, serverId: replyTo)],
                quoted.edited
            {
                viewKeys.append((messages[index].conversationId, quoted.seq, reader))
            }
        }
        let views = try await views(viewKeys, client: client, cipher: cipher, logger: logger)
        let own = messages.indices.filter { readers[$0] == messages[$0].senderId }
        let withheld = try await withheld(own.map { (messages[$0].conversationId, messages[$0].seq) }, client: client, logger: logger)
        for index in own {
            messages[index].withheldFrom = withheld[MessageKey(conversationId: messages[index].conversationId, seq: messages[index].seq)]
        }
        for index in messages.indices {
            if let rows = reactions[MessageKey(conversationId: messages[index].conversationId, seq: messages[index].seq)] {
                messages[index].reactions = ReactionRules.aggregate(rows, reader: readers[index])
            }
            if let reader = readers[index], messages[index].editedAt != nil,
                let view = views[[messages[index].conversationId, String(messages[index].seq), reader]]
            {
                messages[index].body = view.body
                messages[index].editedAt = view.editedAt
            }
            if let replyTo = messages[index].replyTo, let quoted = previews[MessageKey(conversationId: messages[index].conversationId, serverId: replyTo)] {
                var preview = quoted.preview
                if let reader = readers[index] {
                    if blind.contains([messages[index].conversationId, replyTo, reader]) {
                        preview = preview.unavailableForm
                    } else if let view = views[[messages[index].conversationId, String(quoted.seq), reader]] {
                        preview = QuoteViews(bodies: [reader: view.body]).preview(of: preview, for: reader) ?? preview
                    }
                }
                messages[index].replyPreview = preview
            }
        }
    }

    /// The members each of the messages named (conversation, seq) is hidden from, by message (none: absent).
    private static func withheld(_ keys: [(conversationId: String, seq: Int64)], client: PostgresClient, logger: Logger) async throws
        -> [MessageKey: [String]]
    {
        guard !keys.isEmpty else { return [:] }
        var withheld: [MessageKey: [String]] = [:]
        for try await (conversationId, seq, userId) in try await client.query(
            """
            SELECT h.conversation_id, h.seq, h.user_id FROM hidden_messages h
            JOIN unnest(\(keys.map(\.conversationId))::text[], \(keys.map(\.seq))::bigint[]) AS k(c, s) ON h.conversation_id = k.c AND h.seq = k.s
            ORDER BY h.user_id
            """, logger: logger
        ).decode((String, Int64, String).self) {
            withheld[MessageKey(conversationId: conversationId, seq: seq), default: []].append(userId)
        }
        return withheld
    }

    /// The versions readers keep of messages an edit of which was hidden from them, by [conversation, seq, reader].
    private static func views(
        _ keys: [(conversationId: String, seq: Int64, reader: String)], client: PostgresClient, cipher: AtRestCipher, logger: Logger
    ) async throws -> [[String]: (body: String, editedAt: Int64?)] {
        guard !keys.isEmpty else { return [:] }
        var views: [[String]: (body: String, editedAt: Int64?)] = [:]
        for try await (conversationId, seq, userId, body, editedAt) in try await client.query(
            """
            SELECT v.conversation_id, v.seq, v.user_id, v.body, v.edited_at FROM message_views v
            JOIN unnest(\(keys.map(\.conversationId))::text[], \(keys.map(\.seq))::bigint[], \(keys.map(\.reader))::text[]) AS k(c, s, r)
                ON v.conversation_id = k.c AND v.seq = k.s AND v.user_id = k.r
            """, logger: logger
        ).decode((String, Int64, String, String, Int64?).self) {
            let opened: String = try cipher.open(body)
            views[[conversationId, String(seq), userId]] = (opened, editedAt)
        }
        return views
    }

    /// Of the quotes named (conversation, quoted serverId, reader), those the reader may not read, as [conversation,
    /// serverId, reader]: the quoted message is older than the reader's membership (or the reader is no member), or
    /// it is hidden from the reader by a block.
    private static func blindQuotes(
        _ quotes: [(conversationId: String, serverId: String, reader: String)], client: PostgresClient, logger: Logger
    ) async throws -> Set<[String]> {
        guard !quotes.isEmpty else { return [] }
        var blind = Set<[String]>()
        for try await (conversationId, serverId, reader) in try await client.query(
            """
            SELECT DISTINCT k.c, k.i, k.r FROM unnest(\(quotes.map(\.conversationId))::text[], \(quotes.map(\.serverId))::text[],
                \(quotes.map(\.reader))::text[]) AS k(c, i, r)
            JOIN messages t ON t.server_id = k.i AND t.conversation_id = k.c
            LEFT JOIN members me ON me.conversation_id = k.c AND me.user_id = k.r
            WHERE me.user_id IS NULL OR me.joined_seq > t.seq
                OR EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = k.c AND h.seq = t.seq AND h.user_id = k.r)
            """, logger: logger
        ).decode((String, String, String).self) {
            blind.insert([conversationId, serverId, reader])
        }
        return blind
    }

    /// A message by its conversation and seq, or by its conversation and serverId.
    package struct MessageKey: Hashable {
        package var conversationId: String
        package var seq: Int64 = 0
        package var serverId = ""
    }

    /// The reply previews of the messages named (conversation, serverId), as of now, with their seqs and whether
    /// they were edited.
    private static func previews(
        of targets: [(conversationId: String, serverId: String)], client: PostgresClient, cipher: AtRestCipher, logger: Logger
    ) async throws -> [MessageKey: (seq: Int64, edited: Bool, preview: ReplyPreview)] {
        guard !targets.isEmpty else { return [:] }
        var previews: [MessageKey: (seq: Int64, edited: Bool, preview: ReplyPreview)] = [:]
        for try await (conversationId, serverId, senderId, type, body, deleted, seq, edited) in try await client.query(
            """
            SELECT m.conversation_id, m.server_id, m.sender_id, m.type, m.body, m.deleted_at IS NOT NULL, m.seq, m.edited_at IS NOT NULL
            FROM messages m
            JOIN unnest(\(targets.map(\.conversationId))::text[], \(targets.map(\.serverId))::text[]) AS k(c, i)
                ON m.server_id = k.i AND m.conversation_id = k.c
            """, logger: logger
        ).decode((String, String, String, String, String, Bool, Int64, Bool).self) {
            previews[MessageKey(conversationId: conversationId, serverId: serverId)] = (
                seq, edited, ReplyPreview(serverId: serverId, senderId: senderId, type: type, body: try cipher.open(body), deleted: deleted)
            )
        }
        return previews
    }

    public func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?) async throws
        -> MessagePage
    {
        var (messages, hasMore) = try await page(
            conversationId: conversationId, threadRoot: nil, after: after, before: before, limit: limit, visibleFrom: visibleFrom, hidingFrom: reader)
        try await decorate(&messages, reader: reader)
        return MessagePage(messages: messages, hasMore: hasMore)
    }

    /// A page of the conversation's messages (only the replies in the thread of `threadRoot` when given), ascending by
    /// seq, as ``messages(conversationId:after:before:limit:visibleFrom:reader:)`` pages them, undecorated, without
    /// the messages hidden from `hidingFrom` by a block.
    package func page(
        conversationId: String, threadRoot: String?, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, hidingFrom: String?
    ) async throws -> (messages: [Message], hasMore: Bool) {
        let query: PostgresQuery
        // "" matches no user: no message is hidden from no one.
        let reader = hidingFrom ?? ""
        switch (threadRoot, after) {
        case (nil, let after?):
            query = """
                SELECT \(unescaped: Self.messageColumns) FROM messages m WHERE conversation_id = \(conversationId)
                    AND seq > \(max(after, visibleFrom - 1))
                    AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = \(reader))
                ORDER BY seq LIMIT \(limit + 1)
                """
        case (nil, nil):
            query = """
                SELECT \(unescaped: Self.messageColumns) FROM messages m WHERE conversation_id = \(conversationId) AND seq < \(before ?? Int64.max)
                    AND seq >= \(visibleFrom)
                    AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = \(reader))
                ORDER BY seq DESC LIMIT \(limit + 1)
                """
        case (let root?, let after?):
            query = """
                SELECT \(unescaped: Self.messageColumns) FROM messages m WHERE conversation_id = \(conversationId) AND thread_root = \(root)
                    AND seq > \(max(after, visibleFrom - 1))
                    AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = \(reader))
                ORDER BY seq LIMIT \(limit + 1)
                """
        case (let root?, nil):
            query = """
                SELECT \(unescaped: Self.messageColumns) FROM messages m WHERE conversation_id = \(conversationId) AND thread_root = \(root)
                    AND seq < \(before ?? Int64.max) AND seq >= \(visibleFrom)
                    AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = m.conversation_id AND h.seq = m.seq AND h.user_id = \(reader))
                ORDER BY seq DESC LIMIT \(limit + 1)
                """
        }
        var messages: [Message] = []
        for try await row in try await client.query(query, logger: logger).decode(MessageTuple.self) {
            messages.append(try Self.message(row, cipher: cipher))
        }
        let hasMore = messages.count > limit
        if hasMore { messages.removeLast() }
        if after == nil { messages.reverse() }
        return (messages, hasMore)
    }

    // MARK: Dead letters

    public func deadLetters(limit: Int) async throws -> [DeadLetter] {
        var letters: [DeadLetter] = []
        for try await t in try await client.query(
            """
            SELECT server_id, client_message_id, conversation_id, sender_id, sender_device_id, type, body, client_timestamp,
                accepted_at, failed_at, error_code, error_message, reply_to, thread_root, attachments
            FROM dead_letters ORDER BY failed_at, server_id LIMIT \(limit)
            """, logger: logger
        ).decode((String, String, String, String, String, String, String, Int64, Int64, Int64, String, String, String?, String?, String?).self) {
            letters.append(
                DeadLetter(
                    message: Message(
                        serverId: t.0, clientMessageId: t.1, conversationId: t.2, seq: 0, senderId: t.3, senderDeviceId: t.4, type: t.5,
                        body: try cipher.open(t.6), clientTimestamp: t.7, acceptedAt: t.8, storedAt: 0, replyTo: t.12, threadRoot: t.13,
                        attachments: AttachmentColumn.decode(t.14)),
                    failedAt: t.9, error: ErrorDetail(code: ErrorCode(rawValue: t.10), message: t.11)))
        }
        return letters
    }

    public func deadLetter(serverId: String) async throws -> BufferedMessage? {
        for try await t in try await client.query(
            """
            SELECT server_id, conversation_id, sender_id, sender_device_id, client_message_id, type, body, client_timestamp, accepted_at,
                reply_to, thread_root, attachments
            FROM dead_letters WHERE server_id = \(serverId)
            """, logger: logger
        ).decode((String, String, String, String, String, String, String, Int64, Int64, String?, String?, String?).self) {
            return BufferedMessage(
                serverId: t.0, conversationId: t.1, senderId: t.2, senderDeviceId: t.3, clientMessageId: t.4, type: t.5,
                body: try cipher.open(t.6),
                clientTimestamp: t.7, acceptedAt: t.8, replyTo: t.9, threadRoot: t.10, attachments: AttachmentColumn.decode(t.11))
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
}
