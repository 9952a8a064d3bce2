import Foundation
import PigeonKit
import PigeonProtocol
import Testing

/// The incremental `text/event-stream` parser the SSE transport uses: WHATWG field rules, every line ending, and
/// bytes split anywhere (inside a CRLF, inside a UTF-8 character).
@Suite struct ServerSentEventParserTests {
    /// An event's fields, comparable in expectations.
    struct Parsed: Equatable, CustomStringConvertible {
        var id: String?
        var event: String?
        var data: String

        init(id: String? = nil, event: String? = nil, data: String) {
            self.id = id
            self.event = event
            self.data = data
        }

        init(_ event: ServerSentEventParser.Event) {
            self.init(id: event.id, event: event.event, data: event.data)
        }

        var description: String { "id: \(id ?? "nil"), event: \(event ?? "nil"), data: \(data.debugDescription)" }
    }

    static func parse(_ text: String) -> [Parsed] {
        var parser = ServerSentEventParser()
        return parser.feed(Array(text.utf8)).map(Parsed.init)
    }

    /// Feeds `bytes` in chunks of the given sizes (cycled), collecting every event.
    static func parse(_ bytes: [UInt8], chunks sizes: [Int]) -> [Parsed] {
        var parser = ServerSentEventParser()
        var events: [Parsed] = []
        var start = 0
        var index = 0
        while start < bytes.count {
            let end = min(start + sizes[index % sizes.count], bytes.count)
            events += parser.feed(bytes[start..<end]).map(Parsed.init)
            start = end
            index += 1
        }
        return events
    }

    @Test func anEventWithIdTypeAndData() {
        let events = Self.parse("id: 1a2b-42\nevent: message.new\ndata: {\"type\":\"message.new\"}\n\n")
        #expect(events == [Parsed(id: "1a2b-42", event: "message.new", data: "{\"type\":\"message.new\"}")])
    }

    @Test func fieldsMayComeInAnyOrder() {
        let events = Self.parse("data: x\nevent: receipt\nid: 7\n\n")
        #expect(events == [Parsed(id: "7", event: "receipt", data: "x")])
    }

    @Test func dataAloneMakesAnEventWithoutIdOrType() {
        #expect(Self.parse("data: hello\n\n") == [Parsed(data: "hello")])
    }

    @Test func multiLineDataIsJoinedWithLineFeeds() {
        #expect(Self.parse("data: first\ndata: second\ndata: third\n\n") == [Parsed(data: "first\nsecond\nthird")])
    }

    @Test func emptyDataLinesKeepTheirPlace() {
        #expect(Self.parse("data\n\n") == [Parsed(data: "")], "a data field without a colon has an empty value")
        #expect(Self.parse("data:\n\n") == [Parsed(data: "")])
        #expect(Self.parse("data:\ndata:\n\n") == [Parsed(data: "\n")])
        #expect(Self.parse("data: a\ndata:\ndata: b\n\n") == [Parsed(data: "a\n\nb")])
    }

    @Test func aFieldWithoutASpaceAfterTheColon() {
        #expect(Self.parse("id:9\nevent:typing\ndata:{}\n\n") == [Parsed(id: "9", event: "typing", data: "{}")])
    }

    @Test func onlyOneSpaceAfterTheColonIsRemoved() {
        #expect(Self.parse("data:  indented\n\n") == [Parsed(data: " indented")])
        #expect(Self.parse("data: trailing \n\n") == [Parsed(data: "trailing ")])
        #expect(Self.parse("data: a: b\n\n") == [Parsed(data: "a: b")], "only the first colon splits")
    }

    @Test func commentsAreIgnored() {
        #expect(Self.parse(": connected\n\n").isEmpty)
        #expect(Self.parse(":\n\n").isEmpty)
        #expect(Self.parse(": keep-alive\n\n: keep-alive\n\n").isEmpty)
        let events = Self.parse("id: 3\n: a comment between fields\ndata: x\n:another\n\n")
        #expect(events == [Parsed(id: "3", data: "x")])
    }

    @Test func unknownFieldsAndRetryAreIgnored() {
        #expect(Self.parse("retry: 1000\n\n").isEmpty)
        #expect(Self.parse("retry: 1000\nfoo: bar\ndata: x\nDATA: y\n\n") == [Parsed(data: "x")], "field names are case-sensitive")
    }

    @Test func anEventWithoutDataIsNotDispatched() {
        #expect(Self.parse("event: typing\n\n").isEmpty)
        #expect(Self.parse("id: 4\nevent: typing\n\n").isEmpty)
    }

    @Test func theTypeOfAnEventWithoutDataDoesNotLeakIntoTheNext() {
        #expect(Self.parse("event: typing\n\ndata: x\n\n") == [Parsed(data: "x")])
    }

    @Test func theTypeIsResetAfterEachEvent() {
        let events = Self.parse("event: receipt\ndata: 1\n\ndata: 2\n\n")
        #expect(events == [Parsed(event: "receipt", data: "1"), Parsed(data: "2")])
    }

    @Test func theLastEventIdCarriesOverAsWHATWGSays() {
        // The last event ID buffer persists until an `id:` field changes it (an empty `id:` clears it).
        let events = Self.parse("id: 5\ndata: a\n\ndata: b\n\nid: 6\ndata: c\n\nid\ndata: d\n\n")
        #expect(events == [Parsed(id: "5", data: "a"), Parsed(id: "5", data: "b"), Parsed(id: "6", data: "c"), Parsed(id: "", data: "d")])
    }

    @Test func anIdContainingNULIsIgnored() {
        #expect(Self.parse("id: 1\ndata: a\n\nid: 2\u{0}3\ndata: b\n\n") == [Parsed(id: "1", data: "a"), Parsed(id: "1", data: "b")])
    }

    @Test func nothingIsDispatchedBeforeTheBlankLine() {
        var parser = ServerSentEventParser()
        #expect(parser.feed(Array("id: 1\nevent: receipt\ndata: x\n".utf8)).isEmpty)
        #expect(parser.feed(Array("data: y".utf8)).isEmpty, "a line without its end is not yet a field")
        let events = parser.feed(Array("\n\n".utf8)).map(Parsed.init)
        #expect(events == [Parsed(id: "1", event: "receipt", data: "x\ny")])
    }

    @Test func severalEventsInOneFeed() {
        let events = Self.parse("data: 1\n\ndata: 2\n\n\n\ndata: 3\n\n")
        #expect(events == [Parsed(data: "1"), Parsed(data: "2"), Parsed(data: "3")], "extra blank lines dispatch nothing")
    }

    @Test(arguments: ["\n", "\r", "\r\n"])
    func everyLineEndingIsALineEnd(_ end: String) {
        let text = ["id: 8", "event: message.stored", ": comment", "data: a", "data: b", "", "data: c", "", ""].joined(separator: end)
        #expect(Self.parse(text) == [Parsed(id: "8", event: "message.stored", data: "a\nb"), Parsed(id: "8", data: "c")])
    }

    @Test func lineEndingsMayBeMixed() {
        let events = Self.parse("data: a\r\ndata: b\rdata: c\n\r\n")
        #expect(events == [Parsed(data: "a\nb\nc")])
    }

    @Test func twoCarriageReturnsAreABlankLine() {
        #expect(Self.parse("data: x\r\r") == [Parsed(data: "x")])
    }

    @Test func aCRLFSplitAcrossTwoFeedsIsOneLineEnd() {
        var parser = ServerSentEventParser()
        #expect(parser.feed(Array("data: x\r".utf8)).isEmpty)
        // Were the LF taken for a second, blank line, "x" would be dispatched on its own here.
        #expect(parser.feed(Array("\ndata: y\r".utf8)).isEmpty)
        let events = parser.feed(Array("\n\r".utf8)).map(Parsed.init)
        #expect(events == [Parsed(data: "x\ny")])
        #expect(parser.feed(Array("\n".utf8)).isEmpty, "the LF of the final CRLF is not another line")
    }

    @Test func aCRAtTheEndOfAFeedFollowedByAnotherCR() {
        var parser = ServerSentEventParser()
        #expect(parser.feed(Array("data: x\r".utf8)).isEmpty)
        #expect(parser.feed(Array("\r".utf8)).map(Parsed.init) == [Parsed(data: "x")])
    }

    @Test func aCRAtTheEndOfAFeedFollowedByText() {
        var parser = ServerSentEventParser()
        #expect(parser.feed(Array("data: x\r".utf8)).isEmpty)
        #expect(parser.feed(Array("data: y\r\r".utf8)).map(Parsed.init) == [Parsed(data: "x\ny")])
    }

    @Test func multiByteCharactersSplitAnywhereSurvive() {
        let text = "id: é-1\nevent: message.new\ndata: {\"body\":\"héllo 🕊️ 你好 — ok\"}\n\n"
        let bytes = Array(text.utf8)
        let whole = Self.parse(text)
        #expect(whole == [Parsed(id: "é-1", event: "message.new", data: "{\"body\":\"héllo 🕊️ 你好 — ok\"}")])
        for split in 0...bytes.count {
            var parser = ServerSentEventParser()
            var events = parser.feed(bytes[..<split]).map(Parsed.init)
            events += parser.feed(bytes[split...]).map(Parsed.init)
            #expect(events == whole, "split at byte \(split)")
        }
    }

    @Test func aFourByteCharacterFedOneByteAtATime() {
        let bytes = Array("data: 🕊\n\n".utf8)
        #expect(Self.parse(bytes, chunks: [1]) == [Parsed(data: "🕊")])
    }

    @Test func anyByteSequenceTypeCanBeFed() {
        var parser = ServerSentEventParser()
        let events = parser.feed("data: from a string view\n\n".utf8).map(Parsed.init)
        #expect(events == [Parsed(data: "from a string view")])
    }

    // MARK: A realistic Pigeon stream

    /// What `GET /v1/events` writes (Routes+Streams.swift): a `retry:` and a comment first, then events with `id:`
    /// (the cursor, absent on typing), `event:` (the type) and one `data:` line of JSON, and keep-alive comments.
    static let pigeonStream: String = {
        let conversation = "0190f1a2-7b3c-7d4e-8f50-a1b2c3d4e5f6"
        let message =
            #"{"serverId":"0190f1a2-7b3c-7d4e-8f50-000000000001","clientMessageId":"3f2b7c1e-9d4a-4e8b-a6f1-2c3d4e5f6a7b","#
            + #""conversationId":"\#(conversation)","seq":1,"senderId":"9b8a7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d","#
            + #""senderDeviceId":"d-1","type":"text","body":"Grüß dich 👋 — ça va ? 你好","clientTimestamp":1718000000000,"#
            + #""acceptedAt":1718000000010,"storedAt":1718000000020}"#
        let events: [(id: String?, type: String, json: String)] = [
            ("e1-41", "message.new", #"{"type":"message.new","cursor":"e1-41","message":\#(message)}"#),
            (
                "e1-42", "message.stored",
                #"{"type":"message.stored","cursor":"e1-42","conversationId":"\#(conversation)","serverId":"s-2","clientMessageId":"c-2","seq":2,"storedAt":1718000000030,"recipientsOnline":0}"#
            ),
            (nil, "typing", #"{"type":"typing","conversationId":"\#(conversation)","userId":"u-2","active":true}"#),
            (
                "e1-43", "receipt",
                #"{"type":"receipt","cursor":"e1-43","conversationId":"\#(conversation)","userId":"u-2","kind":"delivered","upToSeq":2,"at":1718000000040}"#
            ),
            (
                "e1-44", "message.failed",
                #"{"type":"message.failed","cursor":"e1-44","conversationId":"\#(conversation)","serverId":"s-3","clientMessageId":"c-3","error":{"code":"internal","message":"store kept failing"}}"#
            ),
        ]
        var text = "retry: 1000\n: connected\n\n"
        for (index, event) in events.enumerated() {
            if let id = event.id { text += "id: \(id)\n" }
            text += "event: \(event.type)\ndata: \(event.json)\n\n"
            if index == 2 { text += ": keep-alive\n\n" }
        }
        return text
    }()

    @Test func aWholePigeonStreamParsesIntoItsEvents() throws {
        let events = Self.parse(Self.pigeonStream)
        #expect(events.map(\.event) == ["message.new", "message.stored", "typing", "receipt", "message.failed"])
        // typing carries no id of its own: the parser keeps the last one, as WHATWG says (PigeonKit reads the cursor
        // from the JSON, not from `id:`).
        #expect(events.map(\.id) == ["e1-41", "e1-42", "e1-42", "e1-43", "e1-44"])
        let decoder = JSONDecoder()
        var types: [String] = []
        for event in events {
            let frame = try decoder.decode(ServerFrame.self, from: Data(event.data.utf8))
            guard case .event(let serverEvent) = frame else {
                Issue.record("not an event: \(frame)")
                continue
            }
            types.append(serverEvent.type)
            #expect(serverEvent.type == event.event)
            if let id = event.id, event.event != "typing" { #expect(serverEvent.cursor == id) }
        }
        #expect(types.count == 5)
        if case .event(.messageNew(_, let message)) = try decoder.decode(ServerFrame.self, from: Data(events[0].data.utf8)) {
            #expect(message.body == "Grüß dich 👋 — ça va ? 你好")
        } else {
            Issue.record("the first event must be message.new")
        }
    }

    @Test(arguments: [[1], [2], [3], [7], [64], [1, 2, 3, 5, 8, 13], [4096]])
    func aPigeonStreamChunkedAnyWayGivesTheSameEvents(chunks: [Int]) {
        let bytes = Array(Self.pigeonStream.utf8)
        let whole = Self.parse(Self.pigeonStream)
        #expect(whole.count == 5)
        #expect(Self.parse(bytes, chunks: chunks) == whole)
    }

    @Test(arguments: ["\r\n", "\r"])
    func aPigeonStreamWithOtherLineEndingsChunkedByteByByteGivesTheSameEvents(_ end: String) {
        let converted = Self.pigeonStream.replacingOccurrences(of: "\n", with: end)
        let whole = Self.parse(Self.pigeonStream)
        #expect(Self.parse(Array(converted.utf8), chunks: [1]) == whole)
        #expect(Self.parse(converted) == whole)
    }
}
