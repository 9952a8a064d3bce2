import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Conversations: creation, listings, one conversation as a member sees it, the members cache.
extension SQLiteMessageStore {
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
    static func addCallerView(_ db: Database, _ conversation: inout Conversation, userId: String) throws {
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
    static func conversation(_ row: Row) -> Conversation {
        Conversation(
            id: row[0], kind: ConversationKind(rawValue: row[1]) ?? .group, name: row[2], createdAt: row[3], lastSeq: row[4],
            updatedAt: row[5], members: [])
    }

    static func conversationMembers(_ db: Database, _ conversationId: String) throws -> [ConversationMember] {
        try Row.fetchAll(
            db.cachedStatement(
                sql: "SELECT user_id, role, joined_seq, delivered_seq, read_seq, membership FROM members WHERE conversation_id = ? ORDER BY user_id"),
            arguments: [conversationId]
        ).map(Self.member)
    }

    /// A member from a row of (user_id, role, joined_seq, delivered_seq, read_seq, membership).
    static func member(_ row: Row) -> ConversationMember {
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
}
