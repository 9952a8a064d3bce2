/// `POST /v1/conversations` request body. The caller is always added as a member.
public struct CreateConversationRequest: Codable, Sendable, Equatable {
    /// Other members' user ids (the caller may be listed too; duplicates are merged).
    public var members: [String]
    /// An optional display name, at most 256 characters.
    public var name: String?

    public init(members: [String], name: String? = nil) {
        self.members = members
        self.name = name
    }
}

/// A member of a conversation with its receipt watermarks.
public struct ConversationMember: Codable, Sendable, Equatable {
    public var userId: String
    /// Highest seq every device of this member has acknowledged as delivered.
    public var deliveredSeq: Int64
    /// Highest seq this member has read. Never lower than ``deliveredSeq`` would allow: read implies delivered.
    public var readSeq: Int64

    public init(userId: String, deliveredSeq: Int64, readSeq: Int64) {
        self.userId = userId
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
    }
}

/// A conversation as the API returns it.
public struct Conversation: Codable, Sendable, Equatable {
    public var id: String
    public var name: String?
    public var createdAt: Int64
    /// The seq of the newest stored message, 0 when there is none.
    public var lastSeq: Int64
    public var members: [ConversationMember]

    public init(id: String, name: String?, createdAt: Int64, lastSeq: Int64, members: [ConversationMember]) {
        self.id = id
        self.name = name
        self.createdAt = createdAt
        self.lastSeq = lastSeq
        self.members = members
    }

    /// Encodes `name` as `null` when absent, so every field of API.md is always present.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(name, forKey: .name)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(lastSeq, forKey: .lastSeq)
        try container.encode(members, forKey: .members)
    }
}

/// `GET /v1/conversations` answer.
public struct ConversationList: Codable, Sendable, Equatable {
    public var conversations: [Conversation]

    public init(conversations: [Conversation]) {
        self.conversations = conversations
    }
}
