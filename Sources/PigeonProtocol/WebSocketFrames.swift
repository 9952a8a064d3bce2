/// A client → server WebSocket message (`{"op": ...}`).
public enum ClientOperation: Sendable, Equatable {
    case send(conversationId: String, SendMessageRequest)
    case receipt(conversationId: String, ReceiptRequest)
    case typing(conversationId: String, active: Bool)
    /// `{"op": "edit", "conversationId", "serverId", "clientMessageId", "body", "clientTimestamp"}`.
    case edit(conversationId: String, serverId: String, EditMessageRequest)
    /// `{"op": "delete", "conversationId", "serverId", "clientMessageId", "clientTimestamp"}`.
    case delete(conversationId: String, serverId: String, DeleteMessageRequest)
    /// `{"op": "react", "conversationId", "serverId", "key", "action", "clientMessageId"}` (API.md 1.2).
    case react(conversationId: String, ReactRequest)
}

extension ClientOperation {
    /// The operations this version of the protocol knows, by their wire names (`op`): what a machine-readable
    /// contract (the server's AsyncAPI document) enumerates.
    public enum Op: String, Sendable, CaseIterable {
        case send, receipt, typing, edit, delete, react
    }

    /// The operation's `op`.
    public var op: Op {
        switch self {
        case .send: .send
        case .receipt: .receipt
        case .typing: .typing
        case .edit: .edit
        case .delete: .delete
        case .react: .react
        }
    }
}

extension ClientOperation: Codable {
    private enum Keys: String, CodingKey {
        case op, conversationId, active, serverId
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        let op = try container.decode(String.self, forKey: .op)
        let conversationId = try container.decode(String.self, forKey: .conversationId)
        guard let known = Op(rawValue: op) else {
            throw DecodingError.dataCorruptedError(forKey: .op, in: container, debugDescription: "unknown op \"\(op)\"")
        }
        switch known {
        case .send: self = .send(conversationId: conversationId, try SendMessageRequest(from: decoder))
        case .receipt: self = .receipt(conversationId: conversationId, try ReceiptRequest(from: decoder))
        case .typing: self = .typing(conversationId: conversationId, active: try container.decode(Bool.self, forKey: .active))
        case .edit:
            self = .edit(
                conversationId: conversationId, serverId: try container.decode(String.self, forKey: .serverId), try EditMessageRequest(from: decoder))
        case .delete:
            self = .delete(
                conversationId: conversationId, serverId: try container.decode(String.self, forKey: .serverId), try DeleteMessageRequest(from: decoder))
        case .react: self = .react(conversationId: conversationId, try ReactRequest(from: decoder))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        switch self {
        case .send(let conversationId, let request):
            try container.encode("send", forKey: .op)
            try container.encode(conversationId, forKey: .conversationId)
            try request.encode(to: encoder)
        case .receipt(let conversationId, let request):
            try container.encode("receipt", forKey: .op)
            try container.encode(conversationId, forKey: .conversationId)
            try request.encode(to: encoder)
        case .typing(let conversationId, let active):
            try container.encode("typing", forKey: .op)
            try container.encode(conversationId, forKey: .conversationId)
            try container.encode(active, forKey: .active)
        case .edit(let conversationId, let serverId, let request):
            try container.encode("edit", forKey: .op)
            try container.encode(conversationId, forKey: .conversationId)
            try container.encode(serverId, forKey: .serverId)
            try request.encode(to: encoder)
        case .delete(let conversationId, let serverId, let request):
            try container.encode("delete", forKey: .op)
            try container.encode(conversationId, forKey: .conversationId)
            try container.encode(serverId, forKey: .serverId)
            try request.encode(to: encoder)
        case .react(let conversationId, let request):
            try container.encode("react", forKey: .op)
            try container.encode(conversationId, forKey: .conversationId)
            try request.encode(to: encoder)
        }
    }
}

/// `{"type": "ack", ...}`: the WebSocket form of the accept answer.
public struct AckFrame: Codable, Sendable, Equatable {
    public var type: String = "ack"
    public var clientMessageId: String
    public var serverId: String
    public var status: ServerMessageStatus
    public var acceptedAt: Int64
    public var seq: Int64?
    /// `true` when the app's before-send hook replaced the body (as ``SendMessageResponse/bodyReplaced``).
    public var bodyReplaced: Bool?
    /// With ``bodyReplaced``: the body as stored (as ``SendMessageResponse/body``).
    public var body: String?

    public init(
        clientMessageId: String, serverId: String, status: ServerMessageStatus, acceptedAt: Int64, seq: Int64? = nil, bodyReplaced: Bool? = nil,
        body: String? = nil
    ) {
        self.clientMessageId = clientMessageId
        self.serverId = serverId
        self.status = status
        self.acceptedAt = acceptedAt
        self.seq = seq
        self.bodyReplaced = bodyReplaced
        self.body = body
    }

    public init(_ response: SendMessageResponse) {
        self.init(
            clientMessageId: response.clientMessageId, serverId: response.serverId, status: response.status, acceptedAt: response.acceptedAt,
            seq: response.seq, bodyReplaced: response.bodyReplaced, body: response.body)
    }
}

/// `{"type": "error", ...}`: a WebSocket operation was refused. `clientMessageId` names the send it answers, when known.
public struct ErrorFrame: Codable, Sendable, Equatable {
    public var type: String = "error"
    public var clientMessageId: String?
    public var error: ErrorDetail

    public init(clientMessageId: String?, error: ErrorDetail) {
        self.clientMessageId = clientMessageId
        self.error = error
    }
}

/// A server → client WebSocket message: an answer to an operation, or a stream event.
public enum ServerFrame: Sendable, Equatable {
    case ack(AckFrame)
    case error(ErrorFrame)
    case event(ServerEvent)
}

extension ServerFrame: Decodable {
    private enum Keys: String, CodingKey {
        case type
    }

    public init(from decoder: any Decoder) throws {
        let type = try decoder.container(keyedBy: Keys.self).decode(String.self, forKey: .type)
        switch type {
        case "ack": self = .ack(try AckFrame(from: decoder))
        case "error": self = .error(try ErrorFrame(from: decoder))
        default: self = .event(try ServerEvent(from: decoder))
        }
    }
}
