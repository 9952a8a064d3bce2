/// `POST /v1/conversations/{id}/messages` request body.
public struct SendMessageRequest: Codable, Sendable, Equatable {
    /// The sender's idempotency key: a UUID chosen by the client, unique per device.
    public var clientMessageId: String
    /// App-defined kind, 1–32 characters of `[a-z0-9._-]` (`text`, `reaction`, …).
    public var type: String
    /// Opaque to the server (ciphertext, JSON, plain text).
    public var body: String
    /// The sender's clock when the user pressed send, milliseconds since the epoch.
    public var clientTimestamp: Int64
    /// The serverId of an earlier message of the conversation this one quotes (API.md 1.2).
    public var replyTo: String?
    /// The serverId of the message whose thread this one is in (API.md 1.2); a thread root is never in a thread.
    public var threadRoot: String?
    /// Uploads of the sender's user that the message carries, at most ``AttachmentLimits/perMessage`` (API.md 1.2).
    public var attachments: [AttachmentReference]?

    public init(
        clientMessageId: String, type: String, body: String, clientTimestamp: Int64, replyTo: String? = nil, threadRoot: String? = nil,
        attachments: [AttachmentReference]? = nil
    ) {
        self.attachments = attachments
        self.clientMessageId = clientMessageId
        self.type = type
        self.body = body
        self.clientTimestamp = clientTimestamp
        self.replyTo = replyTo
        self.threadRoot = threadRoot
    }
}

/// Where a message is on the server.
public enum ServerMessageStatus: String, Codable, Sendable, Equatable {
    /// Durable in the ingest buffer, not yet ordered.
    case queued
    /// Persisted with its seq.
    case stored
    /// Dead-lettered: processing gave up on it.
    case failed
}

/// The accept answer (`202`, or `200` for a resend): the sender's ✓.
public struct SendMessageResponse: Codable, Sendable, Equatable {
    public var serverId: String
    public var clientMessageId: String
    public var status: ServerMessageStatus
    public var acceptedAt: Int64
    /// Present once the message is stored (only on a resend's `200`).
    public var seq: Int64?
    /// `true` when the app's before-send hook replaced the body (API.md 1.2): the message is stored with the hook's
    /// body, not the one sent. Absent otherwise (and on a resend's `200`).
    public var bodyReplaced: Bool?
    /// With ``bodyReplaced``: the body as stored (for an edit, the new text as stored), so that the sender's device
    /// shows what everyone else reads.
    public var body: String?

    public init(
        serverId: String, clientMessageId: String, status: ServerMessageStatus, acceptedAt: Int64, seq: Int64? = nil, bodyReplaced: Bool? = nil,
        body: String? = nil
    ) {
        self.serverId = serverId
        self.clientMessageId = clientMessageId
        self.status = status
        self.acceptedAt = acceptedAt
        self.seq = seq
        self.bodyReplaced = bodyReplaced
        self.body = body
    }
}

/// A stored message.
public struct Message: Codable, Sendable, Equatable {
    public var serverId: String
    public var clientMessageId: String
    public var conversationId: String
    public var seq: Int64
    public var senderId: String
    public var senderDeviceId: String
    public var type: String
    public var body: String
    public var clientTimestamp: Int64
    public var acceptedAt: Int64
    public var storedAt: Int64
    /// When its sender last edited it (a later `pigeon.edit`); absent when never edited. ``body`` is the latest text.
    public var editedAt: Int64?
    /// When its sender deleted it (a later `pigeon.delete`); ``body`` is then `""`: the text is erased from the store.
    public var deletedAt: Int64?
    /// Its reactions as the reader sees them, keys in order of first use (API.md 1.2); empty on an older server.
    public var reactions: [Reaction]
    /// The serverId of the message it quotes, or `nil`.
    public var replyTo: String?
    /// The quoted message as of the read, so that a client draws the quote without fetching it; `nil` without ``replyTo``.
    public var replyPreview: ReplyPreview?
    /// The serverId of the thread it is in, or `nil`.
    public var threadRoot: String?
    /// On a message with replies in its thread: the thread's summary as of the read; else `nil`.
    public var thread: ThreadSummary?
    /// The attachments it carries, in the sender's order (API.md 1.2); empty when none or on an older server.
    public var attachments: [Attachment]
    /// On the sender's own copies only: the members it is withheld from for good (they block the sender), so that
    /// its ticks never count them as delivered or read; `nil` when none (and on everyone else's copies).
    public var withheldFrom: [String]?

    public init(
        serverId: String, clientMessageId: String, conversationId: String, seq: Int64, senderId: String,
        senderDeviceId: String, type: String, body: String, clientTimestamp: Int64, acceptedAt: Int64, storedAt: Int64,
        editedAt: Int64? = nil, deletedAt: Int64? = nil, reactions: [Reaction] = [], replyTo: String? = nil,
        replyPreview: ReplyPreview? = nil, threadRoot: String? = nil, thread: ThreadSummary? = nil, attachments: [Attachment] = [],
        withheldFrom: [String]? = nil
    ) {
        self.attachments = attachments
        self.withheldFrom = withheldFrom
        self.editedAt = editedAt
        self.deletedAt = deletedAt
        self.serverId = serverId
        self.clientMessageId = clientMessageId
        self.conversationId = conversationId
        self.seq = seq
        self.senderId = senderId
        self.senderDeviceId = senderDeviceId
        self.type = type
        self.body = body
        self.clientTimestamp = clientTimestamp
        self.acceptedAt = acceptedAt
        self.storedAt = storedAt
        self.reactions = reactions
        self.replyTo = replyTo
        self.replyPreview = replyPreview
        self.threadRoot = threadRoot
        self.thread = thread
    }

    private enum CodingKeys: String, CodingKey {
        case serverId, clientMessageId, conversationId, seq, senderId, senderDeviceId, type, body, clientTimestamp,
            acceptedAt, storedAt, editedAt, deletedAt, reactions, replyTo, replyPreview, threadRoot, thread, attachments, withheldFrom
    }

    /// The fields of API.md 1.2 may be absent (an older server): no reactions, no reply, no thread, no attachments.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        serverId = try c.decode(String.self, forKey: .serverId)
        clientMessageId = try c.decode(String.self, forKey: .clientMessageId)
        conversationId = try c.decode(String.self, forKey: .conversationId)
        seq = try c.decode(Int64.self, forKey: .seq)
        senderId = try c.decode(String.self, forKey: .senderId)
        senderDeviceId = try c.decode(String.self, forKey: .senderDeviceId)
        type = try c.decode(String.self, forKey: .type)
        body = try c.decode(String.self, forKey: .body)
        clientTimestamp = try c.decode(Int64.self, forKey: .clientTimestamp)
        acceptedAt = try c.decode(Int64.self, forKey: .acceptedAt)
        storedAt = try c.decode(Int64.self, forKey: .storedAt)
        editedAt = try c.decodeIfPresent(Int64.self, forKey: .editedAt)
        deletedAt = try c.decodeIfPresent(Int64.self, forKey: .deletedAt)
        reactions = try c.decodeIfPresent([Reaction].self, forKey: .reactions) ?? []
        replyTo = try c.decodeIfPresent(String.self, forKey: .replyTo)
        replyPreview = try c.decodeIfPresent(ReplyPreview.self, forKey: .replyPreview)
        threadRoot = try c.decodeIfPresent(String.self, forKey: .threadRoot)
        thread = try c.decodeIfPresent(ThreadSummary.self, forKey: .thread)
        attachments = try c.decodeIfPresent([Attachment].self, forKey: .attachments) ?? []
        withheldFrom = try c.decodeIfPresent([String].self, forKey: .withheldFrom)
    }

    /// `editedAt` and `deletedAt` are left out when absent (as before API.md 1.2); the fields of 1.2 are always
    /// present, `null` when empty.
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(serverId, forKey: .serverId)
        try c.encode(clientMessageId, forKey: .clientMessageId)
        try c.encode(conversationId, forKey: .conversationId)
        try c.encode(seq, forKey: .seq)
        try c.encode(senderId, forKey: .senderId)
        try c.encode(senderDeviceId, forKey: .senderDeviceId)
        try c.encode(type, forKey: .type)
        try c.encode(body, forKey: .body)
        try c.encode(clientTimestamp, forKey: .clientTimestamp)
        try c.encode(acceptedAt, forKey: .acceptedAt)
        try c.encode(storedAt, forKey: .storedAt)
        try c.encodeIfPresent(editedAt, forKey: .editedAt)
        try c.encodeIfPresent(deletedAt, forKey: .deletedAt)
        try c.encode(reactions, forKey: .reactions)
        try c.encode(NullEncoded(wrappedValue: replyTo), forKey: .replyTo)
        try c.encode(NullEncoded(wrappedValue: replyPreview), forKey: .replyPreview)
        try c.encode(NullEncoded(wrappedValue: threadRoot), forKey: .threadRoot)
        try c.encode(NullEncoded(wrappedValue: thread), forKey: .thread)
        try c.encode(attachments, forKey: .attachments)
        if let withheldFrom, !withheldFrom.isEmpty { try c.encode(withheldFrom, forKey: .withheldFrom) }
    }
}

/// `GET /v1/conversations/{id}/messages` answer: ascending by seq.
public struct MessagePage: Codable, Sendable, Equatable {
    public var messages: [Message]
    /// More messages exist in the direction of the query (after the last for `after=`, before the first for `before=`).
    public var hasMore: Bool

    public init(messages: [Message], hasMore: Bool) {
        self.messages = messages
        self.hasMore = hasMore
    }
}

/// Which watermark a receipt moves.
public enum ReceiptKind: String, Codable, Sendable, Equatable, CaseIterable {
    case delivered
    case read
}

/// `POST /v1/conversations/{id}/receipts` request body.
public struct ReceiptRequest: Codable, Sendable, Equatable {
    public var kind: ReceiptKind
    public var upToSeq: Int64

    public init(kind: ReceiptKind, upToSeq: Int64) {
        self.kind = kind
        self.upToSeq = upToSeq
    }
}

/// The caller's watermarks after a receipt.
public struct ReceiptResponse: Codable, Sendable, Equatable {
    public var deliveredSeq: Int64
    public var readSeq: Int64

    public init(deliveredSeq: Int64, readSeq: Int64) {
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
    }
}

/// `POST /v1/conversations/{id}/typing` request body.
public struct TypingRequest: Codable, Sendable, Equatable {
    public var active: Bool

    public init(active: Bool) {
        self.active = active
    }
}
