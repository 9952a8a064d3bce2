import Foundation
import PigeonProtocol

/// The webhook event types (API.md 1.2, "Webhooks: the app's backend hears what happened").
public enum WebhookEventType: String, Sendable, CaseIterable, Codable {
    case messageStored = "message.stored"
    case messageEdited = "message.edited"
    case messageDeleted = "message.deleted"
    case reaction
    case membersChanged = "members.changed"
    case conversationCreated = "conversation.created"
    case deviceRegistered = "device.registered"
    case deviceRevoked = "device.revoked"
    case receiptRead = "receipt.read"
}

/// Which webhook events a store records, and the rows it records: each store writes the row a builder answers in the
/// transaction that commits what the event reports, into its outbox (`webhook_events`), so that an event is durable
/// exactly when what it reports is (a crash after the commit loses none; nothing rolled back is ever recorded).
///
/// The builders answer `nil` for a type not enabled, first of all when no webhook is configured (``off``): then
/// nothing is built and nothing written, and the hot path pays one test of an empty set.
public struct WebhookOutbox: Sendable {
    /// The types recorded.
    public let types: Set<WebhookEventType>

    /// Records nothing (no `--webhook`).
    public static let off = WebhookOutbox(types: [])

    public init(types: Set<WebhookEventType>) {
        self.types = types
    }

    /// The types named (unknown names are left out; the configuration refuses them before).
    public init(typeNames: Set<String>) {
        self.init(types: Set(typeNames.compactMap(WebhookEventType.init(rawValue:))))
    }

    public var isOn: Bool { !types.isEmpty }

    @inline(__always)
    package func wants(_ type: WebhookEventType) -> Bool {
        !types.isEmpty && types.contains(type)
    }

    // MARK: Builders

    /// What a message stored with its seq reports: an ordinary message is `message.stored`; the server's
    /// `pigeon.members` is `members.changed`; an edit or a delete reports its target, which the store passes
    /// (``messageEdited(_:at:)``, ``messageDeleted(conversationId:serverId:by:at:)``), so none here.
    package func stored(_ message: Message, at now: Int64) -> WebhookEventRow? {
        if message.type == ServerMessageType.members {
            return membersChanged(conversationId: message.conversationId, seq: message.seq, change: message.body, at: now)
        }
        guard !Validation.isServerMessageType(message.type), wants(.messageStored) else { return nil }
        return row(.messageStored, key: message.conversationId, at: now) { json in
            json.key("message")
            EventPayload.message(message, into: &json)
        }
    }

    /// `message.edited`: the target as it reads after the edit.
    package func messageEdited(_ target: Message, at now: Int64) -> WebhookEventRow? {
        guard wants(.messageEdited) else { return nil }
        return row(.messageEdited, key: target.conversationId, at: now) { json in
            json.key("message")
            EventPayload.message(target, into: &json)
        }
    }

    /// `message.deleted`, `by` the user whose delete it is (``MessageLifecycle/deletedBy(_:)``).
    package func messageDeleted(conversationId: String, serverId: String, by: String, at now: Int64) -> WebhookEventRow? {
        guard wants(.messageDeleted) else { return nil }
        return row(.messageDeleted, key: conversationId, at: now) { json in
            json.member("conversationId", conversationId)
            json.member("serverId", serverId)
            json.member("by", by)
        }
    }

    package func reaction(conversationId: String, serverId: String, key: String, userId: String, action: ReactionAction, at now: Int64)
        -> WebhookEventRow?
    {
        guard wants(.reaction) else { return nil }
        return row(.reaction, key: conversationId, at: now) { json in
            json.member("conversationId", conversationId)
            json.member("serverId", serverId)
            json.member("key", key)
            json.member("userId", userId)
            json.member("action", action.rawValue)
        }
    }

    /// `members.changed`: `change` is the `pigeon.members` body (JSON text the server wrote).
    package func membersChanged(conversationId: String, seq: Int64, change: String, at now: Int64) -> WebhookEventRow? {
        guard wants(.membersChanged) else { return nil }
        return row(.membersChanged, key: conversationId, at: now) { json in
            json.member("conversationId", conversationId)
            json.member("seq", seq)
            json.key("change")
            json.raw(change)
        }
    }

    package func conversationCreated(_ conversation: Conversation, at now: Int64) throws -> WebhookEventRow? {
        guard wants(.conversationCreated) else { return nil }
        let encoded = String(decoding: try JSONEncoder().encode(conversation), as: UTF8.self)
        return row(.conversationCreated, key: conversation.id, at: now) { json in
            json.key("conversation")
            json.raw(encoded)
        }
    }

    /// `device.registered` or `device.revoked`, ordered with the user's other device events.
    package func device(_ type: WebhookEventType, _ device: DeviceIdentity, at now: Int64) -> WebhookEventRow? {
        precondition(type == .deviceRegistered || type == .deviceRevoked, "a device event")
        guard wants(type) else { return nil }
        return row(type, key: "user:" + device.userId, at: now) { json in
            json.member("userId", device.userId)
            json.member("deviceId", device.deviceId)
        }
    }

    /// `receipt.read`: a read watermark that moved.
    package func receiptRead(conversationId: String, userId: String, upToSeq: Int64, at now: Int64) -> WebhookEventRow? {
        guard wants(.receiptRead) else { return nil }
        return row(.receiptRead, key: conversationId, at: now) { json in
            json.member("conversationId", conversationId)
            json.member("userId", userId)
            json.member("upToSeq", upToSeq)
        }
    }

    /// `{"id", "type", "createdAt", "data": {…}}`, the exact bytes every try of the event sends.
    private func row(_ type: WebhookEventType, key: String, at now: Int64, data: (inout JSONText) -> Void) -> WebhookEventRow {
        let id = Identifiers.uuidV4()
        var json = JSONText(capacity: 512)
        json.beginObject()
        json.member("id", id)
        json.member("type", type.rawValue)
        json.member("createdAt", now)
        json.key("data")
        json.beginObject()
        data(&json)
        json.endObject()
        json.endObject()
        return WebhookEventRow(id: id, type: type, orderingKey: key, createdAt: now, body: json.string)
    }
}

/// One event to record in a store's outbox.
public struct WebhookEventRow: Sendable, Equatable {
    /// The event's id (`Pigeon-Event-Id`), the same on every try.
    public var id: String
    public var type: WebhookEventType
    /// Events of one key are delivered one at a time in the order they were recorded: the conversation's id, or
    /// `user:<userId>` for device events.
    public var orderingKey: String
    public var createdAt: Int64
    /// The request body.
    public var body: String

    public init(id: String, type: WebhookEventType, orderingKey: String, createdAt: Int64, body: String) {
        self.id = id
        self.type = type
        self.orderingKey = orderingKey
        self.createdAt = createdAt
        self.body = body
    }
}
