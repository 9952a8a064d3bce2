import Foundation
import GRDB
import PigeonProtocol

/// What arrived from the server, to be written to the local database.
package enum Incoming: Sendable {
    /// An event of the stream (WebSocket or SSE).
    case event(ServerEvent)
    /// A page of messages fetched with `messages?after=` (gap recovery, catch-up). The server holds nothing else
    /// this user may see between `after` and `coveredThrough` (the page lists every seq it has there: a seq it
    /// leaves out is one this user never sees, such as a blocked user's message), so the conversation's contiguous
    /// seq may pass over the seqs missing there. `nil`: the page proves nothing (the messages are still applied).
    case history(conversationId: String, [Message], after: Int64 = 0, coveredThrough: Int64? = nil)
    /// The caller's conversations, fetched with `GET /v1/conversations` (catch-up).
    case conversations([Conversation])
    /// A page of a thread (`GET …/threads/{serverId}/messages`): its root and replies as of the read.
    case thread(ThreadPage)
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
    /// Messages whose shown text changed (an edit or deletion applied, or one of this device's reverted).
    var shown: [(localId: Int64, change: LocalStore.ShownChange)] = []
    /// This device's edits and deletions that failed, with the message each would have changed.
    var changeFailures: [(change: Int64, target: Int64)] = []
    /// This user's messages whose per-member counts changed.
    var recipientsChanged: [Int64] = []
    /// Member changes new on this device, in the order applied.
    var membersChanges: [(conversationId: String, change: MembersChange)] = []
    /// Some conversation is to be read again from the server (``LocalStore/conversationsToFetch()``).
    var fetchNeeded = false
    /// Messages whose shown reactions changed.
    var reactionsChanged: [Int64] = []
    /// This device's reactions that were dropped (refused, or their message not sent): message, key, action, why.
    var reactionFailures: [(localId: Int64, key: String, action: ReactionAction, reason: ErrorDetail)] = []
    /// Thread roots whose summary changed.
    var threadsChanged: [Int64] = []
    /// Conversations that became invitations of this user on this device (API.md 1.2).
    var invitationsReceived: [String] = []
    /// Invitations that this user accepted (on any of its devices).
    var invitationsAccepted: [String] = []
    /// Invitations declined (on any device of this user) or withdrawn: removed from the device at the end of the write.
    var invitationsGone: [String] = []
    /// The events of the fields above, made at the end of the write (``LocalStore/collectLifecycleEvents(_:_:)``).
    var lifecycleEvents: [PigeonEvent] = []

    mutating func noteConversation(_ id: String) {
        if !conversationsChanged.contains(id) { conversationsChanged.append(id) }
    }

    mutating func noteShown(_ localId: Int64, _ change: LocalStore.ShownChange) {
        if let index = shown.firstIndex(where: { $0.localId == localId }) {
            if shown[index].change != .deleted { shown[index].change = change }
        } else {
            shown.append((localId, change))
        }
    }

    mutating func noteReactions(_ localId: Int64) {
        if !reactionsChanged.contains(localId) { reactionsChanged.append(localId) }
    }

    mutating func noteThread(_ localId: Int64) {
        if !threadsChanged.contains(localId) { threadsChanged.append(localId) }
    }

    mutating func noteRecipients(_ localId: Int64) {
        if !recipientsChanged.contains(localId) { recipientsChanged.append(localId) }
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
                case .history(let conversationId, let messages, let after, let coveredThrough):
                    // The page was read after its last message was stored: its copies reflect every change up to there.
                    let readAfter = messages.map(\.seq).max() ?? 0
                    for message in messages {
                        try self.upsert(db, message, readAfter: readAfter, isRead: true, outcome: &outcome, touched: &touched, watermarksMoved: &watermarksMoved)
                    }
                    if let coveredThrough {
                        // Only from where this device has everything: below `after` nothing is proved.
                        try db.cachedStatement(sql: """
                            UPDATE conversations SET contiguousSeq = ?, lastSeq = max(lastSeq, ?) WHERE id = ? AND contiguousSeq >= ? AND contiguousSeq < ?
                            """).execute(arguments: [coveredThrough, coveredThrough, conversationId, after, coveredThrough])
                        touched.insert(conversationId)
                    }
                case .conversations(let conversations):
                    for conversation in conversations {
                        try self.applySnapshot(db, conversation, outcome: &outcome, watermarksMoved: &watermarksMoved)
                        touched.insert(conversation.id)
                    }
                case .thread(let page):
                    // Read after its newest message was stored; the root first, so that its summary (as of the read)
                    // already counts the replies that follow.
                    let messages = [page.root] + page.messages
                    let readAfter = messages.map(\.seq).max() ?? 0
                    for message in messages {
                        try self.upsert(db, message, readAfter: readAfter, isRead: true, outcome: &outcome, touched: &touched, watermarksMoved: &watermarksMoved)
                    }
                }
            }
            try self.removeGoneInvitations(db, outcome: &outcome, touched: &touched, watermarksMoved: &watermarksMoved)
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
            try self.collectLifecycleEvents(db, &outcome)
            return outcome
        }
    }

    private func apply(
        _ db: Database, event: ServerEvent, outcome: inout ApplyOutcome, touched: inout Set<String>, watermarksMoved: inout Set<String>
    ) throws {
        switch event {
        case .messageNew(_, let message):
            try upsert(db, message, readAfter: message.seq, isRead: false, outcome: &outcome, touched: &touched, watermarksMoved: &watermarksMoved)
        case .messageStored(_, let stored):
            touched.insert(stored.conversationId)
            guard let localId = try ownLocalId(db, clientMessageId: stored.clientMessageId) else {
                // Sent from this device before a rebuild: the history fetch the gap triggers brings it back.
                try db.cachedStatement(sql: "UPDATE conversations SET lastSeq = max(lastSeq, ?) WHERE id = ?").execute(arguments: [stored.seq, stored.conversationId])
                return
            }
            try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?) WHERE localId = ?").execute(arguments: [stored.serverId, localId])
            try recordWithheld(db, localId: localId, stored.withheldFrom)
            try recordStored(db, localId: localId, seq: stored.seq, storedAt: stored.storedAt, recipientsOnline: stored.recipientsOnline, outcome: &outcome)
            outcome.outboxSettled.append((localId, stored.clientMessageId))
            outcome.noteConversation(stored.conversationId)
        case .messageFailed(_, let failed):
            guard let localId = try ownLocalId(db, clientMessageId: failed.clientMessageId) else { return }
            try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?) WHERE localId = ?").execute(arguments: [failed.serverId, localId])
            try db.cachedStatement(sql: "DELETE FROM outbox WHERE localId = ?").execute(arguments: [localId])
            outcome.noteStatus(try applyEvidence(db, .failedOnServer, localId: localId, failure: failed.error))
            try revertFailedChange(db, changeLocalId: localId, outcome: &outcome)
            outcome.outboxSettled.append((localId, failed.clientMessageId))
        case .receipt(_, let receipt):
            let column = receipt.kind == .read ? "readSeq" : "deliveredSeq"
            let isMember = try Int.fetchOne(
                db.cachedStatement(sql: "SELECT count(*) FROM members WHERE conversationId = ? AND userId = ?"), arguments: [receipt.conversationId, receipt.userId]) == 1
            if !isMember {
                // This user's own row is needed to know which receipts the server confirmed; another member unknown
                // here means the member list is behind: the conversation is read again (it brings the watermarks).
                guard receipt.userId == userId else {
                    try requestFetch(db, conversationId: receipt.conversationId, outcome: &outcome)
                    return
                }
                try db.execute(
                    sql: "INSERT OR IGNORE INTO members (conversationId, userId) SELECT id, ? FROM conversations WHERE id = ? AND leftSeq IS NULL",
                    arguments: [receipt.userId, receipt.conversationId])
            }
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
            try applySnapshot(db, conversation, outcome: &outcome, watermarksMoved: &watermarksMoved)
            touched.insert(conversation.id)
        case .reaction(_, let reaction):
            try applyReactionEvent(db, reaction, outcome: &outcome)
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
    /// (inserted, unless its serverId is already here). A new message is then applied: a member change to the member
    /// list, an edit or deletion to its target, and the changes of it that arrived before it to it. `readAfter` is a
    /// seq the server read the copy at or after (its text reflects every change up to there); `isRead`: the copy
    /// comes from a read (a history or thread page), not from a `message.new`, so its reactions and thread summary
    /// are current as of the read and correct those of a copy already here. A new reply counts in its root's summary.
    private func upsert(
        _ db: Database, _ message: Message, readAfter: Int64, isRead: Bool, outcome: inout ApplyOutcome, touched: inout Set<String>,
        watermarksMoved: inout Set<String>
    ) throws {
        if try removesThisUserFromUnknownConversation(db, message) { return }
        touched.insert(message.conversationId)
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO conversations (id, createdAt, lastActivityAt, needsFetch) VALUES (?, ?, ?, 1)")
            .execute(arguments: [message.conversationId, message.storedAt, message.storedAt])
        if db.changesCount > 0 { outcome.fetchNeeded = true }
        try db.cachedStatement(sql: "UPDATE conversations SET lastSeq = max(lastSeq, ?), lastActivityAt = max(lastActivityAt, ?) WHERE id = ?")
            .execute(arguments: [message.seq, message.storedAt, message.conversationId])
        if message.senderDeviceId == deviceId, let localId = try ownLocalId(db, clientMessageId: message.clientMessageId) {
            let current = try Row.fetchOne(db.cachedStatement(sql: "SELECT seq FROM messages WHERE localId = ?"), arguments: [localId])
            if (current?[0] as Int64?) == nil {
                try db.cachedStatement(sql: "UPDATE messages SET serverId = coalesce(serverId, ?), acceptedAt = coalesce(acceptedAt, ?) WHERE localId = ?")
                    .execute(arguments: [message.serverId, message.acceptedAt, localId])
                outcome.noteStatus(try applyEvidence(db, .accepted, localId: localId))
                try recordWithheld(db, localId: localId, message.withheldFrom)
                try recordStored(db, localId: localId, seq: message.seq, storedAt: message.storedAt, recipientsOnline: nil, outcome: &outcome)
                outcome.outboxSettled.append((localId, message.clientMessageId))
            }
            if isRead, !Validation.isServerMessageType(message.type) { try refreshFromServer(db, message, localId: localId, outcome: &outcome) }
            return
        }
        let isServerType = Validation.isServerMessageType(message.type)
        let isOutgoing = message.senderId == userId
        let readSeq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT readSeq FROM conversations WHERE id = ?"), arguments: [message.conversationId]) ?? 0
        var status: MessageStatus = isOutgoing ? .stored : (message.seq <= readSeq ? .read : .delivered)
        var counts: RecipientCounts?
        if isOutgoing, !isServerType {
            let members = try members(db, conversationId: message.conversationId)
            let counted = RecipientCounts.counting(seq: message.seq, senderId: userId, members: members, withheldFrom: Set(message.withheldFrom ?? []))
            if counted.readByAll {
                status = .read
            } else if counted.deliveredToAll {
                status = .delivered
            }
            counts = counted
        }
        var targetServerId: String?
        switch message.type {
        case ServerMessageType.edit: targetServerId = (try? JSONDecoder().decode(EditBody.self, from: Data(message.body.utf8)))?.serverId
        case ServerMessageType.delete: targetServerId = (try? JSONDecoder().decode(DeleteBody.self, from: Data(message.body.utf8)))?.serverId
        default: break
        }
        let reactions = message.deletedAt == nil ? Self.reactionsColumn(message.reactions) : nil
        try db.cachedStatement(sql: """
            INSERT INTO messages (conversationId, clientMessageId, serverId, seq, senderId, senderDeviceId, type, body, clientTimestamp,
                acceptedAt, storedAt, isOutgoing, status, editedAt, deletedAt, confirmedEditedAt, confirmedDeletedAt, changeSeq, targetServerId,
                recipientCount, deliveredCount, readCount, reactions, confirmedReactions, replyTo, replyToLocalId, replyPreview, threadRoot,
                threadRootLocalId, thread, threadAt, attachments, withheldFrom)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT localId FROM messages WHERE serverId = ?), ?, ?,
                (SELECT localId FROM messages WHERE serverId = ?), ?, ?, ?, ?)
            ON CONFLICT DO NOTHING
            """).execute(arguments: [
                message.conversationId, message.clientMessageId, message.serverId, message.seq, message.senderId, message.senderDeviceId,
                message.type, message.body, message.clientTimestamp, message.acceptedAt, message.storedAt, isOutgoing, status.rawValue,
                message.editedAt, message.deletedAt, message.editedAt, message.deletedAt, max(readAfter, message.seq), targetServerId,
                counts?.members, counts?.delivered, counts?.read, reactions, reactions, message.replyTo, message.replyTo,
                Self.jsonColumn(message.replyPreview), message.threadRoot, message.threadRoot, Self.jsonColumn(message.thread),
                message.thread?.lastReplyAt ?? 0, Self.attachmentsColumn(message.attachments.map(LocalAttachment.init)),
                isOutgoing ? message.withheldFrom.flatMap { $0.isEmpty ? nil : Self.json($0.sorted()) } : nil,
            ])
        guard db.changesCount > 0 else {
            // Already here: a copy read from the server has its reactions, thread summary and quote as of the read (a
            // `message.new` carries them as of the store, older than what followed it on the stream).
            if isRead, !isServerType, let localId = try Int64.fetchOne(db.cachedStatement(sql: "SELECT localId FROM messages WHERE serverId = ?"), arguments: [message.serverId]) {
                try refreshFromServer(db, message, localId: localId, outcome: &outcome)
            }
            return
        }
        let localId = db.lastInsertedRowID
        if message.threadRoot != nil, message.deletedAt == nil, !isServerType {
            try noteReply(db, rootServerId: message.threadRoot, rootLocalId: nil, senderId: message.senderId, storedAt: message.storedAt, outcome: &outcome)
        }
        outcome.receiptsDue = true
        var received = PigeonMessage(
            localId: localId, conversationId: message.conversationId, clientMessageId: message.clientMessageId,
            serverId: message.serverId, seq: message.seq, senderId: message.senderId, senderDeviceId: message.senderDeviceId,
            type: message.type, body: message.body, clientTimestamp: message.clientTimestamp, acceptedAt: message.acceptedAt,
            storedAt: message.storedAt, isOutgoing: isOutgoing, status: status, deliveryPath: nil, recipientsOnline: nil, failure: nil,
            editedAt: message.editedAt, deletedAt: message.deletedAt, targetServerId: targetServerId, recipients: counts)
        if message.replyTo != nil || message.threadRoot != nil || message.thread != nil || !message.reactions.isEmpty || !message.attachments.isEmpty {
            received = try self.message(db, localId: localId) ?? received
        }
        switch received.kind {
        case .message:
            let shownBefore = outcome.shown.count
            try applyStoredChanges(db, targetLocalId: localId, serverId: message.serverId, outcome: &outcome)
            // Changes that came before it are part of how it arrives, not news of their own.
            if outcome.shown.count > shownBefore {
                outcome.shown.removeSubrange(shownBefore...)
                received = try self.message(db, localId: localId) ?? received
            }
        case .membersChange(let change):
            try applyMembersChange(db, change, conversationId: message.conversationId, seq: message.seq, outcome: &outcome, watermarksMoved: &watermarksMoved)
        case .edit, .delete:
            try applyStoredChange(db, changeLocalId: localId, outcome: &outcome)
            return
        case .unknownServerType:
            break
        }
        outcome.received.append(received)
    }

    /// A change removing this user from a conversation this device does not have (an invitation declined here, and
    /// removed already, or one it never saw) brings nothing: it would only leave an empty, left conversation behind.
    private func removesThisUserFromUnknownConversation(_ db: Database, _ message: Message) throws -> Bool {
        guard message.type == ServerMessageType.members,
            let change = try? JSONDecoder().decode(MembersChange.self, from: Data(message.body.utf8)),
            change.action == .removed || change.action == .left, change.userIds.contains(userId)
        else { return false }
        return try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM conversations WHERE id = ?"), arguments: [message.conversationId]) == 0
    }

    /// Carries the members' watermarks into the statuses: this user's messages to ✓✓ and blue (with their per-member
    /// counts), and this user's own read watermark (from another of its devices) to the conversation's read position.
    private func applyWatermarks(_ db: Database, conversationId: String, outcome: inout ApplyOutcome) throws {
        if let ownRead = try Int64.fetchOne(db.cachedStatement(sql: "SELECT readSeq FROM members WHERE conversationId = ? AND userId = ?"), arguments: [conversationId, userId]) {
            try db.cachedStatement(sql: "UPDATE conversations SET readSeq = max(readSeq, min(?, contiguousSeq)) WHERE id = ?")
                .execute(arguments: [ownRead, conversationId])
            try db.cachedStatement(sql: """
                UPDATE messages SET status = 'read'
                WHERE conversationId = ? AND isOutgoing = 0 AND status != 'read' AND seq <= (SELECT readSeq FROM conversations WHERE id = ?)
                """).execute(arguments: [conversationId, conversationId])
        }
        try refreshRecipients(db, conversationId: conversationId, outcome: &outcome)
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
