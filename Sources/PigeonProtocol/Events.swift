/// `message.stored`: the sender's message is persisted and ordered.
public struct MessageStoredEvent: Codable, Sendable, Equatable {
    public var conversationId: String
    public var serverId: String
    public var clientMessageId: String
    public var seq: Int64
    public var storedAt: Int64
    /// Devices of other members connected when it was stored; 0 means it waits in their mailbox.
    public var recipientsOnline: Int
    /// The members it is withheld from for good (they block the sender): its ticks never count them. Absent: none.
    public var withheldFrom: [String]?

    public init(
        conversationId: String, serverId: String, clientMessageId: String, seq: Int64, storedAt: Int64, recipientsOnline: Int,
        withheldFrom: [String]? = nil
    ) {
        self.conversationId = conversationId
        self.serverId = serverId
        self.clientMessageId = clientMessageId
        self.seq = seq
        self.storedAt = storedAt
        self.recipientsOnline = recipientsOnline
        self.withheldFrom = withheldFrom
    }
}

/// `message.failed`: processing gave up on the sender's message (it is in the dead-letter store).
public struct MessageFailedEvent: Codable, Sendable, Equatable {
    public var conversationId: String
    public var serverId: String
    public var clientMessageId: String
    public var error: ErrorDetail

    public init(conversationId: String, serverId: String, clientMessageId: String, error: ErrorDetail) {
        self.conversationId = conversationId
        self.serverId = serverId
        self.clientMessageId = clientMessageId
        self.error = error
    }
}

/// `receipt`: a member's watermark moved up.
public struct ReceiptEvent: Codable, Sendable, Equatable {
    public var conversationId: String
    public var userId: String
    public var kind: ReceiptKind
    public var upToSeq: Int64
    public var at: Int64

    public init(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64, at: Int64) {
        self.conversationId = conversationId
        self.userId = userId
        self.kind = kind
        self.upToSeq = upToSeq
        self.at = at
    }
}

/// `typing`: ephemeral, never stored or replayed, carries no cursor.
public struct TypingEvent: Codable, Sendable, Equatable {
    public var conversationId: String
    public var userId: String
    public var active: Bool

    public init(conversationId: String, userId: String, active: Bool) {
        self.conversationId = conversationId
        self.userId = userId
        self.active = active
    }
}

/// One event of a device's stream (WebSocket, SSE or `/v1/sync`).
///
/// Every event but `typing` carries a `cursor`; a client that reconnects with the last cursor it processed
/// receives every later event exactly once, in order.
public enum ServerEvent: Sendable, Equatable {
    case messageNew(cursor: String, message: Message)
    case messageStored(cursor: String, MessageStoredEvent)
    case messageFailed(cursor: String, MessageFailedEvent)
    case receipt(cursor: String, ReceiptEvent)
    case conversationCreated(cursor: String, conversation: Conversation)
    /// A reaction added or removed (API.md 1.2).
    case reaction(cursor: String, ReactionEvent)
    case typing(TypingEvent)
    /// The cursor was unknown or expired: catch up every conversation through the history endpoint,
    /// then continue from this event's cursor.
    case reset(cursor: String)
    /// A type this version does not know; ignore it but keep its cursor.
    case unknown(type: String, cursor: String?)

    /// The event types this version of the protocol knows, by their wire names: what a machine-readable contract
    /// (the server's AsyncAPI document) enumerates.
    public enum Kind: String, Sendable, CaseIterable {
        case messageNew = "message.new"
        case messageStored = "message.stored"
        case messageFailed = "message.failed"
        case receipt
        case conversationCreated = "conversation.created"
        case reaction
        case typing
        case reset
    }

    /// The event's kind; `nil` for a type this version does not know.
    public var kind: Kind? {
        switch self {
        case .messageNew: .messageNew
        case .messageStored: .messageStored
        case .messageFailed: .messageFailed
        case .receipt: .receipt
        case .conversationCreated: .conversationCreated
        case .reaction: .reaction
        case .typing: .typing
        case .reset: .reset
        case .unknown: nil
        }
    }

    /// The wire name of the event's type.
    public var type: String {
        if case .unknown(let type, _) = self { return type }
        return kind?.rawValue ?? ""
    }

    /// The position to resume after this event; `nil` for ephemeral events.
    public var cursor: String? {
        switch self {
        case .messageNew(let c, _), .messageStored(let c, _), .messageFailed(let c, _), .receipt(let c, _),
            .conversationCreated(let c, _), .reaction(let c, _), .reset(let c):
            c
        case .typing: nil
        case .unknown(_, let c): c
        }
    }
}

extension ServerEvent: Codable {
    private enum Keys: String, CodingKey {
        case type, cursor, message, conversation
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        let type = try container.decode(String.self, forKey: .type)
        let cursor = try container.decodeIfPresent(String.self, forKey: .cursor)
        func requireCursor() throws -> String {
            guard let cursor else {
                throw DecodingError.keyNotFound(Keys.cursor, .init(codingPath: decoder.codingPath, debugDescription: "\(type) needs a cursor"))
            }
            return cursor
        }
        guard let kind = Kind(rawValue: type) else {
            self = .unknown(type: type, cursor: cursor)
            return
        }
        switch kind {
        case .messageNew: self = .messageNew(cursor: try requireCursor(), message: try container.decode(Message.self, forKey: .message))
        case .messageStored: self = .messageStored(cursor: try requireCursor(), try MessageStoredEvent(from: decoder))
        case .messageFailed: self = .messageFailed(cursor: try requireCursor(), try MessageFailedEvent(from: decoder))
        case .receipt: self = .receipt(cursor: try requireCursor(), try ReceiptEvent(from: decoder))
        case .conversationCreated:
            self = .conversationCreated(cursor: try requireCursor(), conversation: try container.decode(Conversation.self, forKey: .conversation))
        case .reaction: self = .reaction(cursor: try requireCursor(), try ReactionEvent(from: decoder))
        case .typing: self = .typing(try TypingEvent(from: decoder))
        case .reset: self = .reset(cursor: try requireCursor())
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(type, forKey: .type)
        try container.encodeIfPresent(cursor, forKey: .cursor)
        switch self {
        case .messageNew(_, let message): try container.encode(message, forKey: .message)
        case .messageStored(_, let event): try event.encode(to: encoder)
        case .messageFailed(_, let event): try event.encode(to: encoder)
        case .receipt(_, let event): try event.encode(to: encoder)
        case .conversationCreated(_, let conversation): try container.encode(conversation, forKey: .conversation)
        case .reaction(_, let event): try event.encode(to: encoder)
        case .typing(let event): try event.encode(to: encoder)
        case .reset, .unknown: break
        }
    }
}

/// `GET /v1/sync` answer: the stream's events, pulled.
public struct SyncResponse: Codable, Sendable, Equatable {
    public var events: [ServerEvent]
    /// Where to continue: pass it as `cursor` on the next call.
    public var cursor: String
    public var hasMore: Bool

    public init(events: [ServerEvent], cursor: String, hasMore: Bool) {
        self.events = events
        self.cursor = cursor
        self.hasMore = hasMore
    }
}
