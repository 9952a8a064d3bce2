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

    public init(clientMessageId: String, type: String, body: String, clientTimestamp: Int64) {
        self.clientMessageId = clientMessageId
        self.type = type
        self.body = body
        self.clientTimestamp = clientTimestamp
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

    public init(serverId: String, clientMessageId: String, status: ServerMessageStatus, acceptedAt: Int64, seq: Int64? = nil) {
        self.serverId = serverId
        self.clientMessageId = clientMessageId
        self.status = status
        self.acceptedAt = acceptedAt
        self.seq = seq
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

    public init(
        serverId: String, clientMessageId: String, conversationId: String, seq: Int64, senderId: String,
        senderDeviceId: String, type: String, body: String, clientTimestamp: Int64, acceptedAt: Int64, storedAt: Int64,
        editedAt: Int64? = nil, deletedAt: Int64? = nil
    ) {
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
