import Foundation
import GRDB
import PigeonProtocol

/// Editing and deleting (API.md 1.1) in the local database.
///
/// An edit or a deletion is a message of its own (`pigeon.edit`, `pigeon.delete`) with its own seq, status and, when
/// made here, outbox item. The message it changes (its target) keeps two revisions: the one the server confirmed
/// (`confirmedBody`, `confirmedEditedAt`, `confirmedDeletedAt`, and `changeSeq`, the seq of the last change it
/// reflects; see ``ConfirmedRevision``) and the one shown (`body`, `editedAt`, `deletedAt`: the confirmed one with this
/// device's changes that are not stored yet on top; see ``MessageRevision``). The full-text index follows `body`, so a
/// search sees what is shown. `confirmedBody` is NULL when it equals `body`.
extension LocalStore {
    /// A change of a message's text that this device shows or announces.
    enum ShownChange: Sendable, Equatable {
        case edited, deleted
    }

    /// Saves an edit (`newBody`) or a deletion (`nil`) of the message `targetLocalId` with its outbox item, and shows it
    /// on the target at once. Returns the change (pending, ⏰) and the outcome to announce.
    func insertChange(
        targetLocalId: Int64, newBody: String?, clientMessageId: String, clientTimestamp: Int64
    ) throws -> (PigeonMessage, ApplyOutcome) {
        try pool.write { db in
            guard let target = try self.message(db, localId: targetLocalId) else {
                throw PigeonClientError(.unknownMessage, "no message with local id \(targetLocalId)")
            }
            guard target.kind == .message else {
                throw PigeonClientError.invalid("message \(targetLocalId) is a \(target.type) message: only the app's messages are edited or deleted")
            }
            try self.requireMembership(db, conversationId: target.conversationId)
            guard target.deletedAt == nil else {
                throw PigeonClientError.invalid("message \(targetLocalId) is deleted")
            }
            if target.serverId == nil, target.status == .failed {
                throw PigeonClientError.invalid("message \(targetLocalId) was not sent (⚠️): retry it first")
            }
            let type: String
            let body: String
            if let newBody {
                type = ServerMessageType.edit
                body = Self.json(EditBody(serverId: target.serverId ?? "", body: newBody))
            } else {
                type = ServerMessageType.delete
                body = Self.json(DeleteBody(serverId: target.serverId ?? ""))
            }
            try db.cachedStatement(sql: """
                INSERT INTO messages (conversationId, clientMessageId, senderId, senderDeviceId, type, body, clientTimestamp, isOutgoing, status,
                    targetServerId, targetLocalId)
                VALUES (?, ?, ?, ?, ?, ?, ?, 1, 'pending', ?, ?)
                """).execute(arguments: [
                    target.conversationId, clientMessageId, self.userId, self.deviceId, type, body, clientTimestamp, target.serverId, targetLocalId,
                ])
            let localId = db.lastInsertedRowID
            try db.cachedStatement(sql: "INSERT INTO outbox (localId, conversationId, clientMessageId) VALUES (?, ?, ?)")
                .execute(arguments: [localId, target.conversationId, clientMessageId])
            var outcome = ApplyOutcome()
            try self.refreshShown(db, localId: targetLocalId, outcome: &outcome)
            try self.collectLifecycleEvents(db, &outcome)
            guard let change = try self.message(db, localId: localId) else {
                throw PigeonClientError(.localDatabase, "the change \(localId) was not saved")
            }
            return (change, outcome)
        }
    }

    /// The app's before-send hook stored another body than this device sent (the answer says `bodyReplaced` and
    /// carries it): the sender's copy reads as stored. A message takes it as its confirmed body (what it shows is
    /// recomputed, with this device's pending edits on top); an edit takes it as its new text, and its target shows it.
    func applyReplacedBody(_ db: Database, localId: Int64, body stored: String, outcome: inout ApplyOutcome) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT type, body, targetLocalId FROM messages WHERE localId = ?"), arguments: [localId])
        else { return }
        let (type, body, targetLocalId): (String, String, Int64?) = (row[0], row[1], row[2])
        if type == ServerMessageType.edit {
            guard var edit = try? JSONDecoder().decode(EditBody.self, from: Data(body.utf8)) else { return }
            edit.body = stored
            try db.cachedStatement(sql: "UPDATE messages SET body = ? WHERE localId = ?").execute(arguments: [Self.json(edit), localId])
            guard let targetLocalId else { return }
            // Stored before this answer came (over HTTP the stream's `message.stored` can overtake it): the edit already
            // gave its target's confirmed revision the typed body. When it is the last change applied there, the
            // confirmed body is the stored one.
            if let seq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM messages WHERE localId = ?"), arguments: [localId]) {
                try db.cachedStatement(sql: "UPDATE messages SET confirmedBody = ? WHERE localId = ? AND changeSeq = ?")
                    .execute(arguments: [stored, targetLocalId, seq])
            }
            try refreshShown(db, localId: targetLocalId, outcome: &outcome)
            return
        }
        guard type != ServerMessageType.delete else { return }
        // The confirmed body is `body` while `confirmedBody` is NULL (nothing pending on top), else `confirmedBody`.
        try db.cachedStatement(sql: """
            UPDATE messages SET body = CASE WHEN confirmedBody IS NULL THEN ? ELSE body END,
                confirmedBody = CASE WHEN confirmedBody IS NULL THEN NULL ELSE ? END
            WHERE localId = ?
            """).execute(arguments: [stored, stored, localId])
        outcome.noteShown(localId, .edited)
        try refreshShown(db, localId: localId, outcome: &outcome)
    }

    /// Recomputes what a message shows: its confirmed revision with this device's pending (not stored, not failed)
    /// edits and deletions on top, oldest first. Notes a change of what is shown.
    func refreshShown(_ db: Database, localId: Int64, outcome: inout ApplyOutcome) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: """
                SELECT body, editedAt, deletedAt, coalesce(confirmedBody, body), confirmedEditedAt, confirmedDeletedAt, confirmedBody
                FROM messages WHERE localId = ?
                """),
            arguments: [localId])
        else { return }
        let shownBefore = MessageRevision(body: row[0], editedAt: row[1], deletedAt: row[2])
        let confirmed = MessageRevision(body: row[3], editedAt: row[4], deletedAt: row[5])
        let pending = try Row.fetchAll(
            db.cachedStatement(sql: """
                SELECT type, body, clientTimestamp FROM messages
                WHERE targetLocalId = ? AND senderDeviceId = ? AND seq IS NULL AND status != 'failed' ORDER BY localId
                """),
            arguments: [localId, deviceId]
        ).compactMap { row -> MessageRevision.Change? in
            let (type, body, at): (String, String, Int64) = (row[0], row[1], row[2])
            if type == ServerMessageType.delete { return .delete(at: at) }
            return (try? JSONDecoder().decode(EditBody.self, from: Data(body.utf8))).map { .edit(body: $0.body, at: at) }
        }
        let shown = confirmed.showing(pending: pending)
        let confirmedBody: String? = shown.body == confirmed.body ? nil : confirmed.body
        if shown != shownBefore || confirmedBody != row[6] as String? {
            try db.cachedStatement(sql: "UPDATE messages SET body = ?, editedAt = ?, deletedAt = ?, confirmedBody = ? WHERE localId = ?")
                .execute(arguments: [shown.body, shown.editedAt, shown.deletedAt, confirmedBody, localId])
        }
        if shown != shownBefore {
            outcome.noteShown(localId, shown.deletedAt != nil && shownBefore.deletedAt == nil ? .deleted : .edited)
            // A deleted message shows no reactions (a deletion undone shows them again).
            if (shown.deletedAt == nil) != (shownBefore.deletedAt == nil) { try refreshReactions(db, localId: localId, outcome: &outcome) }
        }
    }

    /// An edit or a deletion now stored (it has its seq): applied to its target's confirmed revision, if the target
    /// is on this device (else when it arrives: ``applyStoredChanges(_:targetLocalId:serverId:outcome:)``).
    func applyStoredChange(_ db: Database, changeLocalId: Int64, outcome: inout ApplyOutcome) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT type, body, seq, storedAt, clientTimestamp, targetServerId, targetLocalId FROM messages WHERE localId = ?"),
            arguments: [changeLocalId])
        else { return }
        let (type, body): (String, String) = (row[0], row[1])
        guard let seq = row[2] as Int64? else { return }
        let at: Int64 = row[3] ?? row[4]
        let change: MessageRevision.Change
        let bodyServerId: String?
        if type == ServerMessageType.edit, let edit = try? JSONDecoder().decode(EditBody.self, from: Data(body.utf8)) {
            change = .edit(body: edit.body, at: at)
            bodyServerId = edit.serverId
        } else if type == ServerMessageType.delete, let delete = try? JSONDecoder().decode(DeleteBody.self, from: Data(body.utf8)) {
            change = .delete(at: at)
            bodyServerId = delete.serverId
        } else {
            return
        }
        let serverId = (row[5] as String?) ?? bodyServerId.flatMap { $0.isEmpty ? nil : $0 }
        var targetLocalId: Int64? = row[6]
        if targetLocalId == nil, let serverId {
            targetLocalId = try Int64.fetchOne(db.cachedStatement(sql: "SELECT localId FROM messages WHERE serverId = ?"), arguments: [serverId])
        }
        guard let targetLocalId,
            let target = try Row.fetchOne(
                db.cachedStatement(sql: """
                    SELECT coalesce(confirmedBody, body), confirmedEditedAt, confirmedDeletedAt, changeSeq, serverId, type, threadRoot, threadRootLocalId
                    FROM messages WHERE localId = ?
                    """),
                arguments: [targetLocalId])
        else { return }
        guard !Validation.isServerMessageType(target[5]) else { return }
        try db.cachedStatement(sql: "UPDATE messages SET targetLocalId = ?, targetServerId = coalesce(targetServerId, ?) WHERE localId = ?")
            .execute(arguments: [targetLocalId, target[4] as String?, changeLocalId])
        var confirmed = ConfirmedRevision(
            revision: MessageRevision(body: target[0], editedAt: target[1], deletedAt: target[2]), changeSeq: target[3])
        guard confirmed.apply(change, seq: seq) else {
            try db.cachedStatement(sql: "UPDATE messages SET changeSeq = ? WHERE localId = ?").execute(arguments: [confirmed.changeSeq, targetLocalId])
            try refreshShown(db, localId: targetLocalId, outcome: &outcome)
            return
        }
        try db.cachedStatement(sql: """
            UPDATE messages SET confirmedBody = ?, confirmedEditedAt = ?, confirmedDeletedAt = ?, changeSeq = ? WHERE localId = ?
            """).execute(arguments: [
                confirmed.revision.body, confirmed.revision.editedAt, confirmed.revision.deletedAt, confirmed.changeSeq, targetLocalId,
            ])
        if case .delete = change {
            try eraseEdits(db, targetLocalId: targetLocalId, serverId: target[4])
            // The server drops a deleted message's reactions, and counts its thread's replies again.
            try db.cachedStatement(sql: "UPDATE messages SET confirmedReactions = NULL WHERE localId = ?").execute(arguments: [targetLocalId])
            if (target[6] as String?) != nil || (target[7] as Int64?) != nil {
                try recomputeThread(db, rootServerId: target[6], rootLocalId: target[7], outcome: &outcome)
            }
        }
        try refreshQuotes(db, quotedLocalId: targetLocalId)
        try refreshShown(db, localId: targetLocalId, outcome: &outcome)
    }

    /// A message new on this device (or one that just got its serverId): applies the stored edits and deletions of it
    /// that arrived before it, in seq order.
    func applyStoredChanges(_ db: Database, targetLocalId: Int64, serverId: String, outcome: inout ApplyOutcome) throws {
        let changes = try Int64.fetchAll(
            db.cachedStatement(sql: "SELECT localId FROM messages WHERE targetServerId = ? AND seq IS NOT NULL AND (targetLocalId IS NULL OR targetLocalId = ?) ORDER BY seq"),
            arguments: [serverId, targetLocalId])
        for change in changes { try applyStoredChange(db, changeLocalId: change, outcome: &outcome) }
    }

    /// A deleted message's text is erased from its edits too, as on the server.
    private func eraseEdits(_ db: Database, targetLocalId: Int64, serverId: String?) throws {
        try db.cachedStatement(sql: """
            UPDATE messages SET body = ? WHERE type = ? AND (targetLocalId = ? OR (? IS NOT NULL AND targetServerId = ?))
            """).execute(arguments: [
                Self.json(EditBody(serverId: serverId ?? "", body: "")), ServerMessageType.edit, targetLocalId, serverId, serverId,
            ])
    }

    /// An edit or deletion of this device failed (refused, or dead-lettered): its target shows what it showed without it.
    func revertFailedChange(_ db: Database, changeLocalId: Int64, outcome: inout ApplyOutcome) throws {
        guard let target = try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT targetLocalId FROM messages WHERE localId = ? AND type IN (?, ?) AND status = 'failed'"),
            arguments: [changeLocalId, ServerMessageType.edit, ServerMessageType.delete])
        else { return }
        try refreshShown(db, localId: target, outcome: &outcome)
        outcome.changeFailures.append((changeLocalId, target))
    }

    /// What to put on the wire for an outbox item: a send (naming its uploaded attachments), or an edit or deletion of
    /// a message whose serverId is known (then also written to the change, so a salvaged outbox keeps it);
    /// `.targetNotSent` when the target never reached the server (it failed), `.uploadsPending` when an attachment has
    /// no id yet. `nil` when the message is gone.
    func outboxRequest(localId: Int64) async throws -> OutboxRequest? {
        try await pool.write { db in
            guard let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT clientMessageId, type, body, clientTimestamp, targetServerId, targetLocalId FROM messages WHERE localId = ?"),
                arguments: [localId])
            else { return nil }
            let (clientMessageId, type, body, clientTimestamp): (String, String, String, Int64) = (row[0], row[1], row[2], row[3])
            guard type == ServerMessageType.edit || type == ServerMessageType.delete else {
                let sent = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT coalesce(confirmedBody, body), attachments FROM messages WHERE localId = ?"), arguments: [localId])
                guard let references = try self.resolveReferences(db, localId: localId) else { return .targetNotSent }
                let attachments = Self.decodeAttachments(sent.flatMap { $0[1] as String? })
                let uploaded = attachments.compactMap(\.reference)
                guard uploaded.count == attachments.count else { return .uploadsPending }
                return .send(SendMessageRequest(
                    clientMessageId: clientMessageId, type: type, body: sent.flatMap { $0[0] as String? } ?? body, clientTimestamp: clientTimestamp,
                    replyTo: references.replyTo, threadRoot: references.threadRoot, attachments: uploaded.isEmpty ? nil : uploaded))
            }
            var serverId: String? = row[4]
            if serverId == nil, let target = row[5] as Int64? {
                serverId = try String.fetchOne(db.cachedStatement(sql: "SELECT serverId FROM messages WHERE localId = ?"), arguments: [target])
            }
            let edit = type == ServerMessageType.edit ? try? JSONDecoder().decode(EditBody.self, from: Data(body.utf8)) : nil
            if serverId == nil {
                let named = edit?.serverId ?? (try? JSONDecoder().decode(DeleteBody.self, from: Data(body.utf8)))?.serverId
                serverId = named.flatMap { $0.isEmpty ? nil : $0 }
            }
            guard let serverId else { return .targetNotSent }
            if row[4] as String? == nil {
                let rewritten = edit.map { Self.json(EditBody(serverId: serverId, body: $0.body)) } ?? Self.json(DeleteBody(serverId: serverId))
                try db.cachedStatement(sql: "UPDATE messages SET targetServerId = ?, body = ? WHERE localId = ?").execute(arguments: [serverId, rewritten, localId])
            }
            if let edit {
                return .edit(serverId: serverId, EditMessageRequest(clientMessageId: clientMessageId, body: edit.body, clientTimestamp: clientTimestamp))
            }
            return .delete(serverId: serverId, DeleteMessageRequest(clientMessageId: clientMessageId, clientTimestamp: clientTimestamp))
        }
    }

    /// Turns what a write noted into events, reading the messages and conversations as the write leaves them: shown
    /// edits and deletions, refused changes, per-member counts, member changes.
    func collectLifecycleEvents(_ db: Database, _ outcome: inout ApplyOutcome) throws {
        var events: [PigeonEvent] = []
        let failedTargets = Set(outcome.changeFailures.map(\.target))
        for (localId, change) in outcome.shown where !failedTargets.contains(localId) {
            guard let message = try message(db, localId: localId) else { continue }
            events.append(change == .deleted ? .messageDeleted(message) : .messageEdited(message))
        }
        for (changeLocalId, target) in outcome.changeFailures {
            guard let change = try message(db, localId: changeLocalId), let message = try message(db, localId: target) else { continue }
            events.append(.messageChangeFailed(change: change, message: message))
        }
        for localId in outcome.recipientsChanged {
            if let message = try message(db, localId: localId) { events.append(.recipientsChanged(message)) }
        }
        let failedReactions = Set(outcome.reactionFailures.map(\.localId))
        for localId in outcome.reactionsChanged where !failedReactions.contains(localId) {
            if let message = try message(db, localId: localId) { events.append(.reactionsChanged(message)) }
        }
        for failure in outcome.reactionFailures {
            guard let message = try message(db, localId: failure.localId) else { continue }
            events.append(.reactionFailed(message: message, key: failure.key, action: failure.action, error: failure.reason))
        }
        for localId in outcome.threadsChanged {
            if let message = try message(db, localId: localId) { events.append(.threadUpdated(message)) }
        }
        for (conversationId, change) in outcome.membersChanges {
            guard let conversation = try conversation(db, id: conversationId) else { continue }
            let concernsMe = change.userIds.contains(userId)
            switch change.action {
            case .removed where concernsMe, .left where concernsMe: events.append(.leftConversation(conversation, change))
            case .added, .removed, .left: events.append(.membersChanged(conversation, change))
            case .role: events.append(.roleChanged(conversation, change))
            case .renamed: events.append(.conversationRenamed(conversation, change))
            }
        }
        for conversationId in outcome.invitationsReceived {
            if let conversation = try conversation(db, id: conversationId) { events.append(.invitationReceived(conversation)) }
        }
        for conversationId in outcome.invitationsAccepted {
            if let conversation = try conversation(db, id: conversationId) { events.append(.invitationAccepted(conversation)) }
        }
        for conversationId in outcome.invitationsGone { events.append(.invitationRemoved(conversationId: conversationId)) }
        outcome.lifecycleEvents += events
        outcome.invitationsReceived = []
        outcome.invitationsAccepted = []
        outcome.invitationsGone = []
        outcome.shown = []
        outcome.changeFailures = []
        outcome.recipientsChanged = []
        outcome.membersChanges = []
        outcome.reactionsChanged = []
        outcome.reactionFailures = []
        outcome.threadsChanged = []
    }

    static func json(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}

/// What an outbox item puts on the wire.
enum OutboxRequest: Sendable {
    case send(SendMessageRequest)
    case edit(serverId: String, EditMessageRequest)
    case delete(serverId: String, DeleteMessageRequest)
    /// A reaction (API.md 1.2).
    case react(ReactRequest)
    /// An edit, deletion, reply or reaction of a message that never reached the server (it failed): it cannot go.
    case targetNotSent
    /// A message whose attachments are not all uploaded yet: it cannot go before they are.
    case uploadsPending
}
