import GRDB
import PigeonProtocol

/// What arrived from the server, to be written to the local database.
package enum Incoming: Sendable {
    /// An event of the stream (WebSocket or SSE).
    case event(ServerEvent)
    /// Messages fetched with `messages?after=` (gap recovery, catch-up).
    case history(conversationId: String, [Message])
    /// The caller's conversations, fetched with `GET /v1/conversations` (catch-up).
    case conversations([Conversation])
}

/// What one applied batch changed, in the order it happened.
struct ApplyOutcome: Sendable {
    /// Messages new on this device, with their seq (announced in seq order by ``ReceiveOrder``).
    var received: [PigeonMessage] = []
    var statusChanged: [PigeonMessage] = []
    var conversationsChanged: [String] = []
    /// Outgoing messages the server has (stored or failed on the server): their outbox items are done.
    var outboxSettled: [(localId: Int64, clientMessageId: String)] = []
    /// Contiguous seq per conversation after the batch, for every conversation the batch touched.
    var contiguous: [String: Int64] = [:]
    /// Conversations where a higher seq than the contiguous one is known: fetch `after=` contiguous at once.
    var gaps: [String: Int64] = [:]
    /// The stream said `reset`: catch up every conversation.
    var resetRequested = false
    /// Ephemeral events, passed through.
    var typing: [TypingEvent] = []
    /// Conversations whose delivered or read watermark this device owes the server.
    var receiptsDue = false

    mutating func noteConversation(_ id: String) {
        if !conversationsChanged.contains(id) { conversationsChanged.append(id) }
    }

    mutating func noteStatus(_ message: PigeonMessage?) {
        guard let message else { return }
        if let index = statusChanged.firstIndex(where: { $0.localId == message.localId }) {
            statusChanged[index] = message
        } else {
            statusChanged.append(message)
        }
    }
}

extension LocalStore {
    /// Writes a batch in one transaction: persist first (the caller announces after), de-duplicating by serverId and
    /// by this device's clientMessageId, then advances each touched conversation's contiguous seq and, with the
    /// last event's cursor, the stream position.
    func apply(_ batch: [Incoming]) async throws -> ApplyOutcome {
        try await pool.write { db in
            var outcome = ApplyOutcome()
            var touched: Set<String> = []
            var watermarksMoved: Set<String> = []
            var cursor: String?
            for incoming in batch {
                switch incoming {
                case .event(let event):
                    if let eventCursor = event.cursor { cursor = eventCursor }
                    try self.apply(db, event: event, outcome: &outcome, touched: &touched, watermarksMoved: &watermarksMoved)
                case .history(_, let messages):
                    for message in messages { try self.upsert(db, message, outcome: &outcome, touched: &touched) }
                case .conversations(let conversations):
                    for conversation in conversations {
                        try self.upsert(db, conversation, outcome: &outcome, watermarksMoved: &watermarksMoved)
                        touched.insert(conversation.id)
                    }
                }
            }
            for conversationId in watermarksMoved.sorted() {
                try self.applyWatermarks(db, conversationId: conversationId, outcome: &outcome)
                outcome.noteConversation(conversationId)
            }
            for conversationId in touched.sorted() {
                let (contiguous, last) = try self.advanceContiguous(db, conversationId: conversationId)
                outcome.contiguous[conversationId] = contiguous
                if last > contiguous { outcome.gaps[conversationId] = contiguous }
            }
            if let cursor {
                try db.cachedStatement(sql: "UPDATE device SET streamCursor = ? WHERE id = 1").execute(arguments: [cursor])
            }
            return outcome
        }
    }

    private func apply(
        _ db: Database, event: ServerEvent, outcome: inout ApplyOutcome, touched: inout Set<String>, watermarksMoved: inout Set<String>
    ) throws {
        switch event {
        case .messageNew(_, let message):
            try upsert(db, message, outcome: &outcome, touched: &touched)
        case .messageStored(_, let stored):
            touched.insert(stored.conversationId)
            guard let localId = try ownLocalId(db, clientMessageId: stored.clientMessageId) else {
                // Sent from this device before a rebuild: the history fetch the gap triggers brings it back.
                try db.cachedStatement(sql: "UPDATE conversations SET lastSeq = max(lastSeq, ?) WHERE id = ?").execute(arguments: [stored.seq, stored.conversationId])
                return
            }
            try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?) WHERE localId = ?").execute(arguments: [stored.serverId, localId])
            outcome.noteStatus(try recordStored(db, localId: localId, seq: stored.seq, storedAt: stored.storedAt, recipientsOnline: stored.recipientsOnline))
            outcome.outboxSettled.append((localId, stored.clientMessageId))
            outcome.noteConversation(stored.conversationId)
        case .messageFailed(_, let failed):
            guard let localId = try ownLocalId(db, clientMessageId: failed.clientMessageId) else { return }
            try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?) WHERE localId = ?").execute(arguments: [failed.serverId, localId])
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE localId = ?").execute(arguments: [localId])
            outcome.noteStatus(try applyEvidence(db, .failedOnServer, localId: localId, failure: failed.error))
            outcome.outboxSettled.append((localId, failed.clientMessageId))
        case .receipt(_, let receipt):
            let column = receipt.kind == .read ? "readSeq" : "deliveredSeq"
            try db.execute(
                sql: "INSERT OR IGNORE INTO members (conversationId, userId) SELECT id, ? FROM conversations WHERE id = ?",
                arguments: [receipt.userId, receipt.conversationId])
            try db.execute(
                sql: "UPDATE members SET \(column) = max(\(column), ?) WHERE conversationId = ? AND userId = ?",
                arguments: [receipt.upToSeq, receipt.conversationId, receipt.userId])
            if receipt.kind == .read {
                try db.execute(
                    sql: "UPDATE members SET deliveredSeq = max(deliveredSeq, ?) WHERE conversationId = ? AND userId = ?",
                    arguments: [receipt.upToSeq, receipt.conversationId, receipt.userId])
            }
            watermarksMoved.insert(receipt.conversationId)
        case .conversationCreated(_, let conversation):
            try upsert(db, conversation, outcome: &outcome, watermarksMoved: &watermarksMoved)
            touched.insert(conversation.id)
        case .typing(let typing):
            outcome.typing.append(typing)
        case .reset:
            outcome.resetRequested = true
        case .unknown:
            break
        }
    }

    private func ownLocalId(_ db: Database, clientMessageId: String) throws -> Int64? {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT localId FROM messages WHERE senderDeviceId = ? AND clientMessageId = ?"), arguments: [deviceId, clientMessageId])
    }

    /// A stored message from the server: this device's own (matched by clientMessageId: it gets its seq) or new
    /// (inserted, unless its serverId is already here).
    private func upsert(_ db: Database, _ message: Message, outcome: inout ApplyOutcome, touched: inout Set<String>) throws {
        touched.insert(message.conversationId)
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO conversations (id, createdAt, lastActivityAt) VALUES (?, ?, ?)")
            .execute(arguments: [message.conversationId, message.storedAt, message.storedAt])
        try db.cachedStatement(sql: "UPDATE conversations SET lastSeq = max(lastSeq, ?), lastActivityAt = max(lastActivityAt, ?) WHERE id = ?")
            .execute(arguments: [message.seq, message.storedAt, message.conversationId])
        if message.senderDeviceId == deviceId, let localId = try ownLocalId(db, clientMessageId: message.clientMessageId) {
            let current = try Row.fetchOne(db.cachedStatement(sql: "SELECT seq FROM messages WHERE localId = ?"), arguments: [localId])
            if (current?[0] as Int64?) == nil {
                try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?), acceptedAt = coalesce(acceptedAt, ?) WHERE localId = ?")
                    .execute(arguments: [message.serverId, message.acceptedAt, localId])
                outcome.noteStatus(try applyEvidence(db, .accepted, localId: localId))
                outcome.noteStatus(try recordStored(db, localId: localId, seq: message.seq, storedAt: message.storedAt, recipientsOnline: nil))
                outcome.outboxSettled.append((localId, message.clientMessageId))
            }
            return
        }
        let isOutgoing = message.senderId == userId
        let readSeq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT readSeq FROM conversations WHERE id = ?"), arguments: [message.conversationId]) ?? 0
        var status: MessageStatus = isOutgoing ? .stored : (message.seq <= readSeq ? .read : .delivered)
        if isOutgoing {
            let (delivered, read) = try othersWatermarks(db, conversationId: message.conversationId)
            if let read, message.seq <= read {
                status = .read
            } else if let delivered, message.seq <= delivered {
                status = .delivered
            }
        }
        try db.cachedStatement(sql: """
            INSERT INTO messages (conversationId, clientMessageId, serverId, seq, senderId, senderDeviceId, type, body, clientTimestamp,
                acceptedAt, storedAt, isOutgoing, status)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT DO NOTHING
            """).execute(arguments: [
                message.conversationId, message.clientMessageId, message.serverId, message.seq, message.senderId, message.senderDeviceId,
                message.type, message.body, message.clientTimestamp, message.acceptedAt, message.storedAt, isOutgoing, status.rawValue,
            ])
        guard db.changesCount > 0 else { return }
        outcome.received.append(PigeonMessage(
            localId: db.lastInsertedRowID, conversationId: message.conversationId, clientMessageId: message.clientMessageId,
            serverId: message.serverId, seq: message.seq, senderId: message.senderId, senderDeviceId: message.senderDeviceId,
            type: message.type, body: message.body, clientTimestamp: message.clientTimestamp, acceptedAt: message.acceptedAt,
            storedAt: message.storedAt, isOutgoing: isOutgoing, status: status, deliveryPath: nil, recipientsOnline: nil, failure: nil))
        outcome.receiptsDue = true
    }

    private func upsert(_ db: Database, _ conversation: Conversation, outcome: inout ApplyOutcome, watermarksMoved: inout Set<String>) throws {
        try db.cachedStatement(sql: """
            INSERT INTO conversations (id, kind, name, createdAt, lastSeq, lastActivityAt) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, name = excluded.name, createdAt = excluded.createdAt,
                lastSeq = max(lastSeq, excluded.lastSeq)
            """).execute(arguments: [
                conversation.id, conversation.kind.rawValue, conversation.name, conversation.createdAt, conversation.lastSeq, conversation.createdAt,
            ])
        for member in conversation.members {
            try db.cachedStatement(sql: """
                INSERT INTO members (conversationId, userId, role, joinedSeq, deliveredSeq, readSeq) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (conversationId, userId) DO UPDATE SET role = excluded.role, joinedSeq = excluded.joinedSeq,
                    deliveredSeq = max(deliveredSeq, excluded.deliveredSeq), readSeq = max(readSeq, excluded.readSeq)
                """).execute(arguments: [conversation.id, member.userId, member.role.rawValue, member.joinedSeq, member.deliveredSeq, member.readSeq])
        }
        watermarksMoved.insert(conversation.id)
        outcome.noteConversation(conversation.id)
    }

    /// Carries the members' watermarks into the statuses: outgoing messages to ✓✓ and blue, and this user's own
    /// read watermark (from another of its devices) to the conversation's read position.
    private func applyWatermarks(_ db: Database, conversationId: String, outcome: inout ApplyOutcome) throws {
        if let ownRead = try Int64.fetchOne(db.cachedStatement(sql: "SELECT readSeq FROM members WHERE conversationId = ? AND userId = ?"), arguments: [conversationId, userId]) {
            try db.cachedStatement(sql: "UPDATE conversations SET readSeq = max(readSeq, min(?, contiguousSeq)) WHERE id = ?")
                .execute(arguments: [ownRead, conversationId])
            try db.cachedStatement(sql: """
                UPDATE messages SET status = 'read'
                WHERE conversationId = ? AND isOutgoing = 0 AND status != 'read' AND seq <= (SELECT readSeq FROM conversations WHERE id = ?)
                """).execute(arguments: [conversationId, conversationId])
        }
        let (delivered, read) = try othersWatermarks(db, conversationId: conversationId)
        for (evidence, watermark) in [(StatusEvidence.deliveredToAll, delivered), (.readByAll, read)] {
            guard let watermark, watermark > 0 else { continue }
            let statuses = evidence == .deliveredToAll ? "('sent', 'stored')" : "('sent', 'stored', 'delivered')"
            let ids = try Int64.fetchAll(
                db,
                sql: "SELECT localId FROM messages WHERE conversationId = ? AND isOutgoing = 1 AND seq <= ? AND status IN \(statuses) ORDER BY seq",
                arguments: [conversationId, watermark])
            for id in ids { outcome.noteStatus(try applyEvidence(db, evidence, localId: id)) }
        }
    }

    /// Moves the conversation's contiguous seq over every seq now on the device; returns it with the last known seq.
    private func advanceContiguous(_ db: Database, conversationId: String) throws -> (Int64, Int64) {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT contiguousSeq, lastSeq FROM conversations WHERE id = ?"), arguments: [conversationId]) else {
            return (0, 0)
        }
        var contiguous: Int64 = row[0]
        let last: Int64 = row[1]
        let seqs = try Int64.fetchCursor(db.cachedStatement(sql: "SELECT seq FROM messages WHERE conversationId = ? AND seq > ? ORDER BY seq"), arguments: [conversationId, contiguous])
        while let seq = try seqs.next(), seq == contiguous + 1 { contiguous = seq }
        try db.cachedStatement(sql: "UPDATE conversations SET contiguousSeq = ?, lastSeq = max(lastSeq, ?) WHERE id = ?")
            .execute(arguments: [contiguous, contiguous, conversationId])
        return (contiguous, max(last, contiguous))
    }
}
