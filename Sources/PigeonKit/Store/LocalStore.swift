import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonProtocol

/// The SDK's local database: every message, conversation, outbox item and the stream cursor. Opening a chat reads
/// from here; the network only updates it. All writes are short transactions on GRDB's single writer.
///
/// Following GRDB's concurrency guide, what the engine calls from its loops is `async` (GRDB's async `read` and
/// `write`: the cooperative pool is never blocked on SQLite), and what ``PigeonClient``'s synchronous methods call
/// is synchronous (`send` returns at once, with its message saved). Where both need the same access, it comes in
/// both forms.
final class LocalStore: Sendable {
    let pool: DatabasePool
    let userId: String
    let deviceId: String
    /// Set when the database had to be rebuilt at open.
    let recovery: LocalDatabaseRecovery?
    /// The attachments' files beside the database: this device's copies of what it sent, and the download cache.
    let files: AttachmentFiles
    /// Which server aggregates were heard for messages while this device's reactions to them were on the wire.
    let reactionsInFlight = NIOLockedValueBox(ReactionsInFlight())
    /// A connection of its own for WAL checkpoints, so they never hold up the writer.
    private let checkpointer: DatabaseQueue
    private let walPath: String

    init(path: String, userId: String, deviceId: String, durability: LocalDatabase.Durability) throws {
        let (pool, recovery, salvaged) = try LocalDatabase.open(path: path)
        self.pool = pool
        self.userId = userId
        self.deviceId = deviceId
        self.recovery = recovery
        self.walPath = path + "-wal"
        self.files = AttachmentFiles(databasePath: path)
        // GRDB sets up WAL on the writer after `prepareDatabase`, with `synchronous = NORMAL`: set what was asked
        // for afterwards. The writer never checkpoints inside a commit (that cost a `send` 3–12 ms every ~80 sends);
        // ``checkpoint()`` does it from a connection of its own, beside the writer.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: durability == .survivesPowerLoss ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
        }
        self.checkpointer = try DatabaseQueue(path: path, configuration: LocalDatabase.configuration())
        try pool.write { db in
            if let row = try Row.fetchOne(db, sql: "SELECT userId, deviceId FROM device WHERE id = 1") {
                let (storedUser, storedDevice): (String, String) = (row[0], row[1])
                guard storedUser == userId, storedDevice == deviceId else {
                    throw PigeonClientError(
                        .wrongDatabase,
                        "\(path) belongs to user \(storedUser), device \(storedDevice); these credentials are user \(userId), device \(deviceId)")
                }
            } else {
                try db.execute(sql: "INSERT INTO device (id, userId, deviceId) VALUES (1, ?, ?)", arguments: [userId, deviceId])
            }
            for item in salvaged {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO conversations (id, createdAt, lastActivityAt) VALUES (?, 0, ?)",
                    arguments: [item.conversationId, item.clientTimestamp])
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO messages (conversationId, clientMessageId, senderId, senderDeviceId, type, body, clientTimestamp, isOutgoing, status,
                            attachments)
                        VALUES (?, ?, ?, ?, ?, ?, ?, 1, 'pending', ?)
                        """,
                    arguments: [item.conversationId, item.clientMessageId, userId, deviceId, item.type, item.body, item.clientTimestamp, item.attachments])
                if db.changesCount > 0 {
                    try db.execute(
                        sql: "INSERT INTO outbox (localId, conversationId, clientMessageId) VALUES (?, ?, ?)",
                        arguments: [db.lastInsertedRowID, item.conversationId, item.clientMessageId])
                }
            }
        }
    }

    func close() {
        try? checkpointer.close()
        try? pool.close()
    }

    /// Copies the write-ahead log back into the database (PASSIVE: never waits for, nor blocks, the writer or
    /// readers) once it holds more than `thresholdBytes`. The client's run loop calls it every second.
    func checkpoint(thresholdBytes: Int = 1 << 20) async throws {
        let size = (try? FileManager.default.attributesOfItem(atPath: walPath)[.size] as? Int) ?? 0
        guard size > thresholdBytes else { return }
        try await checkpointer.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
    }

    /// The `synchronous` setting of the writer (1 = NORMAL, 2 = FULL).
    func writerSynchronousSetting() throws -> Int {
        try pool.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA synchronous") ?? -1 }
    }

    // MARK: Sending

    /// Saves an outgoing message and its outbox item in one transaction. A reply (`replyToLocalId`) gets its quote
    /// from this device's copy of the quoted message at once; a thread reply (`threadRootLocalId`) names its root.
    /// `attachments` (their copies already in `sent/`) are uploaded before the message goes.
    func insertOutgoing(
        conversationId: String, type: String, body: String, clientMessageId: String, clientTimestamp: Int64,
        replyToLocalId: Int64? = nil, threadRootLocalId: Int64? = nil, attachments: [LocalAttachment] = []
    ) throws -> PigeonMessage {
        try pool.write { db in
            try self.requireMembership(db, conversationId: conversationId)
            var quoted: PigeonMessage?
            var root: PigeonMessage?
            if let replyToLocalId {
                quoted = try self.referencedMessage(db, localId: replyToLocalId, conversationId: conversationId, purpose: "quoted")
            }
            if let threadRootLocalId {
                let found = try self.referencedMessage(db, localId: threadRootLocalId, conversationId: conversationId, purpose: "a thread's root")
                guard found.threadRoot == nil else {
                    throw PigeonClientError.invalid("message \(threadRootLocalId) is itself in a thread: reply in its root's thread instead")
                }
                root = found
            }
            let preview = quoted.map { ReplyPreview(serverId: $0.serverId ?? "", senderId: $0.senderId, type: $0.type, body: $0.body, deleted: false) }
            try db.cachedStatement(sql: "UPDATE conversations SET lastActivityAt = ? WHERE id = ?").execute(arguments: [clientTimestamp, conversationId])
            try db.cachedStatement(sql: """
                INSERT INTO messages (conversationId, clientMessageId, senderId, senderDeviceId, type, body, clientTimestamp, isOutgoing, status,
                    replyTo, replyToLocalId, replyPreview, threadRoot, threadRootLocalId, attachments)
                VALUES (?, ?, ?, ?, ?, ?, ?, 1, 'pending', ?, ?, ?, ?, ?, ?)
                """).execute(arguments: [
                    conversationId, clientMessageId, userId, deviceId, type, body, clientTimestamp,
                    quoted?.serverId, quoted?.localId, Self.jsonColumn(preview), root?.serverId, root?.localId,
                    Self.attachmentsColumn(attachments),
                ])
            let localId = db.lastInsertedRowID
            try db.cachedStatement(sql: "INSERT INTO outbox (localId, conversationId, clientMessageId) VALUES (?, ?, ?)")
                .execute(arguments: [localId, conversationId, clientMessageId])
            guard let message = try self.message(db, localId: localId) else {
                throw PigeonClientError(.localDatabase, "the message \(localId) was not saved")
            }
            return message
        }
    }

    /// A message a new one refers to (quotes, reacts to, or replies in the thread of): on this device, in the same
    /// conversation, one of the app's (not a `pigeon.*` one), not deleted, and not one of this device's that failed.
    func referencedMessage(_ db: Database, localId: Int64, conversationId: String?, purpose: String) throws -> PigeonMessage {
        guard let target = try message(db, localId: localId) else {
            throw PigeonClientError(.unknownMessage, "no message with local id \(localId)")
        }
        if let conversationId, target.conversationId != conversationId {
            throw PigeonClientError.invalid("message \(localId) is in another conversation")
        }
        guard target.kind == .message else {
            throw PigeonClientError.invalid("message \(localId) is a \(target.type) message: only the app's messages can be \(purpose)")
        }
        guard target.deletedAt == nil else { throw PigeonClientError.invalid("message \(localId) is deleted") }
        if target.serverId == nil, target.status == .failed {
            throw PigeonClientError.invalid("message \(localId) was not sent (⚠️): retry it first")
        }
        return target
    }

    /// The outbox as it was left (after a restart: the app may have been killed mid-send).
    func loadOutbox() throws -> [OutboxItem] {
        try pool.read { db in
            try Row.fetchAll(db, sql: """
                SELECT o.localId, o.conversationId, o.clientMessageId, o.attempts, o.failed, m.failureCode, m.failureMessage, m.attachments
                FROM outbox o JOIN messages m ON m.localId = o.localId ORDER BY o.localId
                """
            ).map { row in
                let failed: Bool = row[4]
                let state: OutboxItem.State = failed
                    ? .failed(ErrorDetail(code: ErrorCode(rawValue: row[5] ?? "internal"), message: row[6] ?? "failed"))
                    : .queued(notBefore: nil)
                return OutboxItem(
                    localId: row[0], conversationId: row[1], clientMessageId: row[2], attempts: row[3], state: state,
                    uploadsPending: Self.hasUploadsPending(row[7]))
            } + Row.fetchAll(db, sql: "SELECT id, conversationId, clientMessageId, attempts FROM reactionOutbox ORDER BY id").map { row in
                OutboxItem(localId: row[0], conversationId: row[1], clientMessageId: row[2], attempts: row[3], kind: .reaction)
            }
        }
    }

    /// Applies `evidence` to an outgoing message; returns the message when its status changed.
    func applyEvidence(_ evidence: StatusEvidence, localId: Int64, failure: ErrorDetail? = nil) async throws -> PigeonMessage? {
        try await pool.write { db in try self.applyEvidence(db, evidence, localId: localId, failure: failure) }
    }

    /// The accept answer arrived: the item leaves the outbox and the message is at least ✓. The outcome holds the
    /// status changes (and, for a resend answered `stored`, what storing it changed).
    func markAccepted(localId: Int64, response: SendMessageResponse) async throws -> ApplyOutcome {
        try await pool.write { db in
            var outcome = ApplyOutcome()
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE localId = ?").execute(arguments: [localId])
            try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?), acceptedAt = coalesce(acceptedAt, ?) WHERE localId = ?")
                .execute(arguments: [response.serverId, response.acceptedAt, localId])
            outcome.noteStatus(try self.applyEvidence(db, .accepted, localId: localId))
            if response.bodyReplaced == true, let stored = response.body {
                try self.applyReplacedBody(db, localId: localId, body: stored, outcome: &outcome)
            }
            if response.status == .stored, let seq = response.seq {
                try self.recordStored(db, localId: localId, seq: seq, storedAt: nil, recipientsOnline: nil, outcome: &outcome)
            }
            try self.collectLifecycleEvents(db, &outcome)
            return outcome
        }
    }

    /// Retries spent or refused: the item stays in the outbox as failed (so `retry` can restart it). A failed edit
    /// or deletion no longer shows on its target.
    func markFailed(localId: Int64, reason: ErrorDetail, attempts: Int) async throws -> ApplyOutcome {
        try await pool.write { db in
            var outcome = ApplyOutcome()
            try db.cachedStatement(sql: "UPDATE outbox SET failed = 1, attempts = ? WHERE localId = ?").execute(arguments: [attempts, localId])
            outcome.noteStatus(try self.applyEvidence(db, .failedLocally, localId: localId, failure: reason))
            try self.revertFailedChange(db, changeLocalId: localId, outcome: &outcome)
            try self.collectLifecycleEvents(db, &outcome)
            return outcome
        }
    }

    func recordAttempts(localId: Int64, attempts: Int) async throws {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE outbox SET attempts = ? WHERE localId = ?").execute(arguments: [attempts, localId])
        }
    }

    /// Puts a failed message back in the outbox. A message the *server* refused (dead-lettered) gets a new
    /// clientMessageId: resending the old one would only be answered with the old failure.
    func markRetry(localId: Int64) throws -> (PigeonMessage, OutboxItem, ApplyOutcome) {
        try pool.write { db in
            guard let message = try self.message(db, localId: localId) else {
                throw PigeonClientError(.unknownMessage, "no message with local id \(localId)")
            }
            guard message.status == .failed, message.isSent(byDevice: deviceId) else {
                throw PigeonClientError(.notRetryable, "message \(localId) is \(message.status.rawValue), not a failed message of this device")
            }
            let failureIsLocal = try Bool.fetchOne(db, sql: "SELECT failureIsLocal FROM messages WHERE localId = ?", arguments: [localId]) ?? true
            var clientMessageId = message.clientMessageId
            if !failureIsLocal {
                clientMessageId = UUID().uuidString.lowercased()
                try db.execute(sql: "UPDATE messages SET clientMessageId = ?, serverId = NULL, acceptedAt = NULL WHERE localId = ?", arguments: [clientMessageId, localId])
            }
            try db.execute(sql: "DELETE FROM outbox WHERE localId = ?", arguments: [localId])
            try db.execute(
                sql: "INSERT INTO outbox (localId, conversationId, clientMessageId) VALUES (?, ?, ?)",
                arguments: [localId, message.conversationId, clientMessageId])
            try db.execute(
                sql: "UPDATE messages SET status = 'pending', failureCode = NULL, failureMessage = NULL, failureIsLocal = NULL WHERE localId = ?",
                arguments: [localId])
            var updated = message
            updated.status = .pending
            updated.failure = nil
            updated.clientMessageId = clientMessageId
            // A retried edit or deletion shows on its target again.
            var outcome = ApplyOutcome()
            if let target = message.targetLocalId, message.isChange { try self.refreshShown(db, localId: target, outcome: &outcome) }
            try self.collectLifecycleEvents(db, &outcome)
            let attachments = try String.fetchOne(db, sql: "SELECT attachments FROM messages WHERE localId = ?", arguments: [localId])
            let item = OutboxItem(
                localId: localId, conversationId: message.conversationId, clientMessageId: clientMessageId,
                uploadsPending: Self.hasUploadsPending(attachments))
            return (updated, item, outcome)
        }
    }

    // MARK: Status helpers (inside a write)

    func applyEvidence(_ db: Database, _ evidence: StatusEvidence, localId: Int64, failure: ErrorDetail? = nil) throws -> PigeonMessage? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT status, failureIsLocal FROM messages WHERE localId = ?"), arguments: [localId]),
            let current = MessageStatus(rawValue: row[0])
        else { return nil }
        let failureIsLocal: Bool = row[1] ?? true
        guard let next = current.applying(evidence, failureIsLocal: failureIsLocal) else { return nil }
        if next == .failed {
            try db.cachedStatement(sql: "UPDATE messages SET status = 'failed', failureCode = ?, failureMessage = ?, failureIsLocal = ? WHERE localId = ?")
                .execute(arguments: [failure?.code.rawValue, failure?.message, evidence == .failedLocally, localId])
        } else {
            try db.cachedStatement(sql: "UPDATE messages SET status = ?, failureCode = NULL, failureMessage = NULL, failureIsLocal = NULL WHERE localId = ?")
                .execute(arguments: [next.rawValue, localId])
        }
        return try message(db, localId: localId)
    }

    /// Gives an outgoing message its seq, then lets the members' watermarks take it as far as they prove (with its
    /// per-member counts). An edit or deletion is then applied to its target; a message, the changes of it that
    /// arrived before its serverId was known here.
    func recordStored(_ db: Database, localId: Int64, seq: Int64, storedAt: Int64?, recipientsOnline: Int?, outcome: inout ApplyOutcome) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: """
                SELECT conversationId, type, serverId, status, seq, threadRoot, threadRootLocalId, senderId,
                    coalesce(?, storedAt, acceptedAt, clientTimestamp), confirmedDeletedAt
                FROM messages WHERE localId = ?
                """),
            arguments: [storedAt, localId])
        else {
            return
        }
        let (conversationId, type, statusBefore): (String, String, String) = (row[0], row[1], row[3])
        // A thread reply of this device, stored now: its root counts it.
        if (row[4] as Int64?) == nil, (row[5] as String?) != nil || (row[6] as Int64?) != nil, (row[9] as Int64?) == nil {
            try noteReply(db, rootServerId: row[5], rootLocalId: row[6], senderId: row[7], storedAt: row[8], outcome: &outcome)
        }
        // A row already holding this seq (say, a copy fetched from history before the ack) is the same message.
        try db.cachedStatement(sql: "DELETE FROM messages WHERE conversationId = ? AND seq = ? AND localId != ?").execute(arguments: [conversationId, seq, localId])
        let path: String? = recipientsOnline.map { $0 > 0 ? DeliveryPath.direct.rawValue : DeliveryPath.mailbox.rawValue }
        let previousPath = try String.fetchOne(db.cachedStatement(sql: "SELECT deliveryPath FROM messages WHERE localId = ?"), arguments: [localId])
        try db.cachedStatement(sql: """
            UPDATE messages SET seq = ?, storedAt = coalesce(?, storedAt), recipientsOnline = coalesce(?, recipientsOnline),
                deliveryPath = coalesce(?, deliveryPath) WHERE localId = ?
            """).execute(arguments: [seq, storedAt, recipientsOnline, path, localId])
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE localId = ?").execute(arguments: [localId])
        try db.cachedStatement(sql: "UPDATE conversations SET lastSeq = max(lastSeq, ?) WHERE id = ?").execute(arguments: [seq, conversationId])
        outcome.noteStatus(try applyEvidence(db, .stored, localId: localId))
        if type == ServerMessageType.edit || type == ServerMessageType.delete {
            try applyStoredChange(db, changeLocalId: localId, outcome: &outcome)
        } else if !Validation.isServerMessageType(type) {
            try recount(db, localId: localId, seq: seq, members: members(db, conversationId: conversationId), stored: nil, outcome: &outcome)
            if let serverId = row[2] as String? { try applyStoredChanges(db, targetLocalId: localId, serverId: serverId, outcome: &outcome) }
        }
        // The status stayed (history brought the seq first), but the delivery path is news: announce that once.
        let statusAfter = try String.fetchOne(db.cachedStatement(sql: "SELECT status FROM messages WHERE localId = ?"), arguments: [localId])
        if statusAfter == statusBefore, path != nil, previousPath == nil { outcome.noteStatus(try message(db, localId: localId)) }
    }

    // MARK: Reading

    static let messageColumns = """
        localId, conversationId, clientMessageId, serverId, seq, senderId, senderDeviceId, type, body, clientTimestamp,
        acceptedAt, storedAt, isOutgoing, status, failureCode, failureMessage, deliveryPath, recipientsOnline,
        editedAt, deletedAt, targetServerId, targetLocalId, recipientCount, deliveredCount, readCount,
        reactions, replyTo, replyToLocalId, replyPreview, threadRoot, threadRootLocalId, thread, attachments
        """

    func message(from row: Row) -> PigeonMessage {
        let failureCode: String? = row[14]
        let deletedAt: Int64? = row[19]
        return PigeonMessage(
            localId: row[0], conversationId: row[1], clientMessageId: row[2], serverId: row[3], seq: row[4], senderId: row[5],
            senderDeviceId: row[6], type: row[7], body: row[8], clientTimestamp: row[9], acceptedAt: row[10], storedAt: row[11],
            isOutgoing: row[12], status: MessageStatus(rawValue: row[13]) ?? .pending,
            deliveryPath: (row[16] as String?).flatMap(DeliveryPath.init(rawValue:)), recipientsOnline: row[17],
            failure: failureCode.map { ErrorDetail(code: ErrorCode(rawValue: $0), message: row[15] ?? "") },
            editedAt: row[18], deletedAt: deletedAt, targetServerId: row[20], targetLocalId: row[21],
            recipients: (row[22] as Int?).map { RecipientCounts(members: $0, delivered: row[23] ?? 0, read: row[24] ?? 0) },
            reactions: Self.decodeJSON([Reaction].self, row[25]) ?? [],
            replyTo: Self.reference(serverId: row[26], localId: row[27]),
            replyPreview: Self.decodeJSON(ReplyPreview.self, row[28]),
            threadRoot: Self.reference(serverId: row[29], localId: row[30]),
            thread: Self.decodeJSON(ThreadSummary.self, row[31]),
            attachments: deletedAt != nil ? [] : Self.decodeAttachments(row[32]).map { $0.attachment(sentDirectory: files.sent) })
    }

    private static func reference(serverId: String?, localId: Int64?) -> PigeonMessage.MessageReference? {
        serverId == nil && localId == nil ? nil : PigeonMessage.MessageReference(serverId: serverId, localId: localId)
    }

    /// A JSON column (`nil` when NULL or unreadable).
    static func decodeJSON<T: Decodable>(_ type: T.Type, _ text: String?) -> T? {
        guard let text else { return nil }
        return try? JSONDecoder().decode(T.self, from: Data(text.utf8))
    }

    /// A value for a JSON column (NULL for `nil`).
    static func jsonColumn(_ value: (some Encodable)?) -> String? {
        value.map { json($0) }
    }

    func message(_ db: Database, localId: Int64) throws -> PigeonMessage? {
        try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE localId = ?"), arguments: [localId]).map(self.message(from:))
    }

    func message(localId: Int64) throws -> PigeonMessage? {
        try pool.read { try self.message($0, localId: localId) }
    }

    func message(clientMessageId: String) async throws -> PigeonMessage? {
        try await pool.read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE senderDeviceId = ? AND clientMessageId = ?"),
                arguments: [deviceId, clientMessageId]
            ).map(self.message(from:))
        }
    }

    /// The messages a conversation's pages list: the app's and the member changes, not the edits and deletions
    /// (applied to the messages they change instead).
    static let listed = "type NOT IN ('pigeon.edit', 'pigeon.delete')"

    /// A page of a conversation, oldest first (newest last). Without `beforeSeq`: the newest `limit` messages,
    /// the unsent ones (no seq yet) last. With it: the `limit` stored messages just before that seq. Edits and
    /// deletions are not listed (see ``listed``).
    func messages(conversationId: String, beforeSeq: Int64?, limit: Int) throws -> (messages: [PigeonMessage], hasMore: Bool) {
        try pool.read { db in
            var page: [PigeonMessage] = []
            var remaining = limit
            if beforeSeq == nil {
                let unsent = try Row.fetchAll(db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE conversationId = ? AND seq IS NULL AND \(Self.listed) ORDER BY localId DESC LIMIT ?"),
                    arguments: [conversationId, limit + 1]
                ).map(self.message(from:))
                if unsent.count > limit { return (Array(unsent.prefix(limit).reversed()), true) }
                page = unsent.reversed()
                remaining -= unsent.count
            }
            let stored = try Row.fetchAll(db.cachedStatement(sql: """
                    SELECT \(Self.messageColumns) FROM messages WHERE conversationId = ? AND seq IS NOT NULL AND seq < ? AND \(Self.listed)
                    ORDER BY seq DESC LIMIT ?
                    """),
                arguments: [conversationId, beforeSeq ?? Int64.max, remaining + 1]
            ).map(self.message(from:))
            let hasMore = stored.count > remaining
            return (stored.prefix(remaining).reversed() + page, hasMore)
        }
    }

    /// Full-text search (FTS5, `unicode61` tokens, diacritics ignored), newest first. `query` is taken as plain
    /// words, each a prefix (`hel wor` finds "hello world"), never as FTS syntax.
    func search(_ query: String, conversationId: String?, limit: Int) throws -> [PigeonMessage] {
        let words = query.split { $0.isWhitespace || $0.isPunctuation || $0.isSymbol }.map { word in
            "\"" + word.replacingOccurrences(of: "\"", with: "\"\"") + "\"*"
        }
        guard !words.isEmpty else { return [] }
        let match = words.joined(separator: " ")
        return try pool.read { db in
            let columns = Self.messageColumns.split(separator: ",").map { "m." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", ")
            var sql = "SELECT \(columns) FROM messages_fts f JOIN messages m ON m.localId = f.rowid WHERE messages_fts MATCH ?"
            var arguments: StatementArguments = [match]
            if let conversationId {
                sql += " AND m.conversationId = ?"
                arguments += [conversationId]
            }
            sql += " ORDER BY m.localId DESC LIMIT ?"
            arguments += [limit]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).map(self.message(from:))
        }
    }

    func conversations() throws -> [PigeonConversation] {
        try pool.read { db in
            try String.fetchAll(
                db,
                sql: "SELECT id FROM conversations c WHERE NOT \(Self.isInvitation) ORDER BY lastActivityAt DESC, id",
                arguments: [userId]
            ).compactMap { try self.conversation(db, id: $0) }
        }
    }

    func conversation(id: String) throws -> PigeonConversation? {
        try pool.read { try self.conversation($0, id: id) }
    }

    func conversation(id: String) async throws -> PigeonConversation? {
        try await pool.read { try self.conversation($0, id: id) }
    }

    func conversation(_ db: Database, id: String) throws -> PigeonConversation? {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT id, name, createdAt, lastSeq, contiguousSeq, readSeq, kind, leftSeq, addedBy FROM conversations WHERE id = ?"), arguments: [id])
        else { return nil }
        let readSeq: Int64 = row[5]
        let members = try members(db, conversationId: id)
        let membership = members.first { $0.userId == userId }?.membership ?? .joined
        let name: String? = row[1]
        let kind = (row[6] as String?).flatMap(ConversationKind.init(rawValue:)) ?? Conversation.kind(name: name, memberCount: members.count)
        // Unread: past the read watermark and not shown (a main chat read on the screen is not unread while the
        // watermark waits below a thread reply the user has not opened).
        let unread = try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM messages WHERE conversationId = ? AND seq > ? AND isOutgoing = 0 AND status != 'read' AND type NOT LIKE 'pigeon.%'"), arguments: [id, readSeq]) ?? 0
        let last = try Row.fetchOne(db.cachedStatement(sql: """
                SELECT \(Self.messageColumns) FROM messages WHERE conversationId = ? AND \(Self.listed)
                ORDER BY seq IS NULL DESC, localId DESC LIMIT 1
                """),
            arguments: [id]
        ).map(self.message(from:))
        let newest: PigeonMessage?
        if let last, last.seq != nil {
            newest = try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE conversationId = ? AND seq IS NOT NULL AND \(Self.listed) ORDER BY seq DESC LIMIT 1"),
                arguments: [id]
            ).map(self.message(from:))
        } else {
            newest = last
        }
        return PigeonConversation(
            id: row[0], kind: kind, name: name, createdAt: row[2], lastSeq: row[3], contiguousSeq: row[4], readSeq: readSeq, members: members,
            unreadCount: unread, lastMessage: newest, leftAtSeq: row[7], membership: membership, invitedBy: membership == .invited ? row[8] : nil)
    }

    // MARK: Read receipts and sync state

    /// Marks the incoming messages up to `upToSeq` (default: everything on the device) as shown to the user: those of
    /// the main chat (with `includingThreadReplies`, thread replies too), or, with `threadRoot` (a root's serverId),
    /// that thread's replies. The read watermark then moves up to just below the first incoming message not shown:
    /// a read receipt means "shown to the user", so a main chat open on the screen never turns a thread reply blue
    /// that the user never opened. Returns the conversation when something changed.
    func markRead(conversationId: String, upToSeq: Int64?, threadRoot: String? = nil, includingThreadReplies: Bool = false) throws
        -> PigeonConversation?
    {
        try pool.write { db in
            guard let contiguous = try Int64.fetchOne(db, sql: "SELECT contiguousSeq FROM conversations WHERE id = ?", arguments: [conversationId]) else {
                throw PigeonClientError(.unknownConversation, "conversation \(conversationId) is not on this device")
            }
            let target = min(upToSeq ?? contiguous, contiguous)
            let scope: String
            var arguments: StatementArguments = [conversationId, target]
            if let threadRoot {
                scope = "threadRoot = ?"
                arguments += [threadRoot]
            } else {
                scope = includingThreadReplies ? "1" : "threadRoot IS NULL"
            }
            try db.execute(
                sql: "UPDATE messages SET status = 'read' WHERE conversationId = ? AND isOutgoing = 0 AND seq <= ? AND status != 'read' AND \(scope)",
                arguments: arguments)
            var changed = db.changesCount > 0
            let firstUnshown = try Int64.fetchOne(
                db,
                sql: "SELECT MIN(seq) FROM messages WHERE conversationId = ? AND isOutgoing = 0 AND seq IS NOT NULL AND seq <= ? AND status != 'read'",
                arguments: [conversationId, contiguous])
            let watermark = min(contiguous, (firstUnshown ?? contiguous + 1) - 1)
            try db.execute(sql: "UPDATE conversations SET readSeq = ? WHERE id = ? AND readSeq < ?", arguments: [watermark, conversationId, watermark])
            changed = changed || db.changesCount > 0
            guard changed else { return nil }
            return try self.conversation(db, id: conversationId)
        }
    }

    /// Watermarks this device owes the server: delivered up to the contiguous seq, read up to the local read
    /// watermark, where the server's record of this user is lower.
    func pendingReceipts() async throws -> [(conversationId: String, kind: ReceiptKind, upToSeq: Int64)] {
        try await pool.read { db in
            var out: [(String, ReceiptKind, Int64)] = []
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT c.id, c.contiguousSeq, c.readSeq, coalesce(m.deliveredSeq, 0), coalesce(m.readSeq, 0)
                    FROM conversations c LEFT JOIN members m ON m.conversationId = c.id AND m.userId = ?
                    WHERE c.leftSeq IS NULL AND coalesce(m.membership, 'joined') != 'invited'
                        AND (c.contiguousSeq > coalesce(m.deliveredSeq, 0) OR c.readSeq > coalesce(m.readSeq, 0))
                    """,
                arguments: [userId])
            for row in rows {
                let (id, contiguous, read, serverDelivered, serverRead): (String, Int64, Int64, Int64, Int64) = (row[0], row[1], row[2], row[3], row[4])
                if read > serverRead { out.append((id, .read, read)) }
                if contiguous > max(serverDelivered, read) { out.append((id, .delivered, contiguous)) }
            }
            return out
        }
    }

    func syncState() async throws -> (cursor: String?, needsFullSync: Bool) {
        try await pool.read { db in
            let row = try Row.fetchOne(db, sql: "SELECT streamCursor, needsFullSync FROM device WHERE id = 1")
            return (row?[0], row?[1] ?? true)
        }
    }

    func setNeedsFullSync(_ value: Bool) throws {
        try pool.write { try Self.setNeedsFullSync($0, value) }
    }

    func setNeedsFullSync(_ value: Bool) async throws {
        try await pool.write { try Self.setNeedsFullSync($0, value) }
    }

    private static func setNeedsFullSync(_ db: Database, _ value: Bool) throws {
        try db.execute(sql: "UPDATE device SET needsFullSync = ? WHERE id = 1", arguments: [value])
    }

    /// The highest localId given out so far (0 for an empty database): what ``arrivedCount(after:)`` counts from.
    func lastLocalId() async throws -> Int64 {
        try await pool.read { db in try Int64.fetchOne(db, sql: "SELECT coalesce(max(localId), 0) FROM messages") ?? 0 }
    }

    /// Messages that arrived from the server (not sent from this device) with a localId above `localId`.
    func arrivedCount(after localId: Int64) async throws -> Int {
        try await pool.read { db in
            try Int.fetchOne(db, sql: "SELECT count(*) FROM messages WHERE localId > ? AND senderDeviceId != ?", arguments: [localId, deviceId]) ?? 0
        }
    }

    /// Whether the message with this serverId is on the device.
    func hasMessage(serverId: String) async throws -> Bool {
        try await pool.read { db in try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM messages WHERE serverId = ?)", arguments: [serverId]) ?? false }
    }

    /// Conversations whose known last seq is beyond what is on the device, with that last seq (not those this user
    /// left: the server answers 404 there; nor invitations, fetched once accepted).
    func gaps() async throws -> [(conversationId: String, after: Int64, lastSeq: Int64)] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT id, contiguousSeq, lastSeq FROM conversations c WHERE lastSeq > contiguousSeq AND leftSeq IS NULL AND NOT \(Self.isInvitation) ORDER BY id",
                arguments: [userId]
            ).map { ($0[0], $0[1], $0[2]) }
        }
    }
}
