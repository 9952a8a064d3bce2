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

/// What a member may do in a conversation (API.md 1.1): the owner (its creator, or whom the owner's leaving made
/// owner) and admins manage members and the name; only the owner changes roles.
public enum MemberRole: String, Codable, Sendable, CaseIterable {
    case owner, admin, member
}

/// Whether a conversation is between two users for good, or a group (API.md 1.1).
public enum ConversationKind: String, Codable, Sendable {
    /// Created with exactly one other member and no name; it never gains members.
    case direct
    case group
}

/// Whether a member took part in a conversation (API.md 1.2, "Consent and blocking"): with `--consent invites`, a
/// member a stranger added is `invited` until it accepts; everyone else is `joined`.
public enum MembershipState: String, Codable, Sendable, CaseIterable {
    /// Added by a user it shares no joined conversation with: it may read the conversation, and gets no `message.new`,
    /// no push and no unread count until it accepts (`POST /v1/conversations/{id}/accept`).
    case invited
    case joined
}

/// A member of a conversation with its role, when it joined, and its receipt watermarks.
public struct ConversationMember: Codable, Sendable, Equatable {
    public var userId: String
    public var role: MemberRole
    /// `invited` until a member a stranger added accepts; `joined` otherwise (servers before API 1.2: always joined).
    public var membership: MembershipState
    /// The seq of the member change that added it; 0 for a founding member. It sees the conversation from here on.
    public var joinedSeq: Int64
    /// Highest seq every device of this member has acknowledged as delivered.
    public var deliveredSeq: Int64
    /// Highest seq this member has read. Never lower than ``deliveredSeq`` would allow: read implies delivered.
    public var readSeq: Int64

    public init(
        userId: String, role: MemberRole = .member, joinedSeq: Int64 = 0, deliveredSeq: Int64, readSeq: Int64, membership: MembershipState = .joined
    ) {
        self.userId = userId
        self.role = role
        self.membership = membership
        self.joinedSeq = joinedSeq
        self.deliveredSeq = deliveredSeq
        self.readSeq = readSeq
    }

    private enum CodingKeys: String, CodingKey {
        case userId, role, membership, joinedSeq, deliveredSeq, readSeq
    }

    /// Servers before API 1.1 send neither `role` nor `joinedSeq`: a plain founding member then; before API 1.2 no
    /// `membership`: joined.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        userId = try container.decode(String.self, forKey: .userId)
        role = try container.decodeIfPresent(MemberRole.self, forKey: .role) ?? .member
        membership = try container.decodeIfPresent(MembershipState.self, forKey: .membership) ?? .joined
        joinedSeq = try container.decodeIfPresent(Int64.self, forKey: .joinedSeq) ?? 0
        deliveredSeq = try container.decode(Int64.self, forKey: .deliveredSeq)
        readSeq = try container.decode(Int64.self, forKey: .readSeq)
    }
}

/// A conversation as the API returns it.
public struct Conversation: Codable, Sendable, Equatable {
    public var id: String
    public var kind: ConversationKind
    @NullEncoded public var name: String?
    public var createdAt: Int64
    /// The seq of the newest stored message, 0 when there is none.
    public var lastSeq: Int64
    /// When its newest message was stored, else ``createdAt`` (milliseconds since the epoch): the order of
    /// `GET /v1/conversations`. Servers before API 1.1 do not send it; it decodes as ``createdAt`` then.
    public var updatedAt: Int64
    public var members: [ConversationMember]
    /// The newest message of the conversation, or `nil` when it has none (API.md 1.1). Per caller: an event's copy
    /// (`conversation.created`) has none.
    @NullEncoded public var lastMessage: Message?
    /// The caller's unread messages: other members' messages above its read watermark (API.md 1.1); 0 in an event.
    public var unreadCount: Int

    /// `kind` defaults to what the members and name make it: ``ConversationKind/direct`` for two members and no
    /// name, else a group.
    public init(
        id: String, kind: ConversationKind? = nil, name: String?, createdAt: Int64, lastSeq: Int64, updatedAt: Int64? = nil,
        members: [ConversationMember], lastMessage: Message? = nil, unreadCount: Int = 0
    ) {
        self.lastMessage = lastMessage
        self.unreadCount = unreadCount
        self.id = id
        self.kind = kind ?? Self.kind(name: name, memberCount: members.count)
        self.name = name
        self.createdAt = createdAt
        self.lastSeq = lastSeq
        self.updatedAt = updatedAt ?? createdAt
        self.members = members
    }

    /// The kind a new conversation of `memberCount` members (its creator included) and `name` gets.
    public static func kind(name: String?, memberCount: Int) -> ConversationKind {
        name == nil && memberCount == 2 ? .direct : .group
    }

    private enum CodingKeys: String, CodingKey {
        case id, kind, name, createdAt, lastSeq, updatedAt, members, lastMessage, unreadCount
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        // A local: `kind` below needs the name before every stored property is set (a wrapped property cannot be read then).
        let name = try container.decodeIfPresent(String.self, forKey: .name)
        self.name = name
        createdAt = try container.decode(Int64.self, forKey: .createdAt)
        lastSeq = try container.decode(Int64.self, forKey: .lastSeq)
        updatedAt = try container.decodeIfPresent(Int64.self, forKey: .updatedAt) ?? createdAt
        members = try container.decode([ConversationMember].self, forKey: .members)
        kind = try container.decodeIfPresent(ConversationKind.self, forKey: .kind) ?? Self.kind(name: name, memberCount: members.count)
        lastMessage = try container.decodeIfPresent(Message.self, forKey: .lastMessage)
        unreadCount = try container.decodeIfPresent(Int.self, forKey: .unreadCount) ?? 0
    }
}

/// `GET /v1/conversations` answer: a page of the caller's conversations, newest activity (``Conversation/updatedAt``)
/// first.
public struct ConversationList: Codable, Sendable, Equatable {
    public var conversations: [Conversation]
    /// Whether older conversations follow; ask for them with `before` = ``nextBefore``.
    public var hasMore: Bool
    /// The `before` of the next page (`<updatedAt>:<id>` of this page's last conversation), `nil` on the last page.
    @NullEncoded public var nextBefore: String?

    public init(conversations: [Conversation], hasMore: Bool = false, nextBefore: String? = nil) {
        self.conversations = conversations
        self.hasMore = hasMore
        self.nextBefore = nextBefore
    }

    private enum CodingKeys: String, CodingKey {
        case conversations, hasMore, nextBefore
    }

    /// Servers before API 1.1 sent every conversation in one answer, without `hasMore`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        conversations = try container.decode([Conversation].self, forKey: .conversations)
        hasMore = try container.decodeIfPresent(Bool.self, forKey: .hasMore) ?? false
        nextBefore = try container.decodeIfPresent(String.self, forKey: .nextBefore)
    }
}
