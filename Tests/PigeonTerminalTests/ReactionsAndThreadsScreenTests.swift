import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTerminal
import Testing

/// The chat screen's API 1.2 lines: reactions under a message (the viewer's own highlighted), a reply's quote above
/// it, a root's thread summary, thread replies kept out of the conversation, and an open thread.
@Suite struct ReactionsAndThreadsScreenTests {
    /// A message with the API 1.2 fields PigeonKit fills in, through its Codable form.
    func message(
        _ localId: Int64, _ body: String, from sender: String = "bob", reactions: [Reaction] = [], preview: ReplyPreview? = nil,
        threadRoot: String? = nil, thread: ThreadSummary? = nil, deletedAt: Int64? = nil
    ) -> PigeonMessage {
        var fields: [String: Any] = [
            "localId": localId, "conversationId": "01a1ff83-5dbe-7c5c-9b54-4fe5f9e6aa9b", "clientMessageId": "c-\(localId)", "seq": localId,
            "serverId": "s-\(localId)", "senderId": sender, "senderDeviceId": "d-\(sender)", "type": "text", "body": body,
            "clientTimestamp": 1_763_700_000_000, "storedAt": 1_763_700_000_000, "isOutgoing": sender == "alice", "status": "stored",
            "reactions": reactions.map { ["key": $0.key, "count": $0.count, "me": $0.me] },
        ]
        if let preview {
            fields["replyPreview"] = [
                "serverId": preview.serverId, "senderId": preview.senderId, "type": preview.type, "body": preview.body, "deleted": preview.deleted,
                "unavailable": preview.unavailable,
            ]
            fields["replyTo"] = ["serverId": preview.serverId]
        }
        if let threadRoot { fields["threadRoot"] = ["serverId": threadRoot] }
        if let thread { fields["thread"] = ["replyCount": thread.replyCount, "lastReplyAt": thread.lastReplyAt, "lastReplySenders": thread.lastReplySenders] }
        if let deletedAt { fields["deletedAt"] = deletedAt }
        return try! JSONDecoder().decode(PigeonMessage.self, from: JSONSerialization.data(withJSONObject: fields))
    }

    func render(_ messages: [PigeonMessage], threadRoot: Int64? = nil) -> RenderedScreen {
        var state = ChatScreenState(userId: "alice", title: "bob")
        state.messages = messages
        state.connection = .online
        state.timeZone = TimeZone(identifier: "UTC")!
        state.threadRoot = threadRoot
        return ChatScreen.render(state, width: 70, height: 16)
    }

    @Test func reactionsShowUnderTheMessageWithTheViewersOwnHighlighted() throws {
        let screen = render([
            message(1, "lunch?", reactions: [Reaction(key: "👍", count: 2, me: true), Reaction(key: "❤️", count: 1, me: false)]),
            message(2, "nothing here"),
        ])
        let row = try #require(screen.text.firstIndex { $0.contains("lunch?") })
        let reactions = screen.lines[row + 1]
        #expect(reactions.text.trimmingCharacters(in: .whitespaces) == "👍 2  ❤️ 1", "\(screen.text.joined(separator: "\n"))")
        #expect(reactions.style(of: "👍 2")?.inverse == true && reactions.style(of: "👍 2")?.bold == true, "yours")
        #expect(reactions.style(of: "❤️ 1")?.inverse == false, "someone else's")
        let body = try #require(screen.lines[row].text.range(of: "lunch?"))
        let thumbs = try #require(reactions.text.range(of: "👍"))
        #expect(TextWidth.of(String(reactions.text[..<thumbs.lowerBound])) == TextWidth.of(String(screen.lines[row].text[..<body.lowerBound])), "under the body")
        let next = try #require(screen.text.firstIndex { $0.contains("nothing here") })
        #expect(next == row + 2, "a message without reactions has no reaction line")
        #expect(!render([message(1, "", reactions: [Reaction(key: "👍", count: 1, me: false)], deletedAt: 5)]).text.contains { $0.contains("👍") })
    }

    @Test func aReplyShowsItsQuoteAboveIt() throws {
        let quote = ReplyPreview(serverId: "s-1", senderId: "bob", type: "text", body: "see you at the station at noon, under the big clock", deleted: false)
        let screen = render([message(1, quote.body), message(2, "on my way", from: "alice", preview: quote)])
        let row = try #require(screen.text.firstIndex { $0.contains("on my way") })
        #expect(screen.text[row - 1].trimmingCharacters(in: .whitespaces).hasPrefix("↪ bob: see you at the station"), "\(screen.text.joined(separator: "\n"))")
        #expect(screen.lines[row - 1].style(of: "↪ bob")?.foreground == .gray)
        let mine = ReplyPreview(serverId: "s-1", senderId: "alice", type: "text", body: "", deleted: true)
        let deleted = render([message(2, "what did you say?", preview: mine)])
        #expect(deleted.text.contains { $0.contains("↪ you: message deleted") })
        let unavailable = render([message(2, "what was that?", preview: quote.unavailableForm)])
        #expect(unavailable.text.contains { $0.contains("↪ bob: message unavailable") }, "\(unavailable.text.joined(separator: "\n"))")
        var small = ChatScreenState(userId: "alice", title: "bob")
        small.messages = [message(2, "ok", from: "alice", preview: quote)]
        let narrow = ChatScreen.render(small, width: 30, height: 8)
        #expect(narrow.text.allSatisfy { TextWidth.of($0) <= 30 } && narrow.text.contains { $0.contains("…") }, "a long quote is cut to one line")
    }

    @Test func aRootSaysHowManyRepliesItHasAndRepliesStayInTheirThread() throws {
        let root = message(1, "weekend plans?", from: "alice", thread: ThreadSummary(replyCount: 2, lastReplyAt: 5, lastReplySenders: ["carol", "bob"]))
        let replies = [message(2, "hiking", threadRoot: "s-1"), message(3, "beach", from: "carol", threadRoot: "s-1")]
        let conversation = render([root] + replies + [message(4, "unrelated")])
        #expect(conversation.text.contains { $0.contains("💬 2 replies · carol, bob") }, "\(conversation.text.joined(separator: "\n"))")
        #expect(!conversation.text.contains { $0.contains("hiking") || $0.contains("beach") }, "replies are in the thread, not the conversation")
        #expect(conversation.text.contains { $0.contains("unrelated") })

        let thread = render([root] + replies, threadRoot: 1)
        let rows = ["Thread", "weekend plans?", "hiking", "beach"].map { text in thread.text.firstIndex { $0.contains(text) } }
        #expect(rows.allSatisfy { $0 != nil } && rows == rows.sorted { $0! < $1! }, "\(thread.text.joined(separator: "\n"))")
        #expect(!thread.text.contains { $0.contains("💬") }, "the open thread lists its replies instead")
        #expect(thread.text[thread.text.count - 2].contains("/back"), "the status line says how to go back")
    }
}
