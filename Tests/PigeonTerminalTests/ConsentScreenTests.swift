import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTerminal
import Testing

/// The chat screen's invitation line (API.md 1.2): "carol invited you to Crew: /accept or /decline" under the header,
/// how many more wait, and what an invitation's own screen says before it is accepted.
@Suite struct ConsentScreenTests {
    func state(_ invitations: [ChatScreenState.Invitation], isInvitation: Bool = false) -> ChatScreenState {
        var state = ChatScreenState(userId: "alice", title: "Crew")
        state.connection = .online
        state.timeZone = TimeZone(identifier: "UTC")!
        state.invitations = invitations
        state.isInvitation = isInvitation
        return state
    }

    @Test func anInvitationShowsUnderTheHeaderWithHowToAnswerIt() {
        let crew = ChatScreenState.Invitation(conversationId: "c-1", text: "carol invited you to Crew")
        let screen = ChatScreen.render(state([crew], isInvitation: true), width: 70, height: 12)
        #expect(screen.text.count == 12)
        #expect(screen.text[1].hasPrefix(" carol invited you to Crew: /accept or /decline"), "\(screen.text)")
        #expect(screen.text.contains { $0.contains("You are invited here: /accept joins") }, "\(screen.text)")
        #expect(!screen.text.contains { $0.contains("No messages yet") })
        #expect(screen.lines[1].spans.first?.style.inverse == true, "a banner, like the offline one")

        let more = ChatScreen.render(
            state([crew, .init(conversationId: "c-2", text: "dave invited you to bob, dave")]), width: 90, height: 12)
        #expect(more.text[1].contains("carol invited you to Crew: /accept or /decline · 1 more: pigeon invites"), "\(more.text)")
        #expect(!more.text.contains { $0.contains("dave invited you") }, "one line: /accept and /decline answer the first")
        #expect(more.text.contains { $0.contains("No messages yet") }, "the open conversation is no invitation")

        let none = ChatScreen.render(state([]), width: 70, height: 12)
        #expect(!none.text.contains { $0.contains("invited") })
        #expect(ChatScreen.invitationLine(state([])) == nil)
    }

    @Test func theLineNamesWhoInvitedAndTheConversation() throws {
        /// An invitation as PigeonKit reads it from its database, through its Codable form.
        func conversation(name: String?, invitedBy: String?) throws -> PigeonConversation {
            func member(_ user: String, _ role: String, _ membership: String) -> [String: Any] {
                ["userId": user, "role": role, "membership": membership, "joinedSeq": 0, "deliveredSeq": 0, "readSeq": 0]
            }
            var fields: [String: Any] = [
                "id": "c-1", "kind": "group", "createdAt": 1, "lastSeq": 0, "contiguousSeq": 0, "readSeq": 0, "unreadCount": 0,
                "members": [member("carol", "owner", "joined"), member("alice", "member", "invited"), member("bob", "member", "joined")],
                "membership": "invited",
            ]
            if let name { fields["name"] = name }
            if let invitedBy { fields["invitedBy"] = invitedBy }
            return try JSONDecoder().decode(PigeonConversation.self, from: JSONSerialization.data(withJSONObject: fields))
        }
        #expect(MessageFormat.invitation(try conversation(name: "Crew", invitedBy: "carol"), me: "alice") == "carol invited you to Crew")
        #expect(MessageFormat.invitation(try conversation(name: nil, invitedBy: "carol"), me: "alice") == "carol invited you to carol, bob")
        #expect(MessageFormat.invitation(try conversation(name: "Crew", invitedBy: nil), me: "alice") == "You are invited to Crew")
    }
}
