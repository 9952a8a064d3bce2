import Foundation
import GRDB
import PigeonProtocol

/// Replies and threads (API.md 1.2) in the local database.
///
/// A reply keeps the quoted message's reference and preview; a thread reply its root's reference. A reference to a
/// message sent from this device may wait for its serverId (its local id is kept beside, and the serverId is written
/// when the reply goes out).
///
/// A root's summary (`thread`) is the server's as last read, moved on here: a reply new on this device that was stored
/// after the newest reply the summary counts (`threadAt`) is added to it, and a confirmed deletion of a reply
/// recomputes it from the replies on this device. A reply the summary already counts is never added twice, whichever
/// way it arrives (stream, gap fetch, thread page).
extension LocalStore {
    /// A copy of a message already on this device, read from the server (a history or thread page, `lastMessage`):
    /// its reactions, thread summary and quote are as of that read and replace what is known.
    func refreshFromServer(_ db: Database, _ message: Message, localId: Int64, outcome: inout ApplyOutcome) throws {
        try setConfirmedReactions(db, localId: localId, message.deletedAt == nil ? message.reactions : [], outcome: &outcome)
        try setThread(db, localId: localId, message.thread, outcome: &outcome)
        if let preview = message.replyPreview {
            try db.cachedStatement(sql: "UPDATE messages SET replyPreview = ?, replyTo = coalesce(replyTo, ?) WHERE localId = ?")
                .execute(arguments: [Self.json(preview), message.replyTo, localId])
        }
        if let root = message.threadRoot {
            try db.cachedStatement(sql: "UPDATE messages SET threadRoot = coalesce(threadRoot, ?) WHERE localId = ?").execute(arguments: [root, localId])
        }
        if message.senderId == userId, let withheld = message.withheldFrom, !withheld.isEmpty {
            try recordWithheld(db, localId: localId, withheld)
            try recount(db, localId: localId, seq: message.seq, members: members(db, conversationId: message.conversationId), stored: nil, outcome: &outcome)
        }
    }

    /// A root's summary as the server gave it.
    func setThread(_ db: Database, localId: Int64, _ summary: ThreadSummary?, outcome: inout ApplyOutcome) throws {
        let before = try String.fetchOne(db.cachedStatement(sql: "SELECT thread FROM messages WHERE localId = ?"), arguments: [localId])
        let after = Self.jsonColumn(summary)
        try db.cachedStatement(sql: "UPDATE messages SET thread = ?, threadAt = ? WHERE localId = ?")
            .execute(arguments: [after, summary?.lastReplyAt ?? 0, localId])
        if before != after { outcome.noteThread(localId) }
    }

    /// A reply by `senderId` stored at `storedAt` is new on this device: its root's summary counts it, unless the
    /// summary already does (it counts every reply stored up to `threadAt`).
    func noteReply(_ db: Database, rootServerId: String?, rootLocalId: Int64?, senderId: String, storedAt: Int64, outcome: inout ApplyOutcome) throws {
        guard let root = try threadRootRow(db, serverId: rootServerId, localId: rootLocalId) else { return }
        guard storedAt > root.threadAt else { return }
        let summary = (root.thread ?? ThreadSummary(replyCount: 0, lastReplyAt: 0, lastReplySenders: [])).adding(replyBy: senderId, at: storedAt)
        try db.cachedStatement(sql: "UPDATE messages SET thread = ?, threadAt = ? WHERE localId = ?")
            .execute(arguments: [Self.json(summary), storedAt, root.localId])
        outcome.noteThread(root.localId)
    }

    /// A reply of the thread was deleted: the root's summary is counted again from the replies on this device.
    func recomputeThread(_ db: Database, rootServerId: String?, rootLocalId: Int64?, outcome: inout ApplyOutcome) throws {
        guard let root = try threadRootRow(db, serverId: rootServerId, localId: rootLocalId) else { return }
        let replies = try Row.fetchAll(
            db.cachedStatement(sql: """
                SELECT senderId, coalesce(storedAt, clientTimestamp) FROM messages
                WHERE (threadRoot = ? OR threadRootLocalId = ?) AND seq IS NOT NULL AND confirmedDeletedAt IS NULL ORDER BY seq DESC
                """),
            arguments: [root.serverId, root.localId]
        ).map { (senderId: $0[0] as String, storedAt: $0[1] as Int64) }
        try setThread(db, localId: root.localId, ThreadSummary.of(newestFirst: replies, count: replies.count), outcome: &outcome)
    }

    private func threadRootRow(
        _ db: Database, serverId: String?, localId: Int64?
    ) throws -> (localId: Int64, serverId: String?, thread: ThreadSummary?, threadAt: Int64)? {
        let row: Row?
        if let localId {
            row = try Row.fetchOne(db.cachedStatement(sql: "SELECT localId, serverId, thread, threadAt FROM messages WHERE localId = ?"), arguments: [localId])
        } else if let serverId {
            row = try Row.fetchOne(db.cachedStatement(sql: "SELECT localId, serverId, thread, threadAt FROM messages WHERE serverId = ?"), arguments: [serverId])
        } else {
            row = nil
        }
        guard let row else { return nil }
        return (row[0], row[1], Self.decodeJSON(ThreadSummary.self, row[2]), row[3])
    }

    /// The quotes of a message (in the replies to it) follow its confirmed text: an edit shows in them, a deletion
    /// empties them.
    func refreshQuotes(_ db: Database, quotedLocalId: Int64) throws {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: """
                SELECT serverId, senderId, type, coalesce(confirmedBody, body), confirmedDeletedAt FROM messages WHERE localId = ?
                """),
            arguments: [quotedLocalId])
        else { return }
        let serverId: String? = row[0]
        let preview = ReplyPreview(serverId: serverId ?? "", senderId: row[1], type: row[2], body: row[3], deleted: (row[4] as Int64?) != nil)
        try db.cachedStatement(sql: "UPDATE messages SET replyPreview = ? WHERE replyToLocalId = ? OR (? IS NOT NULL AND replyTo = ?)")
            .execute(arguments: [Self.json(preview), quotedLocalId, serverId, serverId])
    }

    /// A thread's replies on this device, oldest first and newest last (unsent ones last): the newest `limit`, or
    /// with `beforeSeq` the stored ones just before it.
    func threadReplies(rootLocalId: Int64, beforeSeq: Int64?, limit: Int) throws -> (messages: [PigeonMessage], hasMore: Bool) {
        try pool.read { db in
            let serverId = try String.fetchOne(db.cachedStatement(sql: "SELECT serverId FROM messages WHERE localId = ?"), arguments: [rootLocalId])
            let inThread = "(threadRootLocalId = ? OR (? IS NOT NULL AND threadRoot = ?)) AND \(Self.listed)"
            var page: [PigeonMessage] = []
            var remaining = limit
            if beforeSeq == nil {
                let unsent = try Row.fetchAll(
                    db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE seq IS NULL AND \(inThread) ORDER BY localId DESC LIMIT ?"),
                    arguments: [rootLocalId, serverId, serverId, limit + 1]
                ).map(self.message(from:))
                if unsent.count > limit { return (Array(unsent.prefix(limit).reversed()), true) }
                page = unsent.reversed()
                remaining -= unsent.count
            }
            let stored = try Row.fetchAll(
                db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE seq IS NOT NULL AND seq < ? AND \(inThread) ORDER BY seq DESC LIMIT ?"),
                arguments: [beforeSeq ?? Int64.max, rootLocalId, serverId, serverId, remaining + 1]
            ).map(self.message(from:))
            return (stored.prefix(remaining).reversed() + page, stored.count > remaining)
        }
    }

    /// Fills in, for a message about to go out, the serverIds of the message it quotes and of its thread's root when
    /// they were sent from this device after it was written (the quote's preview too). `nil` when one of them never
    /// reached the server (it failed): the message cannot go.
    func resolveReferences(_ db: Database, localId: Int64) throws -> (replyTo: String?, threadRoot: String?)? {
        guard let row = try Row.fetchOne(
            db.cachedStatement(sql: "SELECT replyTo, replyToLocalId, threadRoot, threadRootLocalId, replyPreview FROM messages WHERE localId = ?"),
            arguments: [localId])
        else { return (nil, nil) }
        func serverId(of localId: Int64?) throws -> String? {
            guard let localId else { return nil }
            return try String.fetchOne(db.cachedStatement(sql: "SELECT serverId FROM messages WHERE localId = ?"), arguments: [localId])
        }
        var replyTo: String? = row[0]
        var threadRoot: String? = row[2]
        if replyTo == nil, let quoted = row[1] as Int64? {
            guard let found = try serverId(of: quoted) else { return nil }
            replyTo = found
            var preview = Self.decodeJSON(ReplyPreview.self, row[4])
            preview?.serverId = found
            try db.cachedStatement(sql: "UPDATE messages SET replyTo = ?, replyPreview = coalesce(?, replyPreview) WHERE localId = ?")
                .execute(arguments: [found, Self.jsonColumn(preview), localId])
        }
        if threadRoot == nil, let root = row[3] as Int64? {
            guard let found = try serverId(of: root) else { return nil }
            threadRoot = found
            try db.cachedStatement(sql: "UPDATE messages SET threadRoot = ? WHERE localId = ?").execute(arguments: [found, localId])
        }
        return (replyTo, threadRoot)
    }
}

extension LocalStore {
    /// The local id of the message with this serverId, when it is on this device.
    func localId(serverId: String) throws -> Int64? {
        try pool.read { db in try Int64.fetchOne(db.cachedStatement(sql: "SELECT localId FROM messages WHERE serverId = ?"), arguments: [serverId]) }
    }

    /// This device's copies of the messages with these serverIds, in the order given (those not here left out).
    func messages(serverIds: [String]) async throws -> [PigeonMessage] {
        try await pool.read { db in
            try serverIds.compactMap { serverId in
                try Row.fetchOne(db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE serverId = ?"), arguments: [serverId])
                    .map(self.message(from:))
            }
        }
    }
}
