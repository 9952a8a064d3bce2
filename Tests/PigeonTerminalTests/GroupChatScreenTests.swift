import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTerminal
import Testing

/// The chat screen's group and lifecycle lines: member changes in their place, "(edited)" and "message deleted" on
/// the original line, and the per-member tick of one's own messages in a group.
@Suite struct GroupChatScreenTests {
    /// A message with the API 1.1 fields PigeonKit fills in, through its Codable form.
    func message(
        _ localId: Int64, _ body: String, from sender: String = "alice", type: String = "text", status: MessageStatus = .stored,
        editedAt: Int64? = nil, deletedAt: Int64? = nil, recipients: RecipientCounts? = nil
    ) -> PigeonMessage {
        var fields: [String: Any] = [
            "localId": localId, "conversationId": "01a1ff83-5dbe-7c5c-9b54-4fe5f9e6aa9b", "clientMessageId": "c-\(localId)", "seq": localId,
            "senderId": sender, "senderDeviceId": "d-\(sender)", "type": type, "body": body, "clientTimestamp": 1_763_700_000_000,
            "storedAt": 1_763_700_000_000, "isOutgoing": sender == "alice", "status": status.rawValue,
        ]
        if let editedAt { fields["editedAt"] = editedAt }
        if let deletedAt { fields["deletedAt"] = deletedAt }
        if let recipients { fields["recipients"] = ["members": recipients.members, "delivered": recipients.delivered, "read": recipients.read] }
        return try! JSONDecoder().decode(PigeonMessage.self, from: JSONSerialization.data(withJSONObject: fields))
    }

    func change(_ change: MembersChange) -> String {
        String(decoding: try! JSONEncoder().encode(change), as: UTF8.self)
    }

    func render(_ messages: [PigeonMessage], group: Bool = true) -> RenderedScreen {
        var state = ChatScreenState(userId: "alice", title: "Crew")
        state.messages = messages
        state.connection = .online
        state.timeZone = TimeZone(identifier: "UTC")!
        state.isGroup = group
        return ChatScreen.render(state, width: 70, height: 16)
    }

    @Test func memberChangesAreLinesOfTheirOwnInTheConversationsOrder() {
        let screen = render([
            message(1, "hi all", from: "bob"),
            message(2, change(MembersChange(action: .added, userIds: ["carol", "dave"], by: "bob")), from: "bob", type: ServerMessageType.members),
            message(3, change(MembersChange(action: .left, userIds: ["dave"], by: "dave")), from: "dave", type: ServerMessageType.members),
            message(4, change(MembersChange(action: .renamed, userIds: [], name: "Trip", by: "alice")), type: ServerMessageType.members),
            message(5, change(MembersChange(action: .role, userIds: ["carol"], role: .admin, by: "alice")), type: ServerMessageType.members),
            message(6, change(MembersChange(action: .removed, userIds: ["alice"], by: "bob")), from: "bob", type: ServerMessageType.members),
        ])
        let texts = ["hi all", "bob added carol and dave", "dave left", "you renamed the group to Trip", "you made carol an admin", "bob removed you"]
        let rows = texts.map { text in screen.text.firstIndex { $0.contains(text) } }
        #expect(rows.allSatisfy { $0 != nil } && rows == rows.sorted { $0! < $1! }, "\(screen.text.joined(separator: "\n"))")
        #expect(!screen.text.contains { $0.contains("{") }, "no JSON on screen")
        #expect(!screen.text.contains { $0.contains("✓") }, "a member change has no tick")
    }

    @Test func anEditedMessageSaysSoAndADeletedOneShowsNoText() {
        let screen = render([
            message(1, "meet at the station", from: "bob", editedAt: 5),
            message(2, "", from: "bob", deletedAt: 6),
            message(3, "on my way", editedAt: 7),
        ])
        #expect(screen.text.contains { $0.contains("meet at the station (edited)") })
        #expect(screen.text.contains { $0.contains("bob   message deleted") || $0.contains("bob message deleted") })
        #expect(screen.lines.first { $0.text.contains("message deleted") }?.style(of: "message deleted")?.foreground == .gray)
        let own = screen.text.first { $0.contains("on my way") }
        #expect(own?.contains("on my way (edited)") == true && own?.hasSuffix("✓") == true, "\(own ?? "")")
    }

    @Test func ownMessagesInAGroupCountTheMembersWhoHaveThem() {
        let screen = render([
            message(1, "none yet", recipients: RecipientCounts(members: 3, delivered: 0, read: 0)),
            message(2, "some have it", recipients: RecipientCounts(members: 3, delivered: 2, read: 0)),
            message(3, "some read it", recipients: RecipientCounts(members: 3, delivered: 2, read: 1)),
            message(4, "all have it", status: .delivered, recipients: RecipientCounts(members: 3, delivered: 3, read: 2)),
            message(5, "all read it", status: .read, recipients: RecipientCounts(members: 3, delivered: 3, read: 3)),
            message(6, "waiting", status: .pending),
        ])
        func line(_ text: String) -> StyledLine { screen.lines.first { $0.text.contains(text) }! }
        #expect(line("none yet").text.hasSuffix(" ✓"))
        #expect(line("some have it").text.hasSuffix("✓✓ 2/3"))
        #expect(line("some read it").text.hasSuffix("✓✓ 2/3 read 1/3"))
        #expect(line("all have it").text.hasSuffix("✓✓ read 2/3"))
        #expect(line("all read it").text.hasSuffix("✓✓") && line("all read it").style(of: "✓✓")?.foreground == .brightBlue)
        #expect(line("waiting").text.hasSuffix("⏰"))
        let widths = ["none yet", "some have it", "some read it", "all have it", "all read it", "waiting"].map { TextWidth.of(line($0).text) }
        #expect(Set(widths).count == 1, "right-aligned in one column: \(widths)")
        // A direct conversation keeps the plain ticks.
        let direct = render([message(1, "some have it", recipients: RecipientCounts(members: 1, delivered: 0, read: 0))], group: false)
        #expect(direct.text.first { $0.contains("some have it") }?.hasSuffix(" ✓") == true)
    }

    /// README's group (`pigeon new bob carol`: alice's messages have two recipients) shows the ticks the screen draws.
    @Test func readmeShowsTheGroupTicksTheScreenDraws() throws {
        let screen = render([
            message(1, "one of them has it", recipients: RecipientCounts(members: 2, delivered: 1, read: 0)),
            message(2, "both have it, one read it", recipients: RecipientCounts(members: 2, delivered: 2, read: 1)),
        ])
        let readme = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("README.md"), encoding: .utf8)
        for (text, tick) in [("one of them has it", "✓✓ 1/2"), ("both have it, one read it", "✓✓ read 1/2")] {
            let shown = screen.text.first { $0.contains(text) } ?? ""
            #expect(shown.hasSuffix(tick), "\(shown)")
            #expect(readme.contains("`\(tick)`"), "README shows \(tick)")
        }
    }
}
