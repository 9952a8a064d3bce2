/// The quote a reply carries of the message it answers, so that a client draws it without fetching the target
/// (API.md 1.2).
public struct ReplyPreview: Codable, Sendable, Hashable {
    public var serverId: String
    public var senderId: String
    public var type: String
    /// At most the first ``ReplyPreview/bodyLimit`` characters of the target's body; `""` once it was deleted.
    public var body: String
    public var deleted: Bool
    /// The reader may not read the quoted message (it is hidden from the reader by a block, or older than the
    /// reader's membership): `body` is then `""` and `deleted` false. Encoded only when true.
    public var unavailable: Bool

    /// How many characters (extended grapheme clusters) of the target's body a preview keeps.
    public static let bodyLimit = 100

    public init(serverId: String, senderId: String, type: String, body: String, deleted: Bool) {
        self.serverId = serverId
        self.senderId = senderId
        self.type = type
        self.body = deleted ? "" : String(body.prefix(Self.bodyLimit))
        self.deleted = deleted
        self.unavailable = false
    }

    /// This quote as a reader who may not read the quoted message gets it: who sent it and its type, not its text.
    public var unavailableForm: ReplyPreview {
        var preview = ReplyPreview(serverId: serverId, senderId: senderId, type: type, body: "", deleted: false)
        preview.unavailable = true
        return preview
    }

    private enum CodingKeys: String, CodingKey {
        case serverId, senderId, type, body, deleted, unavailable
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        serverId = try c.decode(String.self, forKey: .serverId)
        senderId = try c.decode(String.self, forKey: .senderId)
        type = try c.decode(String.self, forKey: .type)
        body = try c.decode(String.self, forKey: .body)
        deleted = try c.decode(Bool.self, forKey: .deleted)
        unavailable = try c.decodeIfPresent(Bool.self, forKey: .unavailable) ?? false
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(serverId, forKey: .serverId)
        try c.encode(senderId, forKey: .senderId)
        try c.encode(type, forKey: .type)
        try c.encode(body, forKey: .body)
        try c.encode(deleted, forKey: .deleted)
        if unavailable { try c.encode(true, forKey: .unavailable) }
    }
}

/// A thread root's summary: on a message that has replies in its thread, current as of the read.
public struct ThreadSummary: Codable, Sendable, Equatable {
    /// Replies in the thread that are not deleted.
    public var replyCount: Int
    /// When the newest of them was stored, milliseconds since the epoch.
    public var lastReplyAt: Int64
    /// The senders of the newest replies, newest first, each once, at most ``ThreadSummary/senderLimit``.
    public var lastReplySenders: [String]

    /// How many senders ``lastReplySenders`` names at most.
    public static let senderLimit = 3

    public init(replyCount: Int, lastReplyAt: Int64, lastReplySenders: [String]) {
        self.replyCount = replyCount
        self.lastReplyAt = lastReplyAt
        self.lastReplySenders = lastReplySenders
    }

    /// The summary after a new reply by `sender` stored at `at`.
    public func adding(replyBy sender: String, at: Int64) -> ThreadSummary {
        var senders = lastReplySenders.filter { $0 != sender }
        senders.insert(sender, at: 0)
        return ThreadSummary(replyCount: replyCount + 1, lastReplyAt: max(lastReplyAt, at), lastReplySenders: Array(senders.prefix(Self.senderLimit)))
    }

    /// The summary of a thread whose replies (not deleted) are these, newest first; `nil` when there is none.
    public static func of(newestFirst replies: [(senderId: String, storedAt: Int64)], count: Int) -> ThreadSummary? {
        guard count > 0, let newest = replies.first else { return nil }
        var senders: [String] = []
        for reply in replies where !senders.contains(reply.senderId) {
            senders.append(reply.senderId)
            if senders.count == senderLimit { break }
        }
        return ThreadSummary(replyCount: count, lastReplyAt: newest.storedAt, lastReplySenders: senders)
    }
}

/// `GET /v1/conversations/{id}/threads/{serverId}/messages` answer: the thread's root and a page of its replies,
/// ascending by seq.
public struct ThreadPage: Codable, Sendable, Equatable {
    public var root: Message
    public var messages: [Message]
    /// More replies exist in the direction of the query.
    public var hasMore: Bool

    public init(root: Message, messages: [Message], hasMore: Bool) {
        self.root = root
        self.messages = messages
        self.hasMore = hasMore
    }
}
