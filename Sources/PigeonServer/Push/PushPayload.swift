import Foundation
import PigeonProtocol

/// The request and answer of the Matrix Push Gateway API, `POST /_matrix/push/v1/notify`
/// (https://spec.matrix.org/latest/push-gateway-api/), as Sygnal and every compatible gateway read them.
///
/// Request: `{"notification": {...}}` with `event_id`, `room_id`, `type`, `sender`, `prio` (`high` or `low`),
/// optional `content` (here only with `--push-include-body`), `counts` (`unread`, `missed_calls`), and `devices`:
/// for each device `app_id`, `pushkey`, `pushkey_ts` (when the pushkey was registered, in seconds, as Synapse sends
/// it), `data` (the registration's own data) and `tweaks`. Answer `200 {"rejected": [pushkey, ...]}`: the pushkeys
/// the gateway or its provider refused for good.
enum PushPayload {
    struct Request: Codable, Equatable {
        var notification: Notification
    }

    struct Notification: Codable, Equatable {
        var eventId: String
        var roomId: String
        var type: String
        var sender: String
        var prio: String
        var content: [String: JSONValue]?
        var counts: Counts
        var devices: [Device]

        enum CodingKeys: String, CodingKey {
            case eventId = "event_id", roomId = "room_id", type, sender, prio, content, counts, devices
        }
    }

    struct Counts: Codable, Equatable {
        var unread: Int
    }

    struct Device: Codable, Equatable {
        var appId: String
        var pushkey: String
        var pushkeyTs: Int64
        var data: [String: JSONValue]
        var tweaks: [String: JSONValue]

        enum CodingKeys: String, CodingKey {
            case appId = "app_id", pushkey, pushkeyTs = "pushkey_ts", data, tweaks
        }
    }

    struct Answer: Codable, Equatable {
        var rejected: [String]?
    }

    /// The notification of one claimed push (one device per request, so a rejection names one registration).
    static func request(for push: ClaimedPush) -> Request {
        var content: [String: JSONValue]?
        if let body = push.body {
            content = ["type": .string(push.messageType), "body": .string(body)]
        }
        return Request(
            notification: Notification(
                eventId: push.serverId, roomId: push.conversationId, type: "pigeon.message", sender: push.senderId, prio: "high",
                content: content, counts: Counts(unread: push.unread),
                devices: [
                    Device(
                        appId: push.appId, pushkey: push.pushkey, pushkeyTs: push.registeredAt / 1000, data: decodeData(push.data) ?? [:],
                        tweaks: [:])
                ]))
    }

    /// A registration's stored `data` (JSON text) as an object; `nil` when there is none.
    static func decodeData(_ text: String?) -> [String: JSONValue]? {
        guard let text else { return nil }
        return try? JSONDecoder().decode([String: JSONValue].self, from: Data(text.utf8))
    }

    /// A registration's `data` as stored (sorted keys: the same data is the same text).
    static func encodeData(_ data: [String: JSONValue]?) throws -> String? {
        guard let data else { return nil }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(data), as: UTF8.self)
    }
}
