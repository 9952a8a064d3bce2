import Foundation
import PigeonDomain
import PigeonProtocol
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// The hand-written JSON of the hot paths must decode exactly like Foundation's.
@Suite struct JSONTextTests {
    @Test(arguments: ["plain", "quote \" backslash \\ slash /", "line\nbreak\r\ttab", "\u{0}\u{1}\u{1f}", "émoji 🕊️ ünïcode", ""])
    func stringsRoundTrip(_ value: String) throws {
        var json = JSONText()
        json.beginObject()
        json.member("value", value)
        json.member("number", Int64(-42))
        json.member("flag", true)
        json.endObject()
        struct Decoded: Decodable { var value: String; var number: Int64; var flag: Bool }
        let decoded = try JSONDecoder().decode(Decoded.self, from: Data(json.string.utf8))
        #expect(decoded.value == value)
        #expect(decoded.number == -42)
        #expect(decoded.flag)
    }

    /// The receipt payload is written by hand since it left Foundation's encoder: it decodes as the event it says.
    @Test(arguments: [ReceiptKind.delivered, .read])
    func receiptPayloadDecodesAsTheEvent(_ kind: ReceiptKind) throws {
        let receipt = ReceiptEvent(conversationId: "conv \"1\"", userId: "alice\u{1}", kind: kind, upToSeq: 41, at: 1_700_000_000_123)
        let event = StoredEvent(
            id: 9, type: "receipt", userId: "bob", deviceId: nil, excludedDeviceId: nil, payload: try EventPayload().receipt(receipt))
        guard case .receipt(let cursor, let decoded) = try JSONDecoder().decode(ServerEvent.self, from: Data(event.frame(cursor: "c9").utf8)) else {
            Issue.record("not a receipt event")
            return
        }
        #expect(cursor == "c9")
        #expect(decoded == receipt)
    }

    @Test func messageNewPayloadDecodesAsTheEvent() throws {
        let message = Message(
            serverId: "s", clientMessageId: "c", conversationId: "k", seq: 7, senderId: "alice", senderDeviceId: "d", type: "text",
            body: "hi \"there\"\n", clientTimestamp: 1, acceptedAt: 2, storedAt: 3)
        let event = StoredEvent(id: 9, type: "message.new", userId: "bob", deviceId: nil, excludedDeviceId: nil, payload: EventPayload().messageNew(message))
        let decoded = try JSONDecoder().decode(ServerEvent.self, from: Data(event.frame(cursor: "e-9").utf8))
        #expect(decoded == .messageNew(cursor: "e-9", message: message))
    }

    @Test func ackFrameDecodes() throws {
        let response = SendMessageResponse(serverId: "s", clientMessageId: "c", status: .stored, acceptedAt: 5, seq: 3)
        let frame = try JSONDecoder().decode(ServerFrame.self, from: Data(StreamController.ackFrame(response).utf8))
        #expect(frame == .ack(AckFrame(response)))
    }
}
