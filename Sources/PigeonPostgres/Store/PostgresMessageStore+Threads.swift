import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Threads (API.md 1.2): a root's replies are the messages whose `thread_root` it is; its summary lives in its own row
/// (written by processing, `+Processing`).
extension PostgresMessageStore {
    // MARK: Threads

    public func threadMessages(
        conversationId: String, root: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?
    ) async throws -> ThreadPage? {
        var found: Message?
        for try await row in try await client.query(
            "SELECT \(unescaped: Self.messageColumns) FROM messages WHERE conversation_id = \(conversationId) AND server_id = \(root)",
            logger: logger
        ).decode(MessageTuple.self) {
            found = try Self.message(row, cipher: cipher)
        }
        guard let found, found.seq >= visibleFrom else { return nil }
        if let reader {
            for try await _ in try await client.query(
                "SELECT 1 FROM hidden_messages WHERE conversation_id = \(conversationId) AND seq = \(found.seq) AND user_id = \(reader)", logger: logger
            ) {
                return nil
            }
        }
        let (replies, hasMore) = try await page(
            conversationId: conversationId, threadRoot: root, after: after, before: before, limit: limit, visibleFrom: visibleFrom, hidingFrom: reader)
        var messages = [found] + replies
        try await decorate(&messages, reader: reader)
        return ThreadPage(root: messages[0], messages: Array(messages.dropFirst()), hasMore: hasMore)
    }
}
