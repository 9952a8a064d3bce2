import Foundation
import PigeonProtocol

/// Replies and threads (API.md 1.2).
///
/// A reply (``send(_:type:to:replyTo:threadRoot:attachments:)`` with `replyTo`) quotes an earlier message of the conversation:
/// it carries the quoted message's reference and a preview to draw (``PigeonMessage/replyPreview``). A thread reply
/// (with `threadRoot`) is an ordinary message of the conversation (it has its seq, its ticks, it counts as unread)
/// that also names the thread it is in (``PigeonMessage/threadRoot``). Conversation pages
/// (``messages(in:before:limit:)``) list thread replies with the rest; ``thread(of:before:limit:)`` lists one
/// thread's replies from the local database, and ``fetchThread(of:after:before:limit:)`` pages it from the server.
///
/// A root's ``PigeonMessage/thread`` summary (reply count, newest reply's time, newest senders) is kept current as
/// replies arrive and are deleted, and each read from the server (a history or thread page) corrects it; every change
/// is announced with ``PigeonEvent/threadUpdated(_:)``.
extension PigeonClient {
    /// A thread's replies on this device, oldest first and newest last: the newest `limit` (unsent ones last), or
    /// with `before` (a seq) the page just before it. Works offline.
    public func thread(of root: PigeonMessage, before: Int64? = nil, limit: Int = 50) throws -> MessagePageResult {
        guard limit > 0 else { throw PigeonClientError.invalid("limit must be positive") }
        let page = try store.threadReplies(rootLocalId: root.localId, beforeSeq: before, limit: limit)
        return MessagePageResult(messages: page.messages, hasMore: page.hasMore)
    }

    /// Reads a page of a thread from the server (`after` / `before`: seqs, as for history) and saves it: the replies
    /// and the root with their reactions and the root's summary as of the read. Returns this device's copies. Needs
    /// the network, and a root the server has (a root of this device that still waits throws
    /// ``PigeonClientError/Code-swift.struct/invalidArgument``); the server's `404` when this user cannot see it.
    public func fetchThread(of root: PigeonMessage, after: Int64? = nil, before: Int64? = nil, limit: Int = 50) async throws -> ThreadPageResult {
        guard (1...500).contains(limit) else { throw PigeonClientError.invalid("limit must be 1–500") }
        guard let serverId = root.serverId else { throw PigeonClientError.invalid("message \(root.localId) is not on the server yet") }
        let page = try await engine.transport.threadPage(
            conversationId: root.conversationId, rootServerId: serverId, after: after, before: before, limit: limit)
        try await engine.apply([.thread(page)])
        let local = try await store.messages(serverIds: [page.root.serverId] + page.messages.map(\.serverId))
        guard let first = local.first, first.serverId == page.root.serverId else {
            throw PigeonClientError(.localDatabase, "the thread of \(serverId) was not saved")
        }
        return ThreadPageResult(root: first, replies: Array(local.dropFirst()), hasMore: page.hasMore)
    }
}

/// A page of ``PigeonClient/fetchThread(of:after:before:limit:)``: this device's copies, as saved from the server.
public struct ThreadPageResult: Sendable, Equatable {
    /// The root, with its summary as of the read.
    public var root: PigeonMessage
    /// Replies, ascending seq.
    public var replies: [PigeonMessage]
    /// More replies exist in the direction asked.
    public var hasMore: Bool
}
