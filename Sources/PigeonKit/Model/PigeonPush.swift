import Foundation
import PigeonProtocol

/// A Pigeon push notification as the app receives it: which conversation has news, the newest message and this user's
/// unread count. Read it with ``init(payload:)`` from what the operating system hands the app, and pass it to
/// ``PigeonClient/handlePush(_:deadline:)``.
///
/// The server posts `{"notification": {"event_id", "room_id", "type": "pigeon.message", "sender", "counts": {"unread"}}}`
/// to a Matrix push gateway; the gateway reshapes it for its provider. ``init(payload:)`` reads the shapes Sygnal
/// produces, and the notification itself:
///
/// | where it comes from | conversation | message | unread count |
/// |---|---|---|---|
/// | APNs (Sygnal's full payload, Pigeon's `type` is set) | `room_id` | `event_id` | `aps.badge` |
/// | APNs (Sygnal's `event_id_only` format) | `room_id` | `event_id` | `unread_count` |
/// | FCM data message (Android's `RemoteMessage.data`, or `userInfo` of the iOS Firebase SDK: every value a string) | `room_id` | `event_id` | `unread` |
/// | the gateway's notification (`{"notification": {...}}`, or its inner object) | `room_id` | `event_id` | `counts.unread` |
///
/// The fields may also sit under a `data` or `notification` key of the payload. Numbers may be numbers or decimal
/// strings; `null`, `"null"`, `"None"` and `""` count as absent.
public struct PigeonPush: Sendable, Equatable, Hashable {
    /// The conversation the newest message is in (the notification's `room_id`), lowercase.
    public var conversationId: String
    /// The newest message the push is for (its `event_id`), lowercase; `nil` when the payload left it out. Pushes
    /// coalesce: earlier messages may be waiting too.
    public var serverId: String?
    /// This user's unread count when the push was sent (for a badge); `nil` when the payload left it out.
    public var unreadCount: Int?
    /// Who sent the newest message (the notification's `sender`), when the payload has it.
    public var senderId: String?

    /// A push with the given fields; `conversationId` and `serverId` must be UUIDs (stored lowercase).
    public init(conversationId: String, serverId: String? = nil, unreadCount: Int? = nil, senderId: String? = nil) throws {
        guard let conversation = Validation.canonicalUUID(conversationId) else {
            throw PigeonClientError.invalid("room_id \"\(conversationId.prefix(80))\" is not a Pigeon conversation id (a UUID)")
        }
        var message: String?
        if let serverId {
            guard let canonical = Validation.canonicalUUID(serverId) else {
                throw PigeonClientError.invalid("event_id \"\(serverId.prefix(80))\" is not a Pigeon message id (a UUID)")
            }
            message = canonical
        }
        if let unreadCount, unreadCount < 0 { throw PigeonClientError.invalid("the unread count \(unreadCount) is negative") }
        self.conversationId = conversation
        self.serverId = message
        self.unreadCount = unreadCount
        self.senderId = senderId
    }

    /// Reads a push from the payload the app was given: an APNs `userInfo`, an FCM data dictionary, or the gateway's
    /// notification (the shapes in the table above).
    ///
    /// Throws ``PigeonClientError/Code-swift.struct/invalidArgument`` when the payload is not a Pigeon push (no
    /// `room_id`: another service's push) or a field is malformed (a `room_id` or `event_id` that is not a UUID, an
    /// unread count that is not a whole number ≥ 0), saying which. A push that cannot be read still means the server
    /// has news: ``PigeonClient/handlePush(_:deadline:)`` with `nil` catches up every conversation.
    public init(payload: [AnyHashable: Any]) throws {
        guard let fields = Self.fields(in: payload) else {
            throw PigeonClientError.invalid("the payload has no room_id: it is not a Pigeon push (keys: \(Self.keyList(payload)))")
        }
        guard let room = Self.text(fields["room_id"]) else {
            throw PigeonClientError.invalid("the payload's room_id is not a string")
        }
        var unread: Int?
        for (key, container) in [("unread_count", fields), ("unread", fields), ("unread", fields["counts"] as? [AnyHashable: Any]),
            ("badge", fields["aps"] as? [AnyHashable: Any]), ("badge", payload["aps"] as? [AnyHashable: Any])]
        {
            guard let container, let value = container[key], !Self.isAbsent(value) else { continue }
            guard let number = Self.wholeNumber(value) else {
                throw PigeonClientError.invalid("the payload's \(key) is not a whole number: \(String(describing: value).prefix(40))")
            }
            unread = number
            break
        }
        let event = fields["event_id"].flatMap { Self.isAbsent($0) ? nil : $0 }
        if let event, Self.text(event) == nil { throw PigeonClientError.invalid("the payload's event_id is not a string") }
        try self.init(
            conversationId: room, serverId: event.flatMap(Self.text), unreadCount: unread, senderId: fields["sender"].flatMap(Self.text))
    }

    /// The dictionary that holds `room_id`: the payload itself, or its `notification` or `data` object (in that order).
    private static func fields(in payload: [AnyHashable: Any]) -> [AnyHashable: Any]? {
        if let value = payload["room_id"], !isAbsent(value) { return payload }
        for key in ["notification", "data"] {
            if let inner = payload[key] as? [AnyHashable: Any], let value = inner["room_id"], !isAbsent(value) { return inner }
        }
        return nil
    }

    private static func isAbsent(_ value: Any) -> Bool {
        if value is NSNull { return true }
        if let text = value as? String { return ["", "null", "None"].contains(text) }
        return false
    }

    private static func text(_ value: Any?) -> String? {
        guard let value, !isAbsent(value) else { return nil }
        return value as? String
    }

    /// A whole number ≥ 0 from a number or a decimal string (FCM data values are strings).
    private static func wholeNumber(_ value: Any) -> Int? {
        if let text = value as? String { return Int(text.trimmingCharacters(in: .whitespaces)).flatMap { $0 >= 0 ? $0 : nil } }
        if let number = value as? Int { return number >= 0 ? number : nil }
        if let number = value as? Double, number >= 0, number.rounded() == number, number < 1e15 { return Int(number) }
        if let number = value as? NSNumber {
            let double = number.doubleValue
            return double >= 0 && double.rounded() == double && double < 1e15 ? Int(double) : nil
        }
        return nil
    }

    private static func keyList(_ payload: [AnyHashable: Any]) -> String {
        let keys = payload.keys.map { "\($0.base)" }.sorted()
        return keys.isEmpty ? "none" : keys.prefix(10).joined(separator: ", ")
    }
}
