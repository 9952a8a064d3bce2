import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// The embedded store: one SQLite file (WAL), writes through group commit.
public final class SQLiteMessageStore: MessageStore {
    public typealias FaultInjector = ProcessingFaultInjector

    public let epoch: String
    /// The log this one was restored from, when it was (``markRestored(path:)``).
    public let formerLog: FormerEventLog?
    /// Internal for the store contract tests, which inspect the tables.
    package let pool: DatabasePool
    package let writer: GroupCommitWriter
    package let fanout: any Fanout
    private let faultInjector: FaultInjector?
    /// conversation id → sorted member user ids.
    package let membersCache = MembersCache()
    package let diskHealth: SQLiteDiskHealth
    /// The webhook events this store records with what they report (``WebhookOutbox/off``: none).
    package let webhooks: WebhookOutbox
    /// The consent rules and whether blocks or invitations exist (`+Consent`).
    package let consent = NIOLockedValueBox(SQLiteConsentState())
    /// Blocked user id → the users who block it (sorted), for typing (``blockers(of:)``).
    package let blockersCache = MembersCache(limit: 100_000)
    /// The key ring values are sealed with at rest (``AtRestCipher/off``: none); attachments' files use it too.
    package let cipher: AtRestCipher

    /// Opens (creating or migrating) the store at `path`. With `cipher` on, bodies, event and webhook payloads and push
    /// data are sealed as they are written (``AtRestFunctions``); a store the cipher cannot open is refused here.
    public init(
        path: String, durable: Bool = true, fanout: any Fanout, faultInjector: FaultInjector? = nil, webhooks: WebhookOutbox = .off,
        cipher: AtRestCipher = .off
    ) throws {
        self.webhooks = webhooks
        self.cipher = cipher
        self.diskHealth = SQLiteDiskHealth(path: path)
        self.pool = try SQLiteDatabase.open(path: path, durable: durable, cipher: cipher)
        try SQLiteSchema.migrator.migrate(pool)
        try pool.write { db in try AtRestFunctions.verifyAndRecord(cipher, db) }
        self.epoch = try pool.write { db in
            if let epoch = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'epoch'") { return epoch }
            let epoch = Identifiers.randomHex(bytes: 4)
            try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('epoch', ?)", arguments: [epoch])
            return epoch
        }
        self.formerLog = try pool.read { db in
            let values = try Dictionary(
                uniqueKeysWithValues: Row.fetchAll(db, sql: "SELECT key, value FROM meta WHERE key IN ('restored_epoch', 'restored_head')").map {
                    ($0[0] as String, $0[1] as String)
                })
            guard let epoch = values["restored_epoch"], let head = values["restored_head"].flatMap({ Int64($0) }) else { return nil }
            return FormerEventLog(epoch: epoch, head: EventPosition(offsets: [head]))
        }
        let (blocksExist, invitesExist) = try pool.read { db in
            (
                try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM blocks) OR EXISTS(SELECT 1 FROM hidden_messages)") ?? false,
                try Bool.fetchOne(db, sql: "SELECT EXISTS(SELECT 1 FROM members WHERE membership = 'invited')") ?? false
            )
        }
        consent.withLockedValue {
            $0.blocksExist = blocksExist
            $0.invitesExist = invitesExist
        }
        self.writer = GroupCommitWriter(writer: pool)
        self.fanout = fanout
        self.faultInjector = faultInjector
    }

    /// Not ready while the disk refuses writes: then, once the file system has headroom again, each call tries a tiny
    /// write, so readiness comes back with space.
    public func isReady() async -> Bool {
        await diskHealth.isReady(
            probe: {
                let now = WallClock.nowMillis()
                try await write { db in try db.execute(sql: "INSERT INTO meta(key, value) VALUES ('disk_probe', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", arguments: [String(now)]) }
            },
            read: { _ = try await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") } })
    }

    public var isDiskFull: Bool { diskHealth.isRefusingWrites }

    /// A group-committed write; a disk that refuses it is answered with ``SQLiteDiskHealth/refusal``.
    @discardableResult
    package func write<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> T, afterCommit: (@Sendable (T) -> Void)? = nil
    ) async throws -> T {
        try await diskHealth.guarding { try await writer.write(body, afterCommit: afterCommit) }
    }

    // MARK: Conversations

    public func createConversation(creator: String, members: [String], name: String?, admission: MemberAdmission) async throws -> Conversation {
        let written = try await write(
            { [self] db -> (Conversation, [String], [StoredEvent]) in
                let admitted = try admit(
                    db, NewConversation.added(by: creator, members: members), by: creator, admission: admission, now: WallClock.nowMillis())
                let (conversation, userIds) = NewConversation.make(creator: creator, members: members, name: name, invited: admitted.invited)
                let payload = try EventPayload().conversationCreated(conversation)
                let (id, now) = (conversation.id, conversation.createdAt)
                try db.execute(
                    sql: "INSERT INTO conversations(id, kind, name, created_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [id, conversation.kind.rawValue, name, creator, now, now])
                for member in conversation.members {
                    try db.cachedStatement(sql: "INSERT INTO members(conversation_id, user_id, role, joined_seq, membership) VALUES (?, ?, ?, ?, ?)")
                        .execute(arguments: [id, member.userId, member.role.rawValue, member.joinedSeq, member.membership.rawValue])
                }
                let payloadId = try Self.insertSharedPayload(db, payload)
                try Self.recordWebhook(db, try webhooks.conversationCreated(conversation, at: now))
                let events = try userIds.map { userId in
                    try Self.insertEvent(
                        db, type: "conversation.created", userId: userId, deviceId: nil, excludedDeviceId: nil,
                        payload: payload, at: now, payloadId: payloadId)
                }
                return (conversation, userIds, events)
            },
            afterCommit: { [fanout, membersCache] written in
                membersCache.changed(written.0.id, members: written.1)
                fanout.publish(written.2)
            })
        return written.0
    }

    public func conversations(of userId: String, before: ConversationCursor?, limit: Int, membership: MembershipState) async throws
        -> ConversationList
    {
        try await pool.read { db in
            let position: String
            var arguments: StatementArguments = [userId, membership.rawValue]
            switch before {
            case nil:
                position = ""
            case let cursor? where cursor.id == nil:
                position = "AND c.updated_at < ?"
                arguments += [cursor.updatedAt]
            case let cursor?:
                position = "AND (c.updated_at < ? OR (c.updated_at = ? AND c.id < ?))"
                arguments += [cursor.updatedAt, cursor.updatedAt, cursor.id]
            }
            arguments += [limit + 1]
            var conversations = try Row.fetchAll(
                db,
                sql: """
                    SELECT c.id, c.kind, c.name, c.created_at, c.last_seq, c.updated_at FROM members m JOIN conversations c ON c.id = m.conversation_id
                    WHERE m.user_id = ? AND m.membership = ? \(position) ORDER BY c.updated_at DESC, c.id DESC LIMIT ?
                    """,
                arguments: arguments
            ).map(Self.conversation)
            for index in conversations.indices.prefix(limit) {
                conversations[index].members = try Self.conversationMembers(db, conversations[index].id)
                try Self.addCallerView(db, &conversations[index], userId: userId)
            }
            return ConversationList(page: conversations, limit: limit)
        }
    }

    public func conversation(id: String, for userId: String) async throws -> Conversation? {
        guard let members = try await members(of: id), members.contains(userId) else { return nil }
        return try await pool.read { db in try Self.conversationView(db, id: id, for: userId) }
    }

    public func conversation(id: String) async throws -> Conversation? {
        try await pool.read { db in try Self.conversationView(db, id: id, for: nil) }
    }

    /// The conversation with its members and `userId`'s view of it (nil: no one's), whether or not `userId` is a member.
    static func conversationView(_ db: Database, id: String, for userId: String?) throws -> Conversation? {
        guard
            let row = try Row.fetchOne(
                db, sql: "SELECT id, kind, name, created_at, last_seq, updated_at FROM conversations WHERE id = ?", arguments: [id])
        else { return nil }
        var conversation = Self.conversation(row)
        conversation.members = try Self.conversationMembers(db, id)
        if let userId { try Self.addCallerView(db, &conversation, userId: userId) }
        return conversation
    }

    /// The caller's view of a conversation (API.md 1.1): its newest message visible to it (from its joinedSeq on),
    /// and the other members' messages above its read watermark, not counting the server's own `pigeon.*` ones. A
    /// non-member (who just left) sees neither.
    ///
    /// Messages hidden from the caller by a block are neither its last message nor unread; an invited member has no
    /// unread count until it accepts. The other members' watermarks are shown as they are (the caller's own messages
    /// name the members they are withheld from: ``MessageStore``'s `withheldFrom`).
    private static func addCallerView(_ db: Database, _ conversation: inout Conversation, userId: String) throws {
        guard let me = conversation.members.first(where: { $0.userId == userId }) else { return }
        var last = try Row.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT \(messageColumns) FROM messages WHERE conversation_id = ? AND seq >= ?\(notHidden)
                    ORDER BY seq DESC LIMIT 1
                    """),
            arguments: [conversation.id, me.joinedSeq, userId]
        ).map(Self.message)
        try Self.decorate(db, &last, reader: userId)
        conversation.lastMessage = last.first
        guard me.membership == .joined else {
            conversation.unreadCount = 0
            return
        }
        conversation.unreadCount = try Int.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT count(*) FROM messages WHERE conversation_id = ? AND seq > ? AND sender_id != ? AND type NOT LIKE 'pigeon.%'\(notHidden)
                    """),
            arguments: [conversation.id, max(me.readSeq, me.joinedSeq - 1), userId, userId]) ?? 0
    }

    /// Leaves out of a read of `messages` the messages hidden from the reader (the next argument).
    static let notHidden = """
         AND NOT EXISTS (SELECT 1 FROM hidden_messages h WHERE h.conversation_id = messages.conversation_id AND h.seq = messages.seq AND h.user_id = ?)
        """

    /// A conversation from a row of (id, kind, name, created_at, last_seq, updated_at), without its members.
    private static func conversation(_ row: Row) -> Conversation {
        Conversation(
            id: row[0], kind: ConversationKind(rawValue: row[1]) ?? .group, name: row[2], createdAt: row[3], lastSeq: row[4],
            updatedAt: row[5], members: [])
    }

    private static func conversationMembers(_ db: Database, _ conversationId: String) throws -> [ConversationMember] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT user_id, role, joined_seq, delivered_seq, read_seq, membership FROM members WHERE conversation_id = ? ORDER BY user_id"),
            arguments: [conversationId]
        ).map(Self.member)
    }

    /// A member from a row of (user_id, role, joined_seq, delivered_seq, read_seq, membership).
    private static func member(_ row: Row) -> ConversationMember {
        ConversationMember(
            userId: row[0], role: MemberRole(rawValue: row[1]) ?? .member, joinedSeq: row[2], deliveredSeq: row[3], readSeq: row[4],
            membership: MembershipState(rawValue: row[5]) ?? .joined)
    }

    public func cachedMembers(of conversationId: String) -> [String]? {
        membersCache[conversationId]
    }

    public func members(of conversationId: String) async throws -> [String]? {
        if let cached = membersCache[conversationId] { return cached }
        let generation = membersCache.generation(of: conversationId)
        let members = try await pool.read { db in try Self.fetchMembers(db, conversationId) }
        if let members { membersCache.store(members, for: conversationId, ifGeneration: generation) }
        return members
    }

    /// The members as this transaction sees them: a membership change earlier in the same group commit forgot the
    /// cached list before writing, so the cache never answers for a list this transaction changed.
    func membersInTransaction(_ db: Database, _ conversationId: String) throws -> [String]? {
        if let cached = membersCache[conversationId] { return cached }
        return try Self.fetchMembers(db, conversationId)
    }

    public func member(_ userId: String, of conversationId: String) async throws -> ConversationMember? {
        try await pool.read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT user_id, role, joined_seq, delivered_seq, read_seq, membership FROM members WHERE conversation_id = ? AND user_id = ?"),
                arguments: [conversationId, userId]
            ).map(Self.member)
        }
    }

    // MARK: Membership changes

    private struct MembershipWrite: Sendable {
        var members: [String]
        var events: [StoredEvent]
    }

    public func changeMembership(
        conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int, admission: MemberAdmission
    ) async throws -> Conversation {
        let written = try await write(
            { [self, membersCache] db -> MembershipWrite? in
                guard let row = try Row.fetchOne(db, sql: "SELECT kind, name, last_seq FROM conversations WHERE id = ?", arguments: [conversationId])
                else { throw PigeonError.conversationNotFound }
                let members = try Self.conversationMembers(db, conversationId)
                var plan = try MembershipPlan(
                    operation, by: actor.userId, kind: ConversationKind(rawValue: row[0]) ?? .group, name: row[1],
                    members: members, lastSeq: row[2], maxMembers: maxMembers)
                guard !plan.isEmpty else { return nil }
                let now = WallClock.nowMillis()
                let admitted = try admit(db, plan.added.map(\.userId), by: actor.userId, admission: admission, now: now)
                plan.admit(admitted, before: members)
                // Processing later in this group commit must read the new list from the tables, not the cache.
                membersCache.changed(conversationId, members: nil)
                for member in plan.added {
                    try db.execute(
                        sql: """
                            INSERT INTO members(conversation_id, user_id, role, joined_seq, delivered_seq, read_seq, membership)
                            VALUES (?, ?, ?, ?, ?, ?, ?)
                            """,
                        arguments: [
                            conversationId, member.userId, member.role.rawValue, member.joinedSeq, member.deliveredSeq, member.readSeq,
                            member.membership.rawValue,
                        ])
                }
                for userId in plan.removed {
                    if members.contains(where: { $0.userId == userId && $0.membership == .invited }) {
                        try db.execute(
                            sql: """
                                UPDATE stranger_adds SET added = \(ConsentRules.endedInvitationKey)
                                WHERE added = ? AND adder IN (SELECT user_id FROM members WHERE conversation_id = ?)
                                """,
                            arguments: [userId, conversationId])
                    }
                    try db.execute(sql: "DELETE FROM members WHERE conversation_id = ? AND user_id = ?", arguments: [conversationId, userId])
                }
                for (userId, role) in plan.roles {
                    try db.execute(
                        sql: "UPDATE members SET role = ? WHERE conversation_id = ? AND user_id = ?", arguments: [role.rawValue, conversationId, userId])
                }
                if let name = plan.name {
                    try db.execute(sql: "UPDATE conversations SET name = ? WHERE id = ?", arguments: [name, conversationId])
                }
                let payloads = EventPayload()
                var events: [StoredEvent] = []
                for (message, change) in zip(plan.messages(conversationId: conversationId, actor: actor, now: now), plan.changes) {
                    try Self.insertMessage(db, message, targetId: nil)
                    try Self.recordWebhook(db, webhooks.stored(message, at: now))
                    let payload = payloads.messageNew(message)
                    for recipient in change.recipients {
                        events.append(
                            try Self.insertEvent(
                                db, type: "message.new", userId: recipient, deviceId: nil, excludedDeviceId: nil, payload: payload, at: now,
                                message: (conversationId, message.seq)))
                    }
                }
                try db.execute(
                    sql: "UPDATE conversations SET last_seq = ?, updated_at = MAX(updated_at, ?) WHERE id = ?",
                    arguments: [plan.lastSeq, now, conversationId])
                return MembershipWrite(members: plan.membersAfter.map(\.userId), events: events)
            },
            afterCommit: { [fanout, membersCache] written in
                guard let written else { return }
                membersCache.changed(conversationId, members: written.members)
                fanout.publish(written.events)
            })
        if actor.userId == SystemSender.service {
            // The server API's actor is no member: it sees the conversation as the operator does.
            guard let conversation = try await conversation(id: conversationId) else { throw PigeonError.conversationNotFound }
            return conversation
        }
        if written == nil, try await member(actor.userId, of: conversationId) == nil { throw PigeonError.conversationNotFound }
        guard let conversation = try await pool.read({ db in try Self.conversationView(db, id: conversationId, for: actor.userId) }) else {
            throw PigeonError.conversationNotFound
        }
        return conversation
    }

    // MARK: Editing and deleting

    public func messageTarget(conversationId: String, serverId: String) async throws -> MessageTarget? {
        try await pool.read { db in try Self.target(db, conversationId: conversationId, serverId: serverId) }
    }

    static func target(_ db: Database, conversationId: String, serverId: String) throws -> MessageTarget? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT sender_id, type, deleted_at IS NOT NULL, seq, thread_root FROM messages WHERE server_id = ? AND conversation_id = ?"),
            arguments: [serverId, conversationId]
        ).map { MessageTarget(senderId: $0[0], type: $0[1], deleted: $0[2], seq: $0[3], threadRoot: $0[4]) }
    }

    public func storedMessage(senderId: String, deviceId: String, clientMessageId: String) async throws -> SendMessageResponse? {
        try await pool.read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: "SELECT server_id, accepted_at, seq FROM messages WHERE sender_id = ? AND sender_device_id = ? AND client_message_id = ?"),
                arguments: [senderId, deviceId, clientMessageId]
            ).map { SendMessageResponse(serverId: $0[0], clientMessageId: clientMessageId, status: .stored, acceptedAt: $0[1], seq: $0[2]) }
        }
    }

    /// Applies a stored edit or delete to its target: the new text and `edited_at`, or the text erased (of the
    /// target and of its earlier edits) and `deleted_at`.
    private static func applyLifecycle(_ db: Database, targetId: String, newBody: String?, at now: Int64) throws {
        if let newBody {
            try db.cachedStatement(sql: "UPDATE messages SET body = at_rest_seal(?), edited_at = ? WHERE server_id = ?").execute(arguments: [newBody, now, targetId])
        } else {
            try db.cachedStatement(sql: "UPDATE messages SET body = '', deleted_at = ? WHERE server_id = ?").execute(arguments: [now, targetId])
            try db.cachedStatement(sql: "UPDATE messages SET body = at_rest_seal(?) WHERE target_id = ? AND type = ?")
                .execute(arguments: [MessageLifecycle.editText(serverId: targetId, body: ""), targetId, ServerMessageType.edit])
        }
    }

    private static func fetchMembers(_ db: Database, _ conversationId: String) throws -> [String]? {
        let members = try String.fetchAll(
            db.cachedStatement(sql: "SELECT user_id FROM members WHERE conversation_id = ? ORDER BY user_id"), arguments: [conversationId])
        return members.isEmpty ? nil : members
    }

    // MARK: Processing

    private struct BatchOutcome: Sendable {
        var results: [ProcessingResult]
        var events: [StoredEvent]
    }

    /// A message of a batch failed while it was processed without per-message savepoints.
    private struct BatchNeedsIsolation: Error {
        var index: Int
        var error: any Error
    }

    public func process(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
        // Optimistically without a savepoint per message; if one fails, again with them, so it fails alone.
        do {
            return try await write(
                { [self] db -> BatchOutcome in try processInTransaction(items, db, isolated: false, knownFailure: nil) },
                afterCommit: { [fanout] outcome in fanout.publish(outcome.events) }
            ).results
        } catch let failure as BatchNeedsIsolation {
            // The failed message is not run twice: this round is its one attempt.
            let knownFailure = (failure.index, failure.error)
            return try await write(
                { [self] db -> BatchOutcome in try processInTransaction(items, db, isolated: true, knownFailure: knownFailure) },
                afterCommit: { [fanout] outcome in fanout.publish(outcome.events) }
            ).results
        }
    }

    private func processInTransaction(
        _ items: [ProcessingItem], _ db: Database, isolated: Bool, knownFailure: (index: Int, error: any Error)?
    ) throws -> BatchOutcome {
        let payloads = EventPayload()
        let now = WallClock.nowMillis()
        var plan = BatchPlan(capacity: items.count)
        var events: [StoredEvent] = []
        /// conversation → its last seq so far in this batch; written back once at the end.
        var lastSeqs: [String: Int64] = [:]
        for (index, item) in items.enumerated() {
            let message = item.entry.message
            guard plan.shouldAttempt(item) else { continue }
            do {
                var written: [StoredEvent] = []
                var outcome = ProcessingResult.deferred
                let lastSeq = try lastSeqs[message.conversationId] ?? Self.fetchLastSeq(db, message.conversationId)
                if let knownFailure, knownFailure.index == index {
                    throw knownFailure.error
                } else if isolated {
                    try db.inSavepoint {
                        outcome = try storeMessage(message, seq: lastSeq + 1, now: now, payloads: payloads, db, into: &written)
                        return .commit
                    }
                } else {
                    do {
                        outcome = try storeMessage(message, seq: lastSeq + 1, now: now, payloads: payloads, db, into: &written)
                    } catch where !SQLiteDiskHealth.isDiskFault(error) {
                        throw BatchNeedsIsolation(index: index, error: error)
                    }
                }
                switch outcome {
                case .stored(let seq):
                    lastSeqs[message.conversationId] = seq
                    events.append(contentsOf: written)
                    plan.stored(seq: seq)
                case .alreadyStored(let seq):
                    plan.alreadyStored(seq: seq)
                case .failed, .deadLettered, .deferred:
                    preconditionFailure("storeMessage answers stored or alreadyStored, or throws")
                }
            } catch let error as BatchNeedsIsolation {
                throw error
            } catch where SQLiteDiskHealth.isDiskFault(error) {
                // The whole batch waits for disk space: a full disk is no fault of this message.
                throw error
            } catch {
                if case .deadLetter(let detail) = plan.failed(item, error: error) {
                    try db.inSavepoint {
                        events.append(try deadLetter(message, detail: detail, now: now, payloads: payloads, db))
                        return .commit
                    }
                }
            }
        }
        for (conversationId, seq) in lastSeqs {
            try db.cachedStatement(sql: "UPDATE conversations SET last_seq = ?, updated_at = MAX(updated_at, ?) WHERE id = ?")
                .execute(arguments: [seq, now, conversationId])
        }
        return BatchOutcome(results: plan.results, events: events)
    }

    package static func fetchLastSeq(_ db: Database, _ conversationId: String) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT last_seq FROM conversations WHERE id = ?"), arguments: [conversationId]) ?? 0
    }

    /// Writes one message with `seq` and its events, or finds it already stored (by serverId).
    package func storeMessage(
        _ message: BufferedMessage, seq: Int64, now: Int64, payloads: EventPayload, _ db: Database, into events: inout [StoredEvent]
    ) throws -> ProcessingResult {
        try faultInjector?(message)
        let members = try MessageEvents.members(try membersInTransaction(db, message.conversationId), admitting: message)
        let lifecycle = try MessageLifecycle.target(of: message)
        if let lifecycle {
            // An edit or delete stored before is not checked against its target again (which it changed).
            if let storedSeq = try Self.storedSeq(db, message) { return .alreadyStored(seq: storedSeq) }
            let target = try Self.target(db, conversationId: message.conversationId, serverId: lifecycle.serverId)
            if let refusal = MessageLifecycle.refusal(message, target: target) { throw refusal }
        }
        var stored = MessageEvents.stored(message, seq: seq, storedAt: now)
        let quoted = try Self.checkRelations(db, message)
        stored.replyPreview = quoted?.preview
        try Self.insertMessage(db, stored, targetId: lifecycle?.serverId)
        if db.changesCount == 0 {
            // Stored by an earlier attempt whose buffer acknowledgement was lost (crash between the two), or the
            // same (sender, device, clientMessageId) under another serverId (a resend the buffer no longer knew).
            guard let storedSeq = try Self.storedSeq(db, message) else {
                throw PigeonError.overloaded("seq \(seq) of the conversation is taken; retry shortly")
            }
            return .alreadyStored(seq: storedSeq)
        }
        try Self.linkAttachments(db, stored)
        let (hidden, withheld) = try self.withheld(db, message, members: members)
        if let lifecycle {
            if mayHide {
                try Self.keepViews(
                    db, conversationId: message.conversationId, targetId: lifecycle.serverId, hiddenFrom: lifecycle.newBody == nil ? [] : hidden)
            }
            try Self.applyLifecycle(db, targetId: lifecycle.serverId, newBody: lifecycle.newBody, at: now)
            if lifecycle.newBody == nil { try Self.forgetDeleted(db, conversationId: message.conversationId, serverId: lifecycle.serverId) }
        }
        if let root = message.threadRoot { try Self.addReply(db, conversationId: message.conversationId, root: root, by: message.senderId, at: now) }
        try recordStoredWebhooks(db, message: message, stored: stored, lifecycle: lifecycle, at: now)
        try Self.insertHidden(db, conversationId: message.conversationId, seq: seq, senderId: message.senderId, from: hidden)
        let quotes = try quoted.map { try Self.quoteViews(db, $0) } ?? QuoteViews()
        let writes = MessageEvents.writes(
            of: message, stored: stored, members: members, withheld: withheld, hidden: hidden, quotes: quotes, presence: fanout, payloads: payloads)
        for recipient in writes.newRecipients {
            events.append(
                try Self.insertEvent(
                    db, type: "message.new", userId: recipient.userId, deviceId: nil, excludedDeviceId: recipient.excludedDeviceId,
                    payload: writes.newPayload(for: recipient.userId), at: now, message: (message.conversationId, seq)))
        }
        events.append(
            try Self.insertEvent(
                db, type: "message.stored", userId: message.senderId, deviceId: message.senderDeviceId, excludedDeviceId: nil,
                payload: writes.storedPayload, at: now))
        return .stored(seq: seq)
    }

    /// The seq under which `message` was stored before: by serverId, or by (sender, device, clientMessageId).
    private static func storedSeq(_ db: Database, _ message: BufferedMessage) throws -> Int64? {
        try Int64.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT seq FROM messages WHERE server_id = ?
                    UNION ALL SELECT seq FROM messages WHERE sender_id = ? AND sender_device_id = ? AND client_message_id = ?
                    LIMIT 1
                    """),
            arguments: [message.serverId, message.senderId, message.senderDeviceId, message.clientMessageId])
    }

    /// Inserts a message unless its serverId or (sender, device, clientMessageId) is stored already (`changesCount` 0).
    private static func insertMessage(_ db: Database, _ message: Message, targetId: String?) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO messages(conversation_id, seq, server_id, client_message_id, sender_id, sender_device_id, type, body,
                    client_timestamp, accepted_at, stored_at, target_id, reply_to, thread_root, attachments)
                    VALUES (?, ?, ?, ?, ?, ?, ?, at_rest_seal(?), ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT DO NOTHING
                """
        ).execute(arguments: [
            message.conversationId, message.seq, message.serverId, message.clientMessageId, message.senderId, message.senderDeviceId,
            message.type, message.body, message.clientTimestamp, message.acceptedAt, message.storedAt, targetId, message.replyTo,
            message.threadRoot, AttachmentColumn.encode(message.attachments),
        ])
    }

    /// Links a message just stored to the uploads it carries, in its own transaction: from then on its conversation's
    /// members may read them and the sweep keeps them while it is not deleted. An upload swept since the send was
    /// accepted has no row left to link: the message keeps its metadata, and its bytes are gone.
    private static func linkAttachments(_ db: Database, _ message: Message) throws {
        for attachment in message.attachments {
            try db.cachedStatement(
                sql: """
                    INSERT INTO message_attachments(attachment_id, conversation_id, seq) SELECT id, ?, ? FROM attachments WHERE id = ?
                    ON CONFLICT DO NOTHING
                    """
            ).execute(arguments: [message.conversationId, message.seq, attachment.id])
            try db.cachedStatement(sql: "UPDATE attachments SET linked = 1 WHERE id = ?").execute(arguments: [attachment.id])
        }
    }

    private func deadLetter(_ message: BufferedMessage, detail: ErrorDetail, now: Int64, payloads: EventPayload, _ db: Database) throws -> StoredEvent {
        try db.cachedStatement(
            sql: """
                INSERT OR REPLACE INTO dead_letters(server_id, conversation_id, client_message_id, sender_id, sender_device_id, type, body,
                    client_timestamp, accepted_at, failed_at, error_code, error_message, reply_to, thread_root, attachments)
                    VALUES (?, ?, ?, ?, ?, ?, at_rest_seal(?), ?, ?, ?, ?, ?, ?, ?, ?)
                """
        ).execute(arguments: [
            message.serverId, message.conversationId, message.clientMessageId, message.senderId, message.senderDeviceId, message.type,
            message.body, message.clientTimestamp, message.acceptedAt, now, detail.code.rawValue, detail.message, message.replyTo,
            message.threadRoot, AttachmentColumn.encode(message.attachments),
        ])
        let payload = try payloads.messageFailed(MessageEvents.failed(message, error: detail))
        return try Self.insertEvent(
            db, type: "message.failed", userId: message.senderId, deviceId: message.senderDeviceId, excludedDeviceId: nil,
            payload: payload, at: now)
    }

    /// Appends an event to `userId`'s log. With `message`, the log keeps a reference to the stored message
    /// instead of a copy of `payload` (``events(for:after:limit:)`` renders it back); with `payloadId`, a reference
    /// to the payload every member's row shares (``insertSharedPayload(_:_:)``).
    static func insertEvent(
        _ db: Database, type: String, userId: String, deviceId: String?, excludedDeviceId: String?, payload: String, at now: Int64,
        message: (conversationId: String, seq: Int64)? = nil, payloadId: Int64? = nil
    ) throws -> StoredEvent {
        let inline = message == nil && payloadId == nil
        try db.cachedStatement(
            sql: """
                INSERT INTO events(user_id, device_id, excluded_device_id, type, created_at, conversation_id, seq, payload, payload_id)
                VALUES (?, ?, ?, ?, ?, ?, ?, at_rest_seal(?), ?)
                """
        ).execute(arguments: [
            userId, deviceId, excludedDeviceId, type, now, message?.conversationId, message?.seq, inline ? payload : nil, payloadId,
        ])
        return StoredEvent(
            id: db.lastInsertedRowID, type: type, userId: userId, deviceId: deviceId, excludedDeviceId: excludedDeviceId, payload: payload)
    }

    /// Stores a payload once for the events of every member that carry it (inserted right after it, one after the
    /// other: pruning relies on that); returns its id.
    static func insertSharedPayload(_ db: Database, _ payload: String) throws -> Int64 {
        try db.cachedStatement(sql: "INSERT INTO event_payloads(payload) VALUES (at_rest_seal(?))").execute(arguments: [payload])
        return db.lastInsertedRowID
    }

    public func status(ofMessage serverId: String) async throws -> (status: ServerMessageStatus, seq: Int64?)? {
        try await pool.read { db in
            if let seq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM messages WHERE server_id = ?"), arguments: [serverId]) {
                return (.stored, seq)
            }
            if try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM dead_letters WHERE server_id = ?"), arguments: [serverId]) == true {
                return (.failed, nil)
            }
            return nil
        }
    }

    // MARK: History

    static let messageColumns = """
        server_id, client_message_id, conversation_id, seq, sender_id, sender_device_id, type, at_rest_open(body), client_timestamp,
        accepted_at, stored_at, edited_at, deleted_at, reply_to, thread_root, thread_count, thread_last_at, thread_senders, attachments
        """

    static let joinedMessageColumns = """
        m.server_id, m.client_message_id, m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.type, at_rest_open(m.body),
        m.client_timestamp, m.accepted_at, m.stored_at, m.edited_at, m.deleted_at, m.reply_to, m.thread_root, m.thread_count,
        m.thread_last_at, m.thread_senders, m.attachments
        """

    private static func message(_ row: Row) -> Message {
        message(row, from: 0)
    }

    /// A message from the columns of ``messageColumns`` starting at `column`.
    static func message(_ row: Row, from column: Int) -> Message {
        Message(
            serverId: row[column], clientMessageId: row[column + 1], conversationId: row[column + 2], seq: row[column + 3],
            senderId: row[column + 4], senderDeviceId: row[column + 5], type: row[column + 6], body: row[column + 7],
            clientTimestamp: row[column + 8], acceptedAt: row[column + 9], storedAt: row[column + 10], editedAt: row[column + 11],
            deletedAt: row[column + 12], replyTo: row[column + 13], threadRoot: row[column + 14],
            thread: Self.threadSummary(count: row[column + 15], lastAt: row[column + 16], senders: row[column + 17]),
            attachments: AttachmentColumn.decode(row[column + 18]))
    }

    public func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?) async throws
        -> MessagePage
    {
        let hiding = mayHide ? reader : nil
        return try await pool.read { db in
            try Self.page(
                db, conversationId: conversationId, thread: nil, after: after, before: before, limit: limit, visibleFrom: visibleFrom, reader: reader,
                hidingFrom: hiding)
        }
    }

    /// A page of the conversation's messages (of one thread's replies with `thread`), decorated for `reader`, without
    /// the messages hidden from `hidingFrom` by a block.
    static func page(
        _ db: Database, conversationId: String, thread: String?, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?,
        hidingFrom: String? = nil
    ) throws -> MessagePage {
        let inThread = thread == nil ? "" : " AND thread_root = ?"
        let notHidden = hidingFrom == nil ? "" : Self.notHidden
        let hiddenArgument: [String] = hidingFrom.map { [$0] } ?? []
        var messages: [Message]
        if let after {
            messages = try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT \(Self.messageColumns) FROM messages WHERE conversation_id = ?\(inThread) AND seq > ?\(notHidden) ORDER BY seq LIMIT ?"),
                arguments: StatementArguments(
                    [conversationId] + (thread.map { [$0] } ?? []) + [max(after, visibleFrom - 1)] + hiddenArgument + [limit + 1])
            ).map(Self.message)
        } else {
            messages = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.messageColumns) FROM messages WHERE conversation_id = ?\(inThread) AND seq < ? AND seq >= ?\(notHidden)
                        ORDER BY seq DESC LIMIT ?
                        """),
                arguments: StatementArguments(
                    [conversationId] + (thread.map { [$0] } ?? []) + [before ?? Int64.max, visibleFrom] + hiddenArgument + [limit + 1])
            ).map(Self.message)
        }
        let hasMore = messages.count > limit
        if hasMore { messages.removeLast() }
        if after == nil { messages.reverse() }
        try Self.decorate(db, &messages, reader: reader)
        return MessagePage(messages: messages, hasMore: hasMore)
    }

    // MARK: Receipts

    private struct ReceiptWrite: Sendable {
        var outcome: ReceiptOutcome
        var events: [StoredEvent]
    }

    public func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome {
        try await write(
            receiptWrite(conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq),
            afterCommit: { [fanout] write in fanout.publish(write.events) }
        ).outcome
    }

    /// ``recordReceipt(conversationId:userId:kind:upToSeq:)`` without a task: the write joins the group commit and
    /// `completion` runs on the writer after the commit, before the receipt's events are published.
    public func recordReceipt(
        conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64,
        completion: @escaping @Sendable (Result<ReceiptOutcome, any Error>) -> Void
    ) {
        // Without a savepoint of its own (it fails only for a non-member, which reruns the group with every write isolated).
        writer.submit(
            isolated: false, receiptWrite(conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq),
            afterCommit: { [fanout] write in fanout.publish(write.events) },
            completion: { [diskHealth] result in
                switch result {
                case .success(let write):
                    diskHealth.recordSuccess()
                    completion(.success(write.outcome))
                case .failure(let error):
                    completion(.failure(diskHealth.translate(error)))
                }
            })
    }

    /// The receipt's write: the watermarks moved and, for each that moved, a `receipt` event per member.
    private func receiptWrite(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) -> @Sendable (Database) throws -> ReceiptWrite {
        { [self] db -> ReceiptWrite in
            guard let members = try membersInTransaction(db, conversationId), members.contains(userId),
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT m.delivered_seq, m.read_seq, c.last_seq, m.membership FROM members m JOIN conversations c ON c.id = m.conversation_id
                            WHERE m.conversation_id = ? AND m.user_id = ?
                            """),
                    arguments: [conversationId, userId])
            else { throw PigeonError.conversationNotFound }
            let old = Watermarks(delivered: row[0], read: row[1])
            // An invited member's watermarks wait for its acceptance: its messages are not delivered to it before.
            let invited = (row[3] as String) == MembershipState.invited.rawValue
            let new = invited ? old : old.applying(kind, upTo: upToSeq, lastSeq: row[2])
            let (delivered, read) = (new.delivered, new.read)
            var result = ReceiptWrite(outcome: ReceiptOutcome(watermarks: new.response, deliveredMessageStoredAt: nil), events: [])
            let moved = new.moves(from: old)
            guard !moved.isEmpty else { return result }
            // An invited member gets only its invitation until it accepts: no receipts.
            let invitedMembers = consent.withLockedValue({ $0.invitesExist }) ? try Self.invited(db, conversationId) : []
            try db.cachedStatement(sql: "UPDATE members SET delivered_seq = ?, read_seq = ? WHERE conversation_id = ? AND user_id = ?")
                .execute(arguments: [delivered, read, conversationId, userId])
            let now = WallClock.nowMillis()
            let payloads = EventPayload()
            for (movedKind, seq) in moved {
                if movedKind == .read {
                    try Self.recordWebhook(db, webhooks.receiptRead(conversationId: conversationId, userId: userId, upToSeq: seq, at: now))
                }
                let payload = try payloads.receipt(ReceiptEvent(conversationId: conversationId, userId: userId, kind: movedKind, upToSeq: seq, at: now))
                let payloadId = try Self.insertSharedPayload(db, payload)
                for member in members where !invitedMembers.contains(member) {
                    result.events.append(
                        try Self.insertEvent(
                            db, type: "receipt", userId: member, deviceId: nil, excludedDeviceId: nil, payload: payload, at: now, payloadId: payloadId))
                }
            }
            if delivered != old.delivered,
                let message = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT stored_at, sender_id FROM messages WHERE conversation_id = ? AND seq = ?"),
                    arguments: [conversationId, delivered]),
                (message[1] as String) != userId
            {
                result.outcome.deliveredMessageStoredAt = message[0]
            }
            return result
        }
    }

    // MARK: Events

    /// Makes the store at `path` (a restored copy, no server on it) a log of its own: a new epoch, and the old one kept
    /// with the copy's last event id as ``formerLog``. A cursor the old log gave out up to there names the same events
    /// here and keeps working; one beyond it named events the copy does not hold, and is answered `reset`, even once new
    /// events (whose ids start again after the copy's last) pass it. Only the latest restore is remembered.
    package static func markRestored(path: String) throws {
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        try queue.write { db in
            // Every conversation's seqs go on past anything the server before the restore can have given out, so no
            // seq is given twice: a device that has a message the backup lacks keeps it at its seq, and the restored
            // server's next message comes at a seq of its own (clients pass over seqs no message holds, as they do
            // over a blocked user's).
            try db.execute(sql: "UPDATE conversations SET last_seq = last_seq + ?", arguments: [Self.restoredSeqGap])
            guard let epoch = try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'epoch'") else { return }
            let head = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'") ?? 0
            try db.execute(
                sql: """
                    INSERT OR REPLACE INTO meta(key, value) VALUES ('epoch', ?), ('restored_epoch', ?), ('restored_head', ?)
                    """,
                arguments: [Identifiers.randomHex(bytes: 4), epoch, String(head)])
        }
    }

    /// How far a restore moves every conversation's seqs on: more messages than one conversation can have been given
    /// between a backup and its restore (a thousand a second for eleven days), and room for millions of restores within
    /// the seqs a JavaScript number holds exactly (2^53).
    package static let restoredSeqGap: Int64 = 1_000_000_000

    /// One partition: the embedded store has a single writer, so one log in commit order shares nothing it could contend on.
    public var eventPartitions: Int { 1 }

    public func events(for device: DeviceIdentity, after position: EventPosition, limit: Int) async throws -> [StoredEvent] {
        let after = position.offsets[0]
        return try await pool.read { db in
            let payloads = EventPayload()
            let rows = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT e.id, e.type, e.device_id, e.excluded_device_id, at_rest_open(COALESCE(e.payload, p.payload)), \(Self.joinedMessageColumns)
                        FROM events e LEFT JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
                            LEFT JOIN event_payloads p ON p.id = e.payload_id
                        WHERE e.user_id = ? AND e.id > ? AND (e.device_id IS NULL OR e.device_id = ?)
                            AND (e.excluded_device_id IS NULL OR e.excluded_device_id != ?)
                        ORDER BY e.id LIMIT ?
                        """),
                arguments: [device.userId, after, device.deviceId, device.deviceId, limit]
            )
            // A message.new is rendered from its message as of this read, decorated for the device's user in one go.
            var messages: [Message] = []
            var messageIndex: [Int: Int] = [:]
            for (index, row) in rows.enumerated() where (row[4] as String?) == nil {
                messageIndex[index] = messages.count
                messages.append(Self.message(row, from: 5))
            }
            try Self.decorate(db, &messages, reader: device.userId)
            return rows.enumerated().map { index, row in
                let payload: String = (row[4] as String?) ?? payloads.messageNew(messages[messageIndex[index]!])
                return StoredEvent(id: row[0], type: row[1], userId: device.userId, deviceId: row[2], excludedDeviceId: row[3], payload: payload)
            }
        }
    }

    public func headPosition() async throws -> EventPosition {
        let head = try await pool.read { db in try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'events'") ?? 0 }
        return EventPosition(offsets: [head])
    }

    public func prunedThrough() async throws -> EventPosition {
        let pruned = try await pool.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'pruned_through'").flatMap { Int64($0) } ?? 0
        }
        return EventPosition(offsets: [pruned])
    }

    @discardableResult
    public func pruneEvents(olderThan cutoff: Int64) async throws -> Int {
        try await write { db -> Int in
            // Event ids grow with time, so binary-search the newest id created before the cutoff.
            guard var high = try Int64.fetchOne(db, sql: "SELECT MAX(id) FROM events"),
                var low = try Int64.fetchOne(db, sql: "SELECT MIN(id) FROM events")
            else { return 0 }
            var boundary: Int64 = 0
            while low <= high {
                let middle = low + (high - low) / 2
                guard let row = try Row.fetchOne(db, sql: "SELECT id, created_at FROM events WHERE id >= ? ORDER BY id LIMIT 1", arguments: [middle])
                else { break }
                if (row[1] as Int64) < cutoff {
                    boundary = row[0]
                    low = (row[0] as Int64) + 1
                } else {
                    high = middle - 1
                }
            }
            guard boundary > 0 else { return 0 }
            let newestPrunedPayload = try Int64.fetchOne(
                db, sql: "SELECT MAX(payload_id) FROM events WHERE id <= ? AND payload_id IS NOT NULL", arguments: [boundary])
            try db.execute(sql: "DELETE FROM events WHERE id <= ?", arguments: [boundary])
            let deleted = db.changesCount
            if let newestPrunedPayload {
                // A shared payload goes with the last event that points at it. Its events are consecutive and payload
                // ids grow with event ids, so only the first event left can still point at a payload up to this one.
                try db.execute(
                    sql: """
                        DELETE FROM event_payloads WHERE id <= ?
                            AND id IS NOT (SELECT payload_id FROM events WHERE id > ? ORDER BY id LIMIT 1)
                        """,
                    arguments: [newestPrunedPayload, boundary])
            }
            try db.execute(
                sql: "INSERT INTO meta(key, value) VALUES ('pruned_through', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                arguments: [String(boundary)])
            return deleted
        }
    }

    // MARK: Dead letters

    public func deadLetters(limit: Int) async throws -> [DeadLetter] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT server_id, client_message_id, conversation_id, sender_id, sender_device_id, type, at_rest_open(body),
                        client_timestamp, accepted_at, failed_at, error_code, error_message, reply_to, thread_root, attachments
                    FROM dead_letters ORDER BY failed_at LIMIT ?
                    """,
                arguments: [limit]
            ).map { row in
                DeadLetter(
                    message: Message(
                        serverId: row[0], clientMessageId: row[1], conversationId: row[2], seq: 0, senderId: row[3], senderDeviceId: row[4],
                        type: row[5], body: row[6], clientTimestamp: row[7], acceptedAt: row[8], storedAt: 0, replyTo: row[12],
                        threadRoot: row[13], attachments: AttachmentColumn.decode(row[14])),
                    failedAt: row[9], error: ErrorDetail(code: ErrorCode(rawValue: row[10]), message: row[11]))
            }
        }
    }

    public func deadLetter(serverId: String) async throws -> BufferedMessage? {
        try await pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT server_id, conversation_id, sender_id, sender_device_id, client_message_id, type, at_rest_open(body),
                        client_timestamp, accepted_at, reply_to, thread_root, attachments FROM dead_letters WHERE server_id = ?
                    """,
                arguments: [serverId]
            ).map { row in
                BufferedMessage(
                    serverId: row[0], conversationId: row[1], senderId: row[2], senderDeviceId: row[3], clientMessageId: row[4],
                    type: row[5], body: row[6], clientTimestamp: row[7], acceptedAt: row[8], replyTo: row[9], threadRoot: row[10],
                    attachments: AttachmentColumn.decode(row[11]))
            }
        }
    }

    public func removeDeadLetter(serverId: String) async throws {
        try await write { db in
            try db.execute(sql: "DELETE FROM dead_letters WHERE server_id = ?", arguments: [serverId])
        }
    }

    public func deadLetterCount() async throws -> Int {
        try await pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM dead_letters") ?? 0 }
    }
}
