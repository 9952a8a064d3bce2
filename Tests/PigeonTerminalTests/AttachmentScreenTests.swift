import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTerminal
import Testing

/// Attachments as the terminal shows them: "📎 name (size)" under a message's text (or alone when it has none), in
/// a list's preview, with sizes for people.
@Suite struct AttachmentScreenTests {
    /// A message carrying `attachments` (name, size), through PigeonKit's Codable form.
    func message(_ localId: Int64, _ body: String, from sender: String = "bob", attachments: [(String, Int64)], status: MessageStatus = .stored)
        -> PigeonMessage
    {
        let fields: [String: Any] = [
            "localId": localId, "conversationId": "01a1ff83-5dbe-7c5c-9b54-4fe5f9e6aa9b", "clientMessageId": "c-\(localId)", "seq": localId,
            "senderId": sender, "senderDeviceId": "d-\(sender)", "type": "text", "body": body, "clientTimestamp": 1_763_700_000_000,
            "storedAt": 1_763_700_000_000, "isOutgoing": sender == "alice", "status": status.rawValue,
            "attachments": attachments.map { ["id": "a-\($0.0)", "name": $0.0, "size": $0.1, "contentType": "application/octet-stream"] },
        ]
        return try! JSONDecoder().decode(PigeonMessage.self, from: JSONSerialization.data(withJSONObject: fields))
    }

    func render(_ messages: [PigeonMessage], width: Int = 70) -> RenderedScreen {
        var state = ChatScreenState(userId: "alice", title: "bob")
        state.messages = messages
        state.connection = .online
        state.timeZone = TimeZone(identifier: "UTC")!
        return ChatScreen.render(state, width: width, height: 16)
    }

    @Test func sizesAreWrittenForPeople() {
        let table: [(Int64, String)] = [
            (0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (12_345, "12.3 kB"), (99_960, "100 kB"), (532_000, "532 kB"),
            (999_600, "1.0 MB"), (1_234_567, "1.2 MB"), (25 * 1024 * 1024, "26.2 MB"), (250_000_000, "250 MB"), (3_500_000_000, "3.5 GB"),
        ]
        for (bytes, text) in table { #expect(MessageFormat.size(bytes) == text, "\(bytes)") }
    }

    @Test func eachAttachmentIsALineUnderTheText() {
        let screen = render([message(1, "the photos", attachments: [("beach.jpg", 1_234_567), ("notes.txt", 532)])])
        let text = screen.text
        let body = try! #require(text.firstIndex { $0.contains("the photos") })
        #expect(text[body + 1].contains("📎 beach.jpg (1.2 MB)"))
        #expect(text[body + 2].contains("📎 notes.txt (532 B)"))
        #expect(screen.lines[body + 1].style(of: "📎 beach.jpg")?.foreground == .cyan)
    }

    @Test func aMessageWithOnlyAFileShowsItOnItsFirstLineWithTheTick() {
        let screen = render([message(1, "", from: "alice", attachments: [("voice.m4a", 48_000)], status: .delivered)])
        let line = try! #require(screen.text.first { $0.contains("📎 voice.m4a (48.0 kB)") })
        #expect(line.contains("04:40 you"), "the file is the message's first line: \(line)")
        #expect(line.hasSuffix("✓✓"))
    }

    @Test func aLongNameIsCutToTheScreen() {
        let screen = render([message(1, "x", attachments: [(String(repeating: "long-name-", count: 20) + ".pdf", 10)])], width: 40)
        #expect(screen.lines.allSatisfy { $0.width <= 40 })
        #expect(screen.text.contains { $0.contains("📎 long-name-") })
    }

    @Test func aPreviewNamesTheAttachmentsAfterTheText() {
        #expect(MessageFormat.preview(of: message(1, "hi", attachments: [("a.png", 2000)]), me: "alice") == "hi 📎 a.png (2.0 kB)")
        #expect(MessageFormat.preview(of: message(1, "", attachments: [("a.png", 2000)]), me: "alice") == "📎 a.png (2.0 kB)")
    }
}
