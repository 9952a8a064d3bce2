import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Storing: the targets of edits and deletions, the processing of buffered messages (seq, events, dead letters).
extension SQLiteMessageStore {
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
    static func applyLifecycle(_ db: Database, targetId: String, newBody: String?, at now: Int64) throws {
        if let newBody {
            try db.cachedStatement(sql: "UPDATE messages SET body = at_rest_seal(?), edited_at = ? WHERE server_id = ?").execute(arguments: [newBody, now, targetId])
        } else {
            try db.cachedStatement(sql: "UPDATE messages SET body = '', deleted_at = ? WHERE server_id = ?").execute(arguments: [now, targetId])
            try db.cachedStatement(sql: "UPDATE messages SET body = at_rest_seal(?) WHERE target_id = ? AND type = ?")
                .execute(arguments: [MessageLifecycle.editText(serverId: targetId, body: ""), targetId, ServerMessageType.edit])
        }
    }

    static func fetchMembers(_ db: Database, _ conversationId: String) throws -> [String]? {
        let members = try String.fetchAll(
            db.cachedStatement(sql: "SELECT user_id FROM members WHERE conversation_id = ? ORDER BY user_id"), arguments: [conversationId])
        return members.isEmpty ? nil : members
    }

    // MARK: Processing

    struct BatchOutcome: Sendable {
        var results: [ProcessingResult]
        var events: [StoredEvent]
    }

    /// A message of a batch failed while it was processed without per-message savepoints.
    struct BatchNeedsIsolation: Error {
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

    func processInTransaction(
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
    static func storedSeq(_ db: Database, _ message: BufferedMessage) throws -> Int64? {
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
    static func insertMessage(_ db: Database, _ message: Message, targetId: String?) throws {
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
    static func linkAttachments(_ db: Database, _ message: Message) throws {
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

    func deadLetter(_ message: BufferedMessage, detail: ErrorDetail, now: Int64, payloads: EventPayload, _ db: Database) throws -> StoredEvent {
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
}
