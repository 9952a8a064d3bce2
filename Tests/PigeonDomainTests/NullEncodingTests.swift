import Foundation
import PigeonProtocol
import Testing

@testable import PigeonServer

/// Every field of the wire contract is always present (docs/API.md): an absent optional goes out as `null`, and an
/// answer without the key (an older server) still decodes, as `nil`. The expected texts are what the hand-written
/// `encode(to:)`s wrote before ``NullEncoded`` replaced them, byte for byte.
@Suite struct NullEncodingTests {
    /// Foundation's encoder as the HTTP answers use it (``JSONBody``): sorted keys. Without them the order of an
    /// object's keys is not the order they were written in but changes from process to process (Foundation keeps them
    /// in a dictionary), so only sorted output can be compared as text.
    static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
        try JSONDecoder().decode(type, from: Data(json.utf8))
    }

    static let member = ConversationMember(userId: "alice", deliveredSeq: 0, readSeq: 0)
    static let memberJSON = #"{"deliveredSeq":0,"joinedSeq":0,"membership":"joined","readSeq":0,"role":"member","userId":"alice"}"#

    @Test func conversation() throws {
        let conversation = Conversation(id: "k", name: nil, createdAt: 1, lastSeq: 0, members: [Self.member])
        #expect(
            try Self.json(conversation)
                == #"{"createdAt":1,"id":"k","kind":"group","lastMessage":null,"lastSeq":0,"members":["# + Self.memberJSON
                + #"],"name":null,"unreadCount":0,"updatedAt":1}"#)
        // An answer of a server before API 1.1: no kind, updatedAt, lastMessage nor unreadCount; no name either.
        let old = try Self.decode(Conversation.self, #"{"id":"k","createdAt":1,"lastSeq":0,"members":["# + Self.memberJSON + "]}")
        #expect(old == conversation)
        #expect(old.name == nil && old.lastMessage == nil)
        let named = Conversation(id: "k", name: "team", createdAt: 1, lastSeq: 0, members: [Self.member])
        #expect(try Self.decode(Conversation.self, try Self.json(named)) == named)
    }

    @Test func conversationList() throws {
        #expect(try Self.json(ConversationList(conversations: [])) == #"{"conversations":[],"hasMore":false,"nextBefore":null}"#)
        let old = try Self.decode(ConversationList.self, #"{"conversations":[]}"#)
        #expect(old == ConversationList(conversations: []))
        #expect(try Self.decode(ConversationList.self, #"{"conversations":[],"hasMore":true,"nextBefore":"5:k"}"#).nextBefore == "5:k")
    }

    @Test func renameConversationRequest() throws {
        #expect(try Self.json(RenameConversationRequest(name: nil)) == #"{"name":null}"#)
        #expect(try Self.json(RenameConversationRequest(name: "team")) == #"{"name":"team"}"#)
        #expect(try Self.decode(RenameConversationRequest.self, #"{"name":null}"#).name == nil)
        // The one type where the key is required: an empty object is a mistake, not a removal.
        #expect(throws: DecodingError.self) { try Self.decode(RenameConversationRequest.self, "{}") }
    }

    @Test func deviceInfo() throws {
        let device = DeviceInfo(deviceId: "d", deviceName: nil, createdAt: 1, lastSeenAt: 2, current: true)
        #expect(try Self.json(device) == #"{"createdAt":1,"current":true,"deviceId":"d","deviceName":null,"lastSeenAt":2}"#)
        #expect(try Self.decode(DeviceInfo.self, #"{"deviceId":"d","createdAt":1,"lastSeenAt":2,"current":true}"#) == device)
    }

    @Test func pushRegistrationInfo() throws {
        let info = PushRegistrationInfo(kind: .fcm, appId: "a", pushkey: "p", data: nil, updatedAt: 1, lastPushedAt: nil, pending: false)
        #expect(
            try Self.json(info)
                == #"{"appId":"a","data":null,"kind":"fcm","lastPushedAt":null,"pending":false,"pushkey":"p","updatedAt":1}"#)
        #expect(try Self.decode(PushRegistrationInfo.self, #"{"kind":"fcm","appId":"a","pushkey":"p","updatedAt":1,"pending":false}"#) == info)
        let full = PushRegistrationInfo(kind: .fcm, appId: "a", pushkey: "p", data: ["k": .string("v")], updatedAt: 1, lastPushedAt: 3, pending: true)
        #expect(try Self.decode(PushRegistrationInfo.self, try Self.json(full)) == full)
    }

    static let noLatency = LatencyQuantiles([0, 0], minus: [0, 0])
    static let noLatencyJSON = #"{"count":0,"p50":null,"p90":null,"p99":null}"#

    @Test func latencyQuantiles() throws {
        #expect(try Self.json(Self.noLatency) == Self.noLatencyJSON)
        #expect(try Self.decode(LatencyQuantiles.self, #"{"count":0}"#) == Self.noLatency)
        let some = LatencyQuantiles([0, 4], minus: [0, 0])
        #expect(some.p50 != nil)
        #expect(try Self.decode(LatencyQuantiles.self, try Self.json(some)) == some)
    }

    @Test func adminStats() throws {
        let stats = AdminStats(
            serverTime: 3, nodeId: "n", startedAt: 1,
            totals: AdminStats.Totals(accepted: 0, stored: 0, delivered: 0, deadLettered: 0, retried: 0, rejected: 0),
            rates: AdminStats.Rates(accepted: 0, stored: 0, delivered: 0, deadLettered: 0), bufferDepth: 0, openStreams: OpenStreams([:]),
            deadLetters: nil, nodes: [], latency: RecentLatency(windowSeconds: 0, acceptToStored: Self.noLatency, storedToDelivered: Self.noLatency),
            sampleIntervalSeconds: 1, samples: [])
        let latency = #"{"acceptToStored":"# + Self.noLatencyJSON + #","storedToDelivered":"# + Self.noLatencyJSON + #","windowSeconds":0}"#
        let json =
            #"{"attachments":null,"bufferDepth":0,"deadLetters":null,"latency":"# + latency + #","nodeId":"n","nodes":[],"openStreams":{"sse":0,"websocket":0},"#
            + #""rates":{"accepted":0,"deadLettered":0,"delivered":0,"stored":0},"sampleIntervalSeconds":1,"samples":[],"serverTime":3,"#
            + #""startedAt":1,"totals":{"accepted":0,"deadLettered":0,"delivered":0,"rejected":0,"retried":0,"stored":0}}"#
        #expect(try Self.json(stats) == json)
        let decoded = try Self.decode(AdminStats.self, json.replacingOccurrences(of: #""deadLetters":null,"#, with: "").replacingOccurrences(of: #""attachments":null,"#, with: ""))
        #expect(decoded.deadLetters == nil)
        #expect(decoded.latency.acceptToStored == Self.noLatency)
    }

    @Test func conversationDelivery() throws {
        let device = ConversationDelivery.Device(deviceId: "d", name: nil, lastSeenAt: 2, online: false)
        let deviceJSON = #"{"deviceId":"d","lastSeenAt":2,"name":null,"online":false}"#
        #expect(try Self.json(device) == deviceJSON)
        #expect(try Self.decode(ConversationDelivery.Device.self, #"{"deviceId":"d","lastSeenAt":2,"online":false}"#).name == nil)
        let delivery = ConversationDelivery(
            conversationId: "k", kind: .group, name: nil, createdAt: 1, updatedAt: 1, lastSeq: 0,
            members: [
                ConversationDelivery.Member(
                    userId: "alice", role: .owner, joinedSeq: 0, deliveredSeq: 0, readSeq: 0, undelivered: 0, behind: false, devices: [device])
            ],
            behind: [], serverTime: 4)
        #expect(
            try Self.json(delivery)
                == #"{"behind":[],"conversationId":"k","createdAt":1,"kind":"group","lastSeq":0,"members":[{"behind":false,"deliveredSeq":0,"#
                + #""devices":["# + deviceJSON + #"],"joinedSeq":0,"readSeq":0,"role":"owner","undelivered":0,"userId":"alice"}],"name":null,"#
                + #""serverTime":4,"updatedAt":1}"#)
        let old = try Self.decode(
            ConversationDelivery.self,
            #"{"conversationId":"k","kind":"group","createdAt":1,"updatedAt":1,"lastSeq":0,"members":[],"behind":[],"serverTime":4}"#)
        #expect(old.name == nil)
    }

    /// Unsorted, as the event payloads are written (``EventPayload``): the same keys, `null` included.
    @Test func unsortedOutputHasTheSameNulls() throws {
        let conversation = Conversation(id: "k", name: nil, createdAt: 1, lastSeq: 0, members: [])
        let object = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(conversation)) as? [String: Any]
        #expect(Set(object?.keys.map { $0 } ?? []) == ["id", "kind", "name", "createdAt", "lastSeq", "updatedAt", "members", "lastMessage", "unreadCount"])
        #expect(object?["name"] is NSNull)
        #expect(object?["lastMessage"] is NSNull)
    }
}
