/// The server's own message types (API.md 1.1): written by the server into a conversation's order, never sent by a
/// client (``Validation/isServerMessageType(_:)``).
public enum ServerMessageType {
    /// A membership, role or name change; body: ``MembersChange``.
    public static let members = "pigeon.members"
    /// A correction of an earlier message; body: ``EditBody``.
    public static let edit = "pigeon.edit"
    /// A deletion of an earlier message; body: ``DeleteBody``.
    public static let delete = "pigeon.delete"

    /// Whether `type` changes an earlier message (an edit or a delete).
    public static func isLifecycle(_ type: String) -> Bool {
        type == edit || type == delete
    }
}

// MARK: Group chats

/// `POST /v1/conversations/{id}/members` request body.
public struct AddMembersRequest: Codable, Sendable, Equatable {
    /// 1–1,000 user ids; members already in the conversation are ignored.
    public var userIds: [String]
    /// The role the new members get: `member` (the default) or `admin`; never `owner`.
    public var role: MemberRole?

    public init(userIds: [String], role: MemberRole? = nil) {
        self.userIds = userIds
        self.role = role
    }
}

/// `PATCH /v1/conversations/{id}/members/{userId}` request body (owner only).
public struct SetRoleRequest: Codable, Sendable, Equatable {
    /// `admin` or `member`.
    public var role: MemberRole

    public init(role: MemberRole) {
        self.role = role
    }
}

/// `PATCH /v1/conversations/{id}` request body (owner and admins): the new name, `null` to remove it.
public struct RenameConversationRequest: Codable, Sendable, Equatable {
    @NullEncoded public var name: String?

    public init(name: String?) {
        self.name = name
    }

    private enum CodingKeys: String, CodingKey { case name }

    /// `name` must be present (a string or `null`): an empty object is a mistake, not a removal.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        guard container.contains(.name) else {
            throw DecodingError.keyNotFound(CodingKeys.name, .init(codingPath: [], debugDescription: "name is required (null removes it)"))
        }
        name = try container.decodeIfPresent(String.self, forKey: .name)
    }
}

/// The body of a `pigeon.members` message: one membership, role or name change, in the conversation's order.
public struct MembersChange: Codable, Sendable, Equatable {
    public enum Action: String, Codable, Sendable {
        /// `userIds` were added by `by`, with `role`.
        case added
        /// `userIds` were removed by `by` (an owner or admin).
        case removed
        /// `by` left (`userIds` = [by]).
        case left
        /// `userIds` now have `role` (set by the owner, or the new owner after the owner left).
        case role
        /// The conversation is now called `name` (`null`: it has none).
        case renamed
    }

    public var action: Action
    public var userIds: [String]
    public var role: MemberRole?
    public var name: String?
    /// The actor's user id (also the message's `senderId`).
    public var by: String

    public init(action: Action, userIds: [String], role: MemberRole? = nil, name: String? = nil, by: String) {
        self.action = action
        self.userIds = userIds
        self.role = role
        self.name = name
        self.by = by
    }

    private enum CodingKeys: String, CodingKey { case action, userIds, role, name, by }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        action = try container.decode(Action.self, forKey: .action)
        userIds = try container.decodeIfPresent([String].self, forKey: .userIds) ?? []
        role = try container.decodeIfPresent(MemberRole.self, forKey: .role)
        name = try container.decodeIfPresent(String.self, forKey: .name)
        by = try container.decode(String.self, forKey: .by)
    }

    /// `role` only when there is one; `name` always for `renamed` (`null` when removed), else never.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(action, forKey: .action)
        try container.encode(userIds, forKey: .userIds)
        try container.encodeIfPresent(role, forKey: .role)
        if action == .renamed { try container.encode(name, forKey: .name) }
        try container.encode(by, forKey: .by)
    }
}

// MARK: Editing and deleting

/// `POST /v1/conversations/{id}/messages/{serverId}/edit` request body.
public struct EditMessageRequest: Codable, Sendable, Equatable {
    /// The idempotency key of the edit itself (a UUID, unique per device, like a send's).
    public var clientMessageId: String
    /// The new text, under the same limits as a message body.
    public var body: String
    public var clientTimestamp: Int64

    public init(clientMessageId: String, body: String, clientTimestamp: Int64) {
        self.clientMessageId = clientMessageId
        self.body = body
        self.clientTimestamp = clientTimestamp
    }
}

/// `POST /v1/conversations/{id}/messages/{serverId}/delete` request body.
public struct DeleteMessageRequest: Codable, Sendable, Equatable {
    public var clientMessageId: String
    public var clientTimestamp: Int64

    public init(clientMessageId: String, clientTimestamp: Int64) {
        self.clientMessageId = clientMessageId
        self.clientTimestamp = clientTimestamp
    }
}

/// The body of a `pigeon.edit` message: the target's serverId and its new text (`""` once the target was deleted:
/// the server erases the text of its edits too).
public struct EditBody: Codable, Sendable, Equatable {
    public var serverId: String
    public var body: String

    public init(serverId: String, body: String) {
        self.serverId = serverId
        self.body = body
    }
}

/// The body of a `pigeon.delete` message: the target's serverId, and who deleted it.
public struct DeleteBody: Codable, Sendable, Equatable {
    public var serverId: String
    /// The deleting user's id (the target's sender), or `"service"` for a deletion by moderation through the server
    /// API; absent in deletions stored before it was written.
    public var by: String?

    public init(serverId: String, by: String? = nil) {
        self.serverId = serverId
        self.by = by
    }
}

// MARK: Devices

/// One device of the caller's user in `GET /v1/devices`.
public struct DeviceInfo: Codable, Sendable, Equatable {
    public var deviceId: String
    /// The name it registered with; `null` when none (a device seen only through a JWT has none).
    @NullEncoded public var deviceName: String?
    /// When it registered, or was first seen through a JWT (milliseconds since the epoch).
    public var createdAt: Int64
    /// When it last made an authenticated request (to the minute: the server writes it at most once a minute).
    public var lastSeenAt: Int64
    /// Whether it is the device that asked.
    public var current: Bool

    public init(deviceId: String, deviceName: String?, createdAt: Int64, lastSeenAt: Int64, current: Bool) {
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.createdAt = createdAt
        self.lastSeenAt = lastSeenAt
        self.current = current
    }

    private enum CodingKeys: String, CodingKey { case deviceId, deviceName, createdAt, lastSeenAt, current }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        deviceId = try container.decode(String.self, forKey: .deviceId)
        deviceName = try container.decodeIfPresent(String.self, forKey: .deviceName)
        createdAt = try container.decode(Int64.self, forKey: .createdAt)
        lastSeenAt = try container.decode(Int64.self, forKey: .lastSeenAt)
        current = try container.decode(Bool.self, forKey: .current)
    }
}

/// `GET /v1/devices` answer: the caller's user's devices, oldest first.
public struct DeviceList: Codable, Sendable, Equatable {
    public var devices: [DeviceInfo]

    public init(devices: [DeviceInfo]) {
        self.devices = devices
    }
}
