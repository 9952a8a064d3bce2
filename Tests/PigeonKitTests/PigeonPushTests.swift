import Foundation
import PigeonKit
import PigeonProtocol
import Testing

/// ``PigeonPush/init(payload:)`` on the payloads an app is handed, written as JSON and read the way the platforms
/// give them (`JSONSerialization`: numbers as `NSNumber`, FCM data values as strings).
@Suite struct PigeonPushTests {
    static let room = "6F1C2A3B-4D5E-4F60-8172-93A4B5C6D7E8"
    static let event = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

    func payload(_ json: String) throws -> [AnyHashable: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    func expected(unread: Int?, sender: String? = "alice") throws -> PigeonPush {
        try PigeonPush(conversationId: Self.room.lowercased(), serverId: Self.event, unreadCount: unread, senderId: sender)
    }

    /// What Sygnal's APNs pushkin sends for a notification with a `type` (Pigeon's always has one): the ids at the top
    /// level, the unread count as the badge.
    @Test func apnsFullPayload() throws {
        let push = try PigeonPush(payload: payload("""
            {"aps": {"alert": {"loc-key": "MSG_FROM_USER", "loc-args": ["alice"]}, "badge": 3},
             "room_id": "\(Self.room)", "event_id": "\(Self.event)"}
            """))
        #expect(push == (try expected(unread: 3, sender: nil)))
        #expect(push.conversationId == Self.room.lowercased(), "ids are kept lowercase, as the server writes them")
    }

    /// Sygnal's `event_id_only` APNs format (with a `default_payload` of the app's beside it).
    @Test func apnsEventIdOnly() throws {
        let push = try PigeonPush(payload: payload("""
            {"room_id": "\(Self.room)", "event_id": "\(Self.event)", "unread_count": 7, "missed_calls": 0, "app": "chat",
             "aps": {"content-available": 1}}
            """))
        #expect(push == (try expected(unread: 7, sender: nil)))
    }

    /// An FCM data message: every value a string (Android's `RemoteMessage.data`, or the iOS Firebase SDK's userInfo
    /// with its own keys beside).
    @Test func fcmData() throws {
        let data: [String: String] = [
            "event_id": Self.event, "type": "pigeon.message", "sender": "alice", "room_id": Self.room, "prio": "high", "unread": "12",
            "missed_calls": "None", "room_name": "None", "gcm.message_id": "1700000000000000",
        ]
        #expect(try PigeonPush(payload: data) == (try expected(unread: 12)))
        #expect(try PigeonPush(payload: ["data": data]) == (try expected(unread: 12)), "the data object itself, nested")
        var noCounts = data
        noCounts["unread"] = "null"
        #expect(try PigeonPush(payload: noCounts).unreadCount == nil)
    }

    /// The gateway's notification as the server sends it (a web app's service worker, a custom gateway).
    @Test func gatewayNotification() throws {
        let json = """
            {"notification": {"event_id": "\(Self.event)", "room_id": "\(Self.room)", "type": "pigeon.message", "sender": "alice",
             "prio": "high", "counts": {"unread": 2}, "devices": [{"app_id": "com.example.chat", "pushkey": "k", "pushkey_ts": 1}]}}
            """
        #expect(try PigeonPush(payload: payload(json)) == (try expected(unread: 2)))
        let inner = try #require(try payload(json)["notification"] as? [AnyHashable: Any])
        #expect(try PigeonPush(payload: inner) == (try expected(unread: 2)))
    }

    @Test func absentFieldsAreOptional() throws {
        let push = try PigeonPush(payload: ["room_id": Self.room, "event_id": NSNull()])
        #expect(push.serverId == nil && push.unreadCount == nil && push.senderId == nil)
        #expect(try PigeonPush(payload: ["room_id": Self.room, "event_id": ""]).serverId == nil)
    }

    /// Anything that is not a Pigeon push, or holds a malformed field, is refused with a message that says which.
    @Test func malformedPayloadsAreRefusedSayingWhy() throws {
        let cases: [([AnyHashable: Any], String)] = [
            (["aps": ["alert": "from another service"], "campaign": "x"], "not a Pigeon push"),
            ([:], "not a Pigeon push"),
            (["room_id": "!abc:matrix.org", "event_id": Self.event], "not a Pigeon conversation id"),
            (["room_id": Self.room, "event_id": "$event:matrix.org"], "not a Pigeon message id"),
            (["room_id": 42], "room_id is not a string"),
            (["room_id": Self.room, "event_id": 7], "event_id is not a string"),
            (["room_id": Self.room, "unread": "many"], "unread is not a whole number"),
            (["room_id": Self.room, "unread_count": -1], "unread_count is not a whole number"),
            (["room_id": Self.room, "unread_count": 1.5], "unread_count is not a whole number"),
            (["room_id": Self.room, "aps": ["badge": "x"]], "badge is not a whole number"),
        ]
        for (payload, reason) in cases {
            do {
                let push = try PigeonPush(payload: payload)
                Issue.record("accepted \(payload) as \(push)")
            } catch let error as PigeonClientError {
                #expect(error.code == .invalidArgument)
                #expect(error.message.contains(reason), "\(error.message) should say \(reason)")
            }
        }
        #expect(throws: PigeonClientError.self) { try PigeonPush(conversationId: Self.room, unreadCount: -3) }
    }
}
