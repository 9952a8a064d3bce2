import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTerminal
import Testing

/// A message as PigeonKit would hand it over (built through its Codable form: the SDK has no public initialiser).
func message(
    _ localId: Int64, _ body: String, from sender: String = "alice", status: MessageStatus = .delivered, seq: Int64? = nil,
    at time: Int64 = 1_763_700_000_000, failure: String? = nil, me: String = "alice"
) -> PigeonMessage {
    var fields: [String: Any] = [
        "localId": localId, "conversationId": "01a1ff83-5dbe-7c5c-9b54-4fe5f9e6aa9b", "clientMessageId": "c-\(localId)",
        "senderId": sender, "senderDeviceId": "d-\(sender)", "type": "text", "body": body, "clientTimestamp": time,
        "isOutgoing": sender == me, "status": status.rawValue,
    ]
    if let seq { fields["seq"] = seq }
    if status >= .stored && status != .failed { fields["seq"] = seq ?? localId; fields["storedAt"] = time }
    if let failure { fields["failure"] = ["code": "payload_too_large", "message": failure] }
    let data = try! JSONSerialization.data(withJSONObject: fields)
    return try! JSONDecoder().decode(PigeonMessage.self, from: data)
}

func chat(_ messages: [PigeonMessage], connection: ConnectionState = .online) -> ChatScreenState {
    var state = ChatScreenState(userId: "alice", title: "bob")
    state.messages = messages
    state.connection = connection
    state.timeZone = TimeZone(identifier: "UTC")!
    return state
}

@Suite struct ChatScreenTests {
    @Test func everyStatusHasItsTickAndReadIsBlue() {
        let statuses: [MessageStatus] = [.pending, .sending, .stored, .delivered, .read, .failed]
        let messages = statuses.enumerated().map { message(Int64($0.offset + 1), "m\($0.offset)", status: $0.element, failure: $0.element == .failed ? "too big" : nil) }
        let screen = ChatScreen.render(chat(messages), width: 60, height: 20)
        func line(_ body: String) -> StyledLine { screen.lines.first { $0.text.contains(" \(body) ") || $0.text.hasSuffix(" \(body)") || $0.text.contains(" \(body)  ") }! }
        #expect(line("m0").text.hasSuffix("⏰"))
        #expect(Ticks.spinner.contains(String(line("m1").text.last!)))
        #expect(line("m2").text.hasSuffix("✓") && !line("m2").text.hasSuffix("✓✓"))
        #expect(line("m3").text.hasSuffix("✓✓"))
        #expect(line("m3").style(of: "✓✓")?.foreground == .gray)
        #expect(line("m4").text.hasSuffix("✓✓"))
        #expect(line("m4").style(of: "✓✓")?.foreground == .brightBlue)
        #expect(line("m5").text.hasSuffix("⚠️"))
        #expect(screen.text.contains { $0.contains("not sent (↑ selects, Ctrl-R retries): too big") })
        // The ticks line up in one column, whatever their width.
        let widths = (0..<6).map { TextWidth.of(line("m\($0)").text) }
        #expect(Set(widths).count == 1, "\(widths)")
    }

    @Test func othersMessagesHaveNoTickAndShowTheSender() {
        let screen = ChatScreen.render(chat([message(1, "hello alice", from: "bob")]), width: 50, height: 10)
        let line = screen.text.first { $0.contains("hello alice") }!
        #expect(line.contains("04:40 bob"))
        #expect(!line.contains("✓") && !line.contains("⏰"))
        #expect(screen.text.contains { $0.contains("Fri 21 Nov 2025") })
    }

    @Test func theOfflineBannerShowsWhileNotConnected() {
        for connection in [ConnectionState.offline, .connecting] {
            let screen = ChatScreen.render(chat([], connection: connection), width: 70, height: 10)
            #expect(screen.lines[1].text.contains(ChatScreen.offlineBanner))
            #expect(screen.lines[1].style(of: "No connection")?.inverse == true)
        }
        var switchedOff = chat([], connection: .offline)
        switchedOff.networkEnabled = false
        #expect(ChatScreen.render(switchedOff, width: 90, height: 10).lines[1].text.contains("/online reconnects"))
        let online = ChatScreen.render(chat([]), width: 70, height: 10)
        #expect(!online.text.contains { $0.contains(ChatScreen.offlineBanner) })
        #expect(online.lines[0].text.contains("● online"))
    }

    @Test func theScreenIsExactlyTheTerminalsSizeWhateverTheText() {
        let hostile = message(1, "\u{1B}[2J\u{1B}[31mred 你好世界 " + String(repeating: "long ", count: 40), from: "bob")
        for (width, height) in [(20, 5), (40, 12), (120, 40)] {
            let screen = ChatScreen.render(chat([hostile, message(2, "reply ⏰", status: .pending)]), width: width, height: height)
            #expect(screen.lines.count == height)
            for line in screen.lines {
                #expect(line.width <= width, "\(line.text)")
                #expect(!line.text.contains("\u{1B}"))
            }
            #expect(screen.cursorRow == height - 1)
        }
    }

    @Test func scrollingShowsOlderLinesAndSaysHowManyAreBelow() {
        let messages = (1...30).map { message(Int64($0), "message \($0)", from: $0 % 2 == 0 ? "alice" : "bob") }
        var state = chat(messages)
        let bottom = ChatScreen.render(state, width: 60, height: 12)
        #expect(bottom.text.contains { $0.contains("message 30") })
        #expect(!bottom.text.contains { $0.contains("message 1 ") || $0.hasSuffix("message 1") })
        state.scrollOffset = bottom.maxScrollOffset
        let top = ChatScreen.render(state, width: 60, height: 12)
        #expect(top.text.contains { $0.contains("message 1") })
        #expect(!top.text.contains { $0.contains("message 30") })
        #expect(top.lines[top.lines.count - 2].text.contains("more lines below"))
        state.scrollOffset = 10_000
        #expect(ChatScreen.render(state, width: 60, height: 12) == top)
    }

    @Test func selectionSearchTypingAndTheInputLine() {
        var state = chat([message(1, "first", from: "bob"), message(2, "second", status: .failed, failure: "rejected")])
        state.selected = 2
        state.input = LineEditor("draft")
        state.typing = ["bob"]
        let screen = ChatScreen.render(state, width: 60, height: 10)
        #expect(screen.text.contains { $0.hasPrefix("›") && $0.contains("second") })
        #expect(screen.text.contains { $0.contains("not sent (Ctrl-R retries): rejected") })
        #expect(screen.lines[8].text.contains("bob is typing…"))
        #expect(screen.lines[9].text == "> draft")
        #expect(screen.cursorColumn == 7)

        state.search = ChatScreenState.Search(query: LineEditor("sec"), results: nil)
        let typingQuery = ChatScreen.render(state, width: 60, height: 10)
        #expect(typingQuery.lines[9].text == "search: sec")
        state.search = ChatScreenState.Search(query: LineEditor("sec"), results: [state.messages[1]])
        let results = ChatScreen.render(state, width: 60, height: 10)
        #expect(results.text.contains { $0.contains("Search \"sec\": 1 result") })
        #expect(!results.text.contains { $0.contains("first") })
    }

    @Test func theDemoShowsTwoPanesAndTheNarration() {
        var bob = ChatScreenState(userId: "bob", title: "alice")
        bob.messages = [message(1, "hi bob", from: "alice", me: "bob")]
        bob.connection = .offline
        let lines = DemoScreen.render(
            title: "Step 2/5", left: chat([message(1, "hi bob", status: .stored)]), right: bob, narration: "Bob is offline.", width: 81, height: 16)
        #expect(lines.count == 16)
        #expect(lines[0].text.contains("Step 2/5"))
        #expect(lines[2].text.contains("│") && lines[2].text.contains(ChatScreen.offlineBanner.prefix(10)))
        #expect(lines.contains { $0.text.contains("hi bob") && $0.text.contains("✓│") })
        #expect(lines.last!.text.contains("Bob is offline."))
        for line in lines { #expect(line.width <= 81) }
    }
}
