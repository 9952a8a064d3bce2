import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// History: message pages as a reader sees them.
extension SQLiteMessageStore {
    static let messageColumns = """
        server_id, client_message_id, conversation_id, seq, sender_id, sender_device_id, type, at_rest_open(body), client_timestamp,
        accepted_at, stored_at, edited_at, deleted_at, reply_to, thread_root, thread_count, thread_last_at, thread_senders, attachments
        """

    static let joinedMessageColumns = """
        m.server_id, m.client_message_id, m.conversation_id, m.seq, m.sender_id, m.sender_device_id, m.type, at_rest_open(m.body),
        m.client_timestamp, m.accepted_at, m.stored_at, m.edited_at, m.deleted_at, m.reply_to, m.thread_root, m.thread_count,
        m.thread_last_at, m.thread_senders, m.attachments
        """

    static func message(_ row: Row) -> Message {
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
}
