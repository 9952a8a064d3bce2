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
package enum PushPayload {
    package struct Request: Codable, Equatable {
        package var notification: Notification
    }

    package struct Notification: Codable, Equatable {
        package var eventId: String
        package var roomId: String
        package var type: String
        package var sender: String
        package var prio: String
        package var content: [String: JSONValue]?
        package var counts: Counts
        package var devices: [Device]

        package enum CodingKeys: String, CodingKey {
            case eventId = "event_id", roomId = "room_id", type, sender, prio, content, counts, devices
        }
    }

    package struct Counts: Codable, Equatable {
        package var unread: Int
    }

    package struct Device: Codable, Equatable {
        package var appId: String
        package var pushkey: String
        package var pushkeyTs: Int64
        package var data: [String: JSONValue]
        package var tweaks: [String: JSONValue]

        package enum CodingKeys: String, CodingKey {
            case appId = "app_id", pushkey, pushkeyTs = "pushkey_ts", data, tweaks
        }
    }

    package struct Answer: Codable, Equatable {
        package var rejected: [String]?
    }

    /// The notification of one claimed push (one device per request, so a rejection names one registration).
    package static func request(for push: ClaimedPush) -> Request {
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
    package static func decodeData(_ text: String?) -> [String: JSONValue]? {
        guard let text else { return nil }
        return try? JSONDecoder().decode([String: JSONValue].self, from: Data(text.utf8))
    }

    /// A registration's `data` as stored (sorted keys: the same data is the same text).
    package static func encodeData(_ data: [String: JSONValue]?) throws -> String? {
        guard let data else { return nil }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(data), as: UTF8.self)
    }
}
