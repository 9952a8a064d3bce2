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
    /// 64 bytes of UTF-8 (in its canonical form, ``canonicalReactionKey(_:)``).
    public static func isValidReactionKey(_ key: String) -> Bool {
        canonicalReactionKey(key) != nil
    }

    /// The one form a reaction key is stored, counted and compared in, or `nil` when `key` is no reaction key. An app
    /// token is itself. An emoji is put in one form: variation selectors are dropped and one U+FE0F is put after each
    /// emoji that is not drawn as one by default (unless a skin tone follows it), the fully-qualified form, so that ❤,
    /// ❤️ and ❤ with three selectors are one key (❤️). Invisible characters are refused (bidirectional controls, line
    /// separators, zero-width characters, tags), but for the joiner between two emoji of a ZWJ sequence and the tags
    /// of a subdivision flag (🏴 + tag letters + cancel tag).
    public static func canonicalReactionKey(_ key: String) -> String? {
        let utf8 = key.utf8
        guard !utf8.isEmpty, utf8.count <= 4 * ReactionLimits.keyBytes else { return nil }
        if isReactionToken(key) { return key }
        let scalars = Array(key.unicodeScalars).filter { $0.value != 0xFE0F && $0.value != 0xFE0E }
        guard !scalars.isEmpty else { return nil }
        var canonical = String.UnicodeScalarView()
        for (index, scalar) in scalars.enumerated() {
            if scalar.value == 0x200D {
                // A joiner only between two emoji.
                guard index > 0, index + 1 < scalars.count, scalars[index - 1].properties.isEmoji || scalars[index - 1].properties.isEmojiModifier,
                    scalars[index + 1].properties.isEmoji
                else { return nil }
            } else if (0xE0020...0xE007F).contains(scalar.value) {
                // Tags only in a subdivision flag: 🏴, tag characters, the cancel tag last.
                guard scalars.first?.value == 0x1F3F4, scalars.last?.value == 0xE007F,
                    scalar.value == 0xE007F ? index == scalars.count - 1 : true
                else { return nil }
            } else if isDeceptiveInvisible(scalar) || scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                return nil
            }
            canonical.append(scalar)
            let next = index + 1 < scalars.count ? scalars[index + 1] : nil
            // #, * and the digits are emoji only as keycaps (with U+20E3 after them).
            let keycapBase = scalar.isASCII
            let presentable = scalar.properties.isEmoji && !scalar.properties.isEmojiPresentation && !scalar.properties.isEmojiModifier
                && !(0xE0020...0xE007F).contains(scalar.value) && (!keycapBase || next?.value == 0x20E3)
            if keycapBase && next?.value != 0x20E3 { return nil }
            if presentable && !(next?.properties.isEmojiModifier ?? false) {
                canonical.append(Unicode.Scalar(0xFE0F)!)
            }
        }
        let result = String(canonical)
        guard result.utf8.count <= ReactionLimits.keyBytes, isSingleEmoji(result) else { return nil }
        return result
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
