import GRDB
import PigeonDomain
import PigeonProtocol

/// Reactions, replies and threads (API.md 1.2) on the embedded store.
///
/// A reaction is a row of `reactions` per (message, key, user); a message's aggregate is computed on every read
/// (one range query per page), so it is never stale and costs nothing to keep. A thread root keeps its summary in its
/// own row, updated in the transaction that stores each reply; a reply's quote is read from its target at read time,
/// so an edit or a delete of the target shows in every later read.
extension SQLiteMessageStore {
    // MARK: Reading

    /// A root's summary from its columns; `nil` without replies.
    static func threadSummary(count: Int, lastAt: Int64?, senders: String?) -> ThreadSummary? {
        guard count > 0, let lastAt else { return nil }
        return ThreadSummary(replyCount: count, lastReplyAt: lastAt, lastReplySenders: ReplyRules.senders(senders))
    }

    /// Adds to each message its reactions as `reader` sees them and its reply preview: one query per conversation for
    /// the reactions of the seqs the messages span, one for the quoted messages. An edited message (and a quote of
    /// one) reads as `reader` was last shown it when an edit of it was hidden from `reader` (``view(_:conversationId:seq:userId:)``).
    static func decorate(_ db: Database, _ messages: inout [Message], reader: String?) throws {
        guard !messages.isEmpty else { return }
        if let reader { try addWithheld(db, &messages, sender: reader) }
        if let reader {
            for index in messages.indices where messages[index].editedAt != nil {
                if let view = try view(db, conversationId: messages[index].conversationId, seq: messages[index].seq, userId: reader) {
                    messages[index].body = view.body
                    messages[index].editedAt = view.editedAt
                }
            }
        }
        let byConversation = Dictionary(grouping: messages.indices, by: { messages[$0].conversationId })
        for (conversationId, indices) in byConversation {
            let seqs = indices.map { messages[$0].seq }
            var rows: [Int64: [ReactionRow]] = [:]
            let cursor = try Row.fetchCursor(
                db.cachedStatement(sql: "SELECT seq, key, user_id, at FROM reactions WHERE conversation_id = ? AND seq BETWEEN ? AND ?"),
                arguments: [conversationId, seqs.min()!, seqs.max()!])
            while let row = try cursor.next() {
                rows[row[0], default: []].append(ReactionRow(key: row[1], userId: row[2], at: row[3]))
            }
            for index in indices {
                if let held = rows[messages[index].seq] { messages[index].reactions = ReactionRules.aggregate(held, reader: reader) }
            }
        }
        let quoted = Set(messages.compactMap(\.replyTo))
        guard !quoted.isEmpty else { return }
        let previews = try previews(db, of: Array(quoted))
        var joinedSeqs: [String: Int64] = [:]
        for index in messages.indices {
            guard let replyTo = messages[index].replyTo, let found = previews[replyTo], found.conversationId == messages[index].conversationId
            else { continue }
            messages[index].replyPreview = found.preview
            guard let reader else { continue }
            let conversationId = found.conversationId
            if joinedSeqs[conversationId] == nil {
                joinedSeqs[conversationId] = try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT joined_seq FROM members WHERE conversation_id = ? AND user_id = ?"),
                    arguments: [conversationId, reader]) ?? Int64.max
            }
            let hidden = try isHidden(db, conversationId: conversationId, seq: found.seq, from: reader)
            if found.seq < joinedSeqs[conversationId]! || hidden {
                messages[index].replyPreview = found.preview.unavailableForm
            } else if found.edited, let view = try view(db, conversationId: conversationId, seq: found.seq, userId: reader) {
                messages[index].replyPreview = QuoteViews(bodies: [reader: view.body]).preview(of: found.preview, for: reader)
            }
        }
    }

    /// What `userId` is shown of the edited message at `seq` when an edit of it was hidden from it: the text and edit
    /// time it was last shown; nil when it is shown the message as stored.
    static func view(_ db: Database, conversationId: String, seq: Int64, userId: String) throws -> (body: String, editedAt: Int64?)? {
        try Row.fetchOne(
            db.cachedStatement(sql: "SELECT at_rest_open(body), edited_at FROM message_views WHERE conversation_id = ? AND seq = ? AND user_id = ?"),
            arguments: [conversationId, seq, userId]
        ).map { ($0[0], $0[1]) }
    }

    /// Before an edit or a delete of the message `targetId` is applied: the members the edit is hidden from
    /// (`hiddenFrom`, empty for a delete) keep the version they were shown (unless they keep an older one already);
    /// every other member's kept version goes (the edit reaches them; a delete erases every version).
    static func keepViews(_ db: Database, conversationId: String, targetId: String, hiddenFrom: [String]) throws {
        guard let seq = try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM messages WHERE server_id = ?"), arguments: [targetId]) else { return }
        for userId in hiddenFrom {
            try db.cachedStatement(
                sql: """
                    INSERT OR IGNORE INTO message_views(conversation_id, seq, user_id, body, edited_at)
                    SELECT conversation_id, seq, ?, body, edited_at FROM messages WHERE server_id = ?
                    """
            ).execute(arguments: [userId, targetId])
        }
        let keeping = databaseQuestionMarks(count: hiddenFrom.count)
        try db.execute(
            sql: "DELETE FROM message_views WHERE conversation_id = ? AND seq = ?" + (hiddenFrom.isEmpty ? "" : " AND user_id NOT IN (\(keeping))"),
            arguments: StatementArguments([conversationId, seq] as [any DatabaseValueConvertible] + hiddenFrom))
    }

    /// Names on each of `sender`'s own messages the members it is hidden from (`withheldFrom`): one range read per
    /// conversation.
    static func addWithheld(_ db: Database, _ messages: inout [Message], sender: String) throws {
        let own = messages.indices.filter { messages[$0].senderId == sender }
        guard !own.isEmpty else { return }
        for (conversationId, indices) in Dictionary(grouping: own, by: { messages[$0].conversationId }) {
            let seqs = indices.map { messages[$0].seq }
            var hidden: [Int64: [String]] = [:]
            for row in try Row.fetchAll(
                db.cachedStatement(
                    sql: "SELECT seq, user_id FROM hidden_messages WHERE conversation_id = ? AND seq BETWEEN ? AND ? AND sender_id = ? ORDER BY seq, user_id"),
                arguments: [conversationId, seqs.min()!, seqs.max()!, sender])
            {
                hidden[row[0], default: []].append(row[1])
            }
            guard !hidden.isEmpty else { continue }
            for index in indices { messages[index].withheldFrom = hidden[messages[index].seq] }
        }
    }

    /// Whether the message at `seq` is hidden from `userId` by a block.
    static func isHidden(_ db: Database, conversationId: String, seq: Int64, from userId: String) throws -> Bool {
        try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT 1 FROM hidden_messages WHERE conversation_id = ? AND seq = ? AND user_id = ?"),
            arguments: [conversationId, seq, userId]) ?? false
    }

    /// The quotes of the messages `serverIds`, by serverId.
    private static func previews(_ db: Database, of serverIds: [String]) throws -> [String: QuotedMessage] {
        var result: [String: QuotedMessage] = [:]
        let placeholders = databaseQuestionMarks(count: serverIds.count)
        for row in try Row.fetchAll(
            db,
            sql: """
                SELECT server_id, conversation_id, sender_id, type, at_rest_open(body), deleted_at IS NOT NULL, seq, edited_at IS NOT NULL
                FROM messages WHERE server_id IN (\(placeholders))
                """,
            arguments: StatementArguments(serverIds))
        {
            result[row[0]] = QuotedMessage(
                conversationId: row[1], seq: row[6], edited: row[7],
                preview: ReplyPreview(serverId: row[0], senderId: row[2], type: row[3], body: row[4], deleted: row[5]))
        }
        return result
    }

    /// A message a reply quotes, and its preview as stored.
    struct QuotedMessage {
        var conversationId: String
        var seq: Int64
        var edited: Bool
        var preview: ReplyPreview
    }

    /// Who is shown the message a new reply quotes otherwise than as stored (``QuoteViews``): the members who joined
    /// after it and those it is hidden from may not read it; those an edit of it was hidden from read their version.
    static func quoteViews(_ db: Database, _ quoted: QuotedMessage) throws -> QuoteViews {
        var views = QuoteViews()
        views.blind = Set(
            try String.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT user_id FROM members WHERE conversation_id = ? AND joined_seq > ?
                        UNION SELECT user_id FROM hidden_messages WHERE conversation_id = ? AND seq = ?
                        """),
                arguments: [quoted.conversationId, quoted.seq, quoted.conversationId, quoted.seq]))
        guard quoted.edited else { return views }
        for row in try Row.fetchAll(
            db.cachedStatement(sql: "SELECT user_id, at_rest_open(body) FROM message_views WHERE conversation_id = ? AND seq = ?"),
            arguments: [quoted.conversationId, quoted.seq])
        {
            views.bodies[row[0]] = row[1]
        }
        return views
    }

    public func threadMessages(
        conversationId: String, root: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?
    ) async throws -> ThreadPage? {
        let hiding = mayHide ? reader : nil
        return try await pool.read { db in
            guard
                let row = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT \(Self.messageColumns) FROM messages WHERE server_id = ? AND conversation_id = ?"),
                    arguments: [root, conversationId])
            else { return nil }
            var roots = [Self.message(row, from: 0)]
            guard roots[0].seq >= visibleFrom else { return nil }
            if let hiding, try Self.hiddenFrom(db, conversationId: conversationId, seq: roots[0].seq).contains(hiding) { return nil }
            try Self.decorate(db, &roots, reader: reader)
            let page = try Self.page(
                db, conversationId: conversationId, thread: root, after: after, before: before, limit: limit, visibleFrom: visibleFrom, reader: reader,
                hidingFrom: hiding)
            return ThreadPage(root: roots[0], messages: page.messages, hasMore: page.hasMore)
        }
    }

    // MARK: Writing replies

    /// Checks a new message's `replyTo` and `threadRoot` once more in the transaction that stores it (accept checked
    /// them; a target that vanished is a permanent failure) and answers the quote its `message.new` carries.
    static func checkRelations(_ db: Database, _ message: BufferedMessage) throws -> QuotedMessage? {
        var preview: QuotedMessage?
        if let replyTo = message.replyTo {
            guard let quoted = try previews(db, of: [replyTo])[replyTo], quoted.conversationId == message.conversationId else {
                throw PigeonError(.notFound, "replyTo \(replyTo) is not a message of this conversation")
            }
            preview = quoted
        }
        if let root = message.threadRoot {
            guard let target = try target(db, conversationId: message.conversationId, serverId: root) else {
                throw PigeonError(.notFound, "threadRoot \(root) is not a message of this conversation")
            }
            if target.threadRoot != nil { throw PigeonError.invalid("threadRoot \(root) is itself in a thread") }
        }
        return preview
    }

    /// A reply by `sender` stored at `at` joins `root`'s thread: its summary counts it.
    static func addReply(_ db: Database, conversationId: String, root: String, by sender: String, at: Int64) throws {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT thread_count, thread_last_at, thread_senders FROM messages WHERE server_id = ? AND conversation_id = ?"),
                arguments: [root, conversationId])
        else { return }
        let current = threadSummary(count: row[0], lastAt: row[1], senders: row[2]) ?? ThreadSummary(replyCount: 0, lastReplyAt: 0, lastReplySenders: [])
        try writeSummary(db, root: root, current.adding(replyBy: sender, at: at))
    }

    private static func writeSummary(_ db: Database, root: String, _ summary: ThreadSummary?) throws {
        try db.cachedStatement(sql: "UPDATE messages SET thread_count = ?, thread_last_at = ?, thread_senders = ? WHERE server_id = ?")
            .execute(arguments: [
                summary?.replyCount ?? 0, summary?.lastReplyAt, summary.map { ReplyRules.sendersText($0.lastReplySenders) }, root,
            ])
    }

    /// What a delete changes besides the text: the message's reactions are gone, so are its attachments (their
    /// metadata, and its links to the uploads: no member reads them through it any more, and the sweep removes an
    /// upload no message carries then), and when it was a thread reply its root's summary is counted again from the
    /// replies left (a root keeps its thread).
    static func forgetDeleted(_ db: Database, conversationId: String, serverId: String) throws {
        guard let target = try target(db, conversationId: conversationId, serverId: serverId) else { return }
        try db.cachedStatement(sql: "DELETE FROM reactions WHERE conversation_id = ? AND seq = ?").execute(arguments: [conversationId, target.seq])
        try db.cachedStatement(sql: "DELETE FROM message_attachments WHERE conversation_id = ? AND seq = ?")
            .execute(arguments: [conversationId, target.seq])
        try db.cachedStatement(sql: "UPDATE messages SET attachments = NULL WHERE conversation_id = ? AND seq = ? AND attachments IS NOT NULL")
            .execute(arguments: [conversationId, target.seq])
        guard let root = target.threadRoot else { return }
        let count = try Int.fetchOne(
            db.cachedStatement(sql: "SELECT count(*) FROM messages WHERE conversation_id = ? AND thread_root = ? AND deleted_at IS NULL"),
            arguments: [conversationId, root]) ?? 0
        // The newest reply's time, and the senders of the newest replies, each once, newest first.
        let lastAt = try Int64.fetchOne(
            db.cachedStatement(
                sql: "SELECT stored_at FROM messages WHERE conversation_id = ? AND thread_root = ? AND deleted_at IS NULL ORDER BY seq DESC LIMIT 1"),
            arguments: [conversationId, root])
        let senders = try String.fetchAll(
            db.cachedStatement(
                sql: """
                    SELECT sender_id FROM messages WHERE conversation_id = ? AND thread_root = ? AND deleted_at IS NULL
                    GROUP BY sender_id ORDER BY MAX(seq) DESC LIMIT ?
                    """),
            arguments: [conversationId, root, ThreadSummary.senderLimit])
        let newest = lastAt.map { at in senders.map { (senderId: $0, storedAt: at) } } ?? []
        try writeSummary(db, root: root, ThreadSummary.of(newestFirst: newest, count: count))
    }

    // MARK: Reactions

    private struct ReactionWrite: Sendable {
        var reactions: [Reaction]
        var events: [StoredEvent]
    }

    public func react(conversationId: String, serverId: String, userId: String, key: String, action: ReactionAction, at now: Int64) async throws
        -> [Reaction]
    {
        try await write(
            { [self] db -> ReactionWrite in
                guard let members = try membersInTransaction(db, conversationId), members.contains(userId),
                    let joinedSeq = try Int64.fetchOne(
                        db.cachedStatement(sql: "SELECT joined_seq FROM members WHERE conversation_id = ? AND user_id = ?"),
                        arguments: [conversationId, userId])
                else { throw PigeonError.conversationNotFound }
                let target = try Self.target(db, conversationId: conversationId, serverId: serverId)
                if let refusal = ReactionRules.refusal(target: target, joinedSeq: joinedSeq) { throw refusal }
                let seq = target!.seq
                // A message hidden from the reactor is not there for it; the reaction of a user a member blocks, or to
                // a message hidden from a member, does not reach that member.
                var withheld = Set<String>()
                if mayHide {
                    let hiddenFrom = try Self.hiddenFrom(db, conversationId: conversationId, seq: seq)
                    if hiddenFrom.contains(userId) { throw PigeonError(.notFound, "message not found") }
                    withheld = hiddenFrom.union(try Self.blockers(db, of: userId, among: members))
                }
                // An invited member gets only its invitation until it accepts: no reactions.
                if consent.withLockedValue({ $0.invitesExist }) { withheld.formUnion(try Self.invited(db, conversationId)) }
                var rows = try Self.reactionRows(db, conversationId: conversationId, seq: seq)
                let held = rows.firstIndex { $0.key == key && $0.userId == userId }
                switch (action, held) {
                case (.add, nil):
                    if let refusal = ReactionRules.limitRefusal(adding: key, by: userId, to: rows) { throw refusal }
                    try db.cachedStatement(sql: "INSERT INTO reactions(conversation_id, seq, key, user_id, at) VALUES (?, ?, ?, ?, ?)")
                        .execute(arguments: [conversationId, seq, key, userId, now])
                    rows.append(ReactionRow(key: key, userId: userId, at: now))
                case (.remove, let index?):
                    try db.cachedStatement(sql: "DELETE FROM reactions WHERE conversation_id = ? AND seq = ? AND key = ? AND user_id = ?")
                        .execute(arguments: [conversationId, seq, key, userId])
                    rows.remove(at: index)
                default:
                    // A second add, or removing what is not there: nothing changes, nothing is emitted.
                    return ReactionWrite(reactions: ReactionRules.aggregate(rows, reader: userId), events: [])
                }
                try Self.recordWebhook(
                    db, webhooks.reaction(conversationId: conversationId, serverId: serverId, key: key, userId: userId, action: action, at: now))
                let payloads = EventPayload()
                var events: [StoredEvent] = []
                for view in ReactionRules.views(of: rows, members: members.filter { !withheld.contains($0) }) {
                    let payload = payloads.reaction(
                        ReactionEvent(
                            conversationId: conversationId, serverId: serverId, key: key, userId: userId, action: action, reactions: view.reactions,
                            at: now))
                    let payloadId = try Self.insertSharedPayload(db, payload)
                    for member in view.members {
                        events.append(
                            try Self.insertEvent(
                                db, type: "reaction", userId: member, deviceId: nil, excludedDeviceId: nil, payload: payload, at: now,
                                payloadId: payloadId))
                    }
                }
                return ReactionWrite(reactions: ReactionRules.aggregate(rows, reader: userId), events: events)
            },
            afterCommit: { [fanout] write in fanout.publish(write.events) }
        ).reactions
    }

    /// The members a message is hidden from.
    static func hiddenFrom(_ db: Database, conversationId: String, seq: Int64) throws -> Set<String> {
        Set(try String.fetchAll(
            db.cachedStatement(sql: "SELECT user_id FROM hidden_messages WHERE conversation_id = ? AND seq = ?"), arguments: [conversationId, seq]))
    }

    private static func reactionRows(_ db: Database, conversationId: String, seq: Int64) throws -> [ReactionRow] {
        try Row.fetchAll(
            db.cachedStatement(sql: "SELECT key, user_id, at FROM reactions WHERE conversation_id = ? AND seq = ?"), arguments: [conversationId, seq]
        ).map { ReactionRow(key: $0[0], userId: $0[1], at: $0[2]) }
    }

    public func reactionUsers(conversationId: String, serverId: String, reader: String, key: String?, after: String?, limit: Int) async throws
        -> ReactionUsersPage
    {
        try await pool.read { db in
            guard
                let joinedSeq = try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT joined_seq FROM members WHERE conversation_id = ? AND user_id = ?"),
                    arguments: [conversationId, reader])
            else { throw PigeonError.conversationNotFound }
            guard let target = try Self.target(db, conversationId: conversationId, serverId: serverId), target.seq >= joinedSeq,
                try !Self.hiddenFrom(db, conversationId: conversationId, seq: target.seq).contains(reader)
            else {
                throw PigeonError(.notFound, "message not found")
            }
            let byKey = key == nil ? "" : " AND key = ?"
            let keyArgument: [String] = key.map { [$0] } ?? []
            let users = try String.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT DISTINCT user_id FROM reactions WHERE conversation_id = ? AND seq = ?\(byKey) AND user_id > ?
                        ORDER BY user_id LIMIT ?
                        """),
                arguments: StatementArguments([conversationId, target.seq] + keyArgument + [after ?? "", limit + 1]))
            let hasMore = users.count > limit
            let page = Array(users.prefix(limit))
            guard let last = page.last else { return ReactionUsersPage(users: [], hasMore: false) }
            let entries = try Row.fetchAll(
                db.cachedStatement(
                    sql: """
                        SELECT user_id, key, at FROM reactions WHERE conversation_id = ? AND seq = ?\(byKey) AND user_id > ? AND user_id <= ?
                        ORDER BY user_id, key
                        """),
                arguments: StatementArguments([conversationId, target.seq] + keyArgument + [after ?? "", last])
            ).map { ReactionUser(userId: $0[0], key: $0[1], at: $0[2]) }
            return ReactionUsersPage(users: entries, hasMore: hasMore)
        }
    }
}
