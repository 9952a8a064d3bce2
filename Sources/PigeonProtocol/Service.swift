/// `POST /v1/service/conversations` request body (the server API, API.md 1.2): a conversation the app's backend
/// creates, every member joined at once.
public struct ServiceCreateConversationRequest: Codable, Sendable, Equatable {
    /// 1–1,000 user ids (duplicates merged).
    public var members: [String]
    /// An optional display name, at most 256 characters.
    public var name: String?
    /// The member who owns it; absent: the first of ``members``. Listed in ``members`` or not, the owner is a member.
    public var owner: String?

    public init(members: [String], name: String? = nil, owner: String? = nil) {
        self.members = members
        self.name = name
        self.owner = owner
    }
}

/// `POST /v1/service/conversations/{id}/messages` request body: a send (``SendMessageRequest``'s fields) in the name
/// of `senderId`, a member's user id or `system:<name>`.
public struct ServiceSendMessageRequest: Codable, Sendable, Equatable {
    /// A member's userId, or ``SystemSender`` `system:<name>` (needs no membership).
    public var senderId: String
    public var clientMessageId: String
    public var type: String
    public var body: String
    public var clientTimestamp: Int64
    public var replyTo: String?
    public var threadRoot: String?
    public var attachments: [AttachmentReference]?

    public init(
        senderId: String, clientMessageId: String, type: String, body: String, clientTimestamp: Int64, replyTo: String? = nil,
        threadRoot: String? = nil, attachments: [AttachmentReference]? = nil
    ) {
        self.senderId = senderId
        self.clientMessageId = clientMessageId
        self.type = type
        self.body = body
        self.clientTimestamp = clientTimestamp
        self.replyTo = replyTo
        self.threadRoot = threadRoot
        self.attachments = attachments
    }

    /// The send it makes.
    public var send: SendMessageRequest {
        SendMessageRequest(
            clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: clientTimestamp, replyTo: replyTo, threadRoot: threadRoot,
            attachments: attachments)
    }
}

/// `POST /v1/service/conversations/{id}/messages/{serverId}/delete` request body, optional as a whole: a deletion for
/// everyone by moderation.
public struct ServiceDeleteMessageRequest: Codable, Sendable, Equatable {
    /// The idempotency key; absent: one derived from the target's serverId, so that deleting a message twice is one
    /// deletion (the second call answers `200` with the first).
    public var clientMessageId: String?
    /// Absent: the server's clock.
    public var clientTimestamp: Int64?

    public init(clientMessageId: String? = nil, clientTimestamp: Int64? = nil) {
        self.clientMessageId = clientMessageId
        self.clientTimestamp = clientTimestamp
    }
}

/// The senders and actors of the server API that are not users (API.md 1.2, "The server API").
public enum SystemSender {
    /// The prefix of a system sender's id. A userId never holds a `:` (``Validation/isValidUserId(_:)``), so no user
    /// can be one.
    public static let prefix = "system:"

    /// `"by"` of a change the server API made (a moderation delete, a membership change): the API's own word.
    public static let serviceActor = "service"

    /// The `senderId` of the messages the server API writes as itself (a moderation delete, a membership change).
    public static let service = "system:service"

    /// The `senderDeviceId` of every message the server API writes: no device of a member is "the sending device",
    /// so every member device gets it as `message.new`.
    public static let deviceId = "service"

    /// Whether `value` is `system:<name>` with a name of 1–64 characters of `[A-Za-z0-9._-]`.
    public static func isValid(_ value: String) -> Bool {
        guard value.hasPrefix(prefix) else { return false }
        let name = value.utf8.dropFirst(prefix.utf8.count)
        guard (1...64).contains(name.count) else { return false }
        return name.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// The system senders the server writes as itself (``service``) or keeps for itself: an app's own system sender
    /// may not pass for one of them.
    public static let reserved: Set<String> = [service, "system:pigeon", "system:server", "system:admin", "system:moderation"]

    /// Whether `senderId` is a system sender's (not a user's).
    public static func isSystem(_ senderId: String) -> Bool {
        senderId.hasPrefix(prefix)
    }
}
