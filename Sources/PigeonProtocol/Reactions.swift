/// One reaction key on a message, as the reading user sees it (API.md 1.2).
public struct Reaction: Codable, Sendable, Equatable, Hashable {
    /// One emoji or an app token (``Validation/isValidReactionKey(_:)``).
    public var key: String
    /// How many users hold this key on the message (never 0: a key nobody holds is left out).
    public var count: Int
    /// Whether the reading user is one of them.
    public var me: Bool

    public init(key: String, count: Int, me: Bool) {
        self.key = key
        self.count = count
        self.me = me
    }
}

/// Whether a reaction is added or removed.
public enum ReactionAction: String, Codable, Sendable, Equatable, CaseIterable {
    case add
    case remove
}

/// `PUT`/`DELETE /v1/conversations/{id}/messages/{serverId}/reactions/{key}` answer: the message's reactions after
/// the call, as the caller sees them.
public struct ReactionsResponse: Codable, Sendable, Equatable {
    public var serverId: String
    public var reactions: [Reaction]

    public init(serverId: String, reactions: [Reaction]) {
        self.serverId = serverId
        self.reactions = reactions
    }
}

/// One user's reaction, as `GET …/reactions` lists it.
public struct ReactionUser: Codable, Sendable, Equatable {
    public var userId: String
    public var key: String
    /// When it was added, milliseconds since the epoch.
    public var at: Int64

    public init(userId: String, key: String, at: Int64) {
        self.userId = userId
        self.key = key
        self.at = at
    }
}

/// `GET /v1/conversations/{id}/messages/{serverId}/reactions` answer: who reacted, ascending by user id (and key).
/// A page holds whole users: every key of each user it names.
public struct ReactionUsersPage: Codable, Sendable, Equatable {
    public var users: [ReactionUser]
    /// More users follow; ask with `after` = the last user id of this page.
    public var hasMore: Bool

    public init(users: [ReactionUser], hasMore: Bool) {
        self.users = users
        self.hasMore = hasMore
    }
}

/// `reaction`: a member added or removed a reaction. Stored and resumable like every event with a cursor; it is not a
/// message (no seq, no unread, no push).
public struct ReactionEvent: Codable, Sendable, Equatable {
    public var conversationId: String
    /// The message reacted to.
    public var serverId: String
    public var key: String
    /// Who reacted.
    public var userId: String
    public var action: ReactionAction
    /// The message's reactions after this change, as the receiving device's user sees them (``Reaction/me``).
    public var reactions: [Reaction]
    public var at: Int64

    public init(conversationId: String, serverId: String, key: String, userId: String, action: ReactionAction, reactions: [Reaction], at: Int64) {
        self.conversationId = conversationId
        self.serverId = serverId
        self.key = key
        self.userId = userId
        self.action = action
        self.reactions = reactions
        self.at = at
    }
}

/// The WebSocket `react` operation's fields besides `conversationId`.
public struct ReactRequest: Codable, Sendable, Equatable {
    public var serverId: String
    public var key: String
    public var action: ReactionAction
    /// Names the `ack` or `error` that answers it (a UUID chosen by the client).
    public var clientMessageId: String

    public init(serverId: String, key: String, action: ReactionAction, clientMessageId: String) {
        self.serverId = serverId
        self.key = key
        self.action = action
        self.clientMessageId = clientMessageId
    }
}

/// The limits of reactions (API.md 1.2).
public enum ReactionLimits {
    /// Distinct keys one message holds at most (`409` past it).
    public static let keysPerMessage = 50
    /// Keys one user holds on one message at most (`409` past it).
    public static let keysPerUser = 20
    /// A key's UTF-8 length at most.
    public static let keyBytes = 64
    /// An app token's length at most.
    public static let tokenLength = 32
}

extension Validation {
    /// A reaction key: one emoji (a single extended grapheme cluster) or an app token `[a-z0-9_:+-]{1,32}`, at most
    /// 64 bytes of UTF-8.
    public static func isValidReactionKey(_ key: String) -> Bool {
        let utf8 = key.utf8
        guard !utf8.isEmpty, utf8.count <= ReactionLimits.keyBytes else { return false }
        if isReactionToken(key) { return true }
        return isSingleEmoji(key)
    }

    /// An app token: `[a-z0-9_:+-]{1,32}`.
    public static func isReactionToken(_ key: String) -> Bool {
        let utf8 = key.utf8
        guard (1...ReactionLimits.tokenLength).contains(utf8.count) else { return false }
        return utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "+"), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// One emoji: a single extended grapheme cluster that is drawn as an emoji (a pictograph shown as one by
    /// default, or a sequence: a presentation selector, a skin tone, a ZWJ sequence, a flag, a keycap).
    public static func isSingleEmoji(_ key: String) -> Bool {
        guard key.count == 1, let character = key.first else { return false }
        let scalars = Array(character.unicodeScalars)
        guard let first = scalars.first else { return false }
        if scalars.count == 1 {
            return first.properties.isEmojiPresentation
                || (first.properties.isEmoji && first.value > 0xFF)
        }
        guard first.properties.isEmoji else { return false }
        // Every further scalar must belong to an emoji sequence, so that "a\u{301}"-like clusters are refused.
        return scalars.dropFirst().allSatisfy { scalar in
            scalar.properties.isEmoji || scalar.properties.isEmojiModifier
                || scalar.value == 0xFE0F || scalar.value == 0x200D || scalar.value == 0x20E3
                || (0xE0020...0xE007F).contains(scalar.value)
        }
    }
}
