import AsyncHTTPClient
import Foundation
import NIOHTTP1
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md 1.1 "Group chats: members, roles, leaving", through the real HTTP, WebSocket and sync stack.
@Suite struct GroupChatTests {
    /// The `pigeon.members` change a message carries.
    static func change(_ message: Message) throws -> MembersChange {
        #expect(message.type == "pigeon.members")
        return try JSONDecoder().decode(MembersChange.self, from: Data(message.body.utf8))
    }

    @Test func anAddedMemberSeesTheConversationFromTheMessageThatAddedIt() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let group = try await client.createConversation(alice, members: ["bob"], name: "trip")
            try await client.sendAccepted(alice, to: group.id, body: "before carol")
            _ = try await client.waitForCount(alice, group.id, 1)
            let carolStream = try await TestWebSocket.connect(port: client.port, token: carol.token)
            defer { Task { await carolStream.close() } }
            let carolCursor = try await client.headCursor(carol)

            let answer = try await client.request(
                .POST, "/v1/conversations/\(group.id)/members", token: alice.token, body: "{\"userIds\":[\"carol\",\"bob\",\"carol\"]}")
            #expect(answer.status == 200, "\(answer.text)")
            let after = try answer.decode(Conversation.self)
            #expect(after.lastSeq == 2)
            let carolMember = try #require(after.members.first { $0.userId == "carol" })
            #expect(carolMember.role == .member)
            #expect(carolMember.joinedSeq == 2)
            #expect(carolMember.deliveredSeq == 1 && carolMember.readSeq == 1, "watermarks start just below the join")
            #expect(after.members.map(\.userId) == ["alice", "bob", "carol"], "bob was a member already: ignored")

            // The change is a message with the next seq, in everyone's history and stream.
            let history = try await client.allMessages(bob, group.id)
            #expect(history.map(\.seq) == [1, 2])
            let added = try Self.change(history[1])
            #expect(added == MembersChange(action: .added, userIds: ["carol"], role: .member, by: "alice"))
            #expect(history[1].senderId == "alice" && history[1].senderDeviceId == alice.deviceId)
            // Carol: nothing older than her joinedSeq, in history (both directions) and in her stream.
            #expect(try await client.allMessages(carol, group.id).map(\.seq) == [2])
            #expect(try await client.history(carol, group.id, query: "before=3&limit=10").messages.map(\.seq) == [2])
            let page = try await client.history(carol, group.id, query: "before=3&limit=1")
            #expect(page.messages.map(\.seq) == [2] && !page.hasMore, "nothing older for her, so no more")
            let joined = await carolStream.firstEvent { if case .messageNew(_, let m) = $0 { m.conversationId == group.id } else { false } }
            guard case .messageNew(_, let joinedMessage)? = joined else { Issue.record("carol got no pigeon.members message"); return }
            #expect(joinedMessage.seq == 2 && joinedMessage.type == "pigeon.members")
            try await client.sendAccepted(bob, to: group.id, body: "welcome")
            let welcome = await carolStream.firstEvent { if case .messageNew(_, let m) = $0 { m.seq == 3 } else { false } }
            #expect(welcome != nil, "a new member gets the messages after its join live")
            let synced = try await client.sync(carol, cursor: carolCursor).events.compactMap { event -> Int64? in
                if case .messageNew(_, let m) = event, m.conversationId == group.id { m.seq } else { nil }
            }
            #expect(synced == [2, 3])
            // Her conversation: visible, her unread count has bob's message (not the server's own).
            let seen = try await client.conversation(carol, group.id)
            #expect(seen.unreadCount == 1)
            #expect(seen.lastMessage?.seq == 3)
            #expect(try await client.conversations(carol).map(\.id) == [group.id])
        }
    }

    @Test func aRemovedMemberGetsItsRemovalThenNothingAndA404Everywhere() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            _ = try await client.register("carol")
            let group = try await client.createConversation(alice, members: ["bob", "carol"], name: "team")
            try await client.sendAccepted(bob, to: group.id, body: "hi")
            _ = try await client.waitForCount(alice, group.id, 1)
            let bobCursor = try await client.headCursor(bob)
            let bobStream = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobStream.close() } }

            let answer = try await client.request(.DELETE, "/v1/conversations/\(group.id)/members/bob", token: alice.token)
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try answer.decode(Conversation.self).members.map(\.userId) == ["alice", "carol"])
            let removal = await bobStream.firstEvent { if case .messageNew(_, let m) = $0 { m.seq == 2 } else { false } }
            guard case .messageNew(_, let removalMessage)? = removal else { Issue.record("bob did not get his removal"); return }
            #expect(try Self.change(removalMessage) == MembersChange(action: .removed, userIds: ["bob"], by: "alice"))
            try await client.sendAccepted(alice, to: group.id, body: "after bob")
            _ = try await client.waitForCount(alice, group.id, 3)
            #expect(try await client.typing(alice, group.id, active: true).status == 204)
            let later = await bobStream.inbox.drain(for: .milliseconds(500)).compactMap(\.event)
            #expect(later.allSatisfy { $0.conversationIdIfAny != group.id }, "nothing more of the conversation: \(later)")
            // After a reconnect with an old cursor: up to the removal, nothing after.
            let replay = try await client.sync(bob, cursor: bobCursor).events.compactMap { event -> Int64? in
                if case .messageNew(_, let m) = event, m.conversationId == group.id { m.seq } else { nil }
            }
            #expect(replay == [2])
            // Every route of the conversation answers 404.
            try await Self.expectEveryRoute(client, bob, group.id, status: 404, code: .notFound)
            #expect(try await client.conversations(bob).isEmpty)
        }
    }

    @Test func anOutsiderGets404OnEveryRoute() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let mallory = try await client.register("mallory")
            let group = try await client.createConversation(alice, members: ["bob"], name: "g")
            try await Self.expectEveryRoute(client, mallory, group.id, status: 404, code: .notFound)
            #expect(try await client.conversation(alice, group.id).lastSeq == 0, "nothing changed")
        }
    }

    /// Every route of a conversation, answered `status` for `device`.
    static func expectEveryRoute(_ client: PigeonTestClient, _ device: TestDevice, _ id: String, status: Int, code: ErrorCode) async throws {
        let target = newId()
        let routes: [(HTTPMethod, String, String?)] = [
            (.GET, "/v1/conversations/\(id)", nil),
            (.GET, "/v1/conversations/\(id)/messages?after=0", nil),
            (.POST, "/v1/conversations/\(id)/messages", "{\"clientMessageId\":\"\(newId())\",\"type\":\"text\",\"body\":\"x\",\"clientTimestamp\":1}"),
            (.POST, "/v1/conversations/\(id)/receipts", "{\"kind\":\"read\",\"upToSeq\":1}"),
            (.POST, "/v1/conversations/\(id)/typing", "{\"active\":true}"),
            (.PATCH, "/v1/conversations/\(id)", "{\"name\":\"mine\"}"),
            (.POST, "/v1/conversations/\(id)/members", "{\"userIds\":[\"\(device.userId)\"]}"),
            (.DELETE, "/v1/conversations/\(id)/members/alice", nil),
            (.DELETE, "/v1/conversations/\(id)/members/\(device.userId)", nil),
            (.PATCH, "/v1/conversations/\(id)/members/alice", "{\"role\":\"member\"}"),
            (.POST, "/v1/conversations/\(id)/messages/\(target)/edit", "{\"clientMessageId\":\"\(newId())\",\"body\":\"x\",\"clientTimestamp\":1}"),
            (.POST, "/v1/conversations/\(id)/messages/\(target)/delete", "{\"clientMessageId\":\"\(newId())\",\"clientTimestamp\":1}"),
        ]
        for (method, path, body) in routes {
            expectError(try await client.request(method, path, token: device.token, body: body), status, code, "\(method) \(path)")
        }
    }

    @Test func rolesDecideWhoMayChangeWhatAndARefusalChangesNothing() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let group = try await client.createConversation(alice, members: ["bob", "carol"], name: "g")
            let base = "/v1/conversations/\(group.id)"
            // A plain member: no adding, removing others, renaming or role changes.
            expectError(try await client.request(.POST, "\(base)/members", token: carol.token, body: "{\"userIds\":[\"dave\"]}"), 403, .forbidden, "member adds")
            expectError(try await client.request(.DELETE, "\(base)/members/bob", token: carol.token), 403, .forbidden, "member removes")
            expectError(try await client.request(.PATCH, base, token: carol.token, body: "{\"name\":\"x\"}"), 403, .forbidden, "member renames")
            expectError(
                try await client.request(.PATCH, "\(base)/members/bob", token: carol.token, body: "{\"role\":\"admin\"}"), 403, .forbidden, "member sets a role")
            // The owner makes bob an admin; an admin adds and removes members and renames, but not the owner nor roles.
            let promoted = try await client.request(.PATCH, "\(base)/members/bob", token: alice.token, body: "{\"role\":\"admin\"}")
            #expect(promoted.status == 200, "\(promoted.text)")
            #expect(try promoted.decode(Conversation.self).members.first { $0.userId == "bob" }?.role == .admin)
            expectError(try await client.request(.DELETE, "\(base)/members/alice", token: bob.token), 403, .forbidden, "admin removes the owner")
            expectError(
                try await client.request(.PATCH, "\(base)/members/carol", token: bob.token, body: "{\"role\":\"admin\"}"), 403, .forbidden, "admin sets a role")
            let renamed = try await client.request(.PATCH, base, token: bob.token, body: "{\"name\":\"renamed\"}")
            #expect(renamed.status == 200, "\(renamed.text)")
            #expect(try renamed.decode(Conversation.self).name == "renamed")
            #expect(try await client.request(.POST, "\(base)/members", token: bob.token, body: "{\"userIds\":[\"dave\"]}").status == 200)
            #expect(try await client.request(.DELETE, "\(base)/members/dave", token: bob.token).status == 200)
            // What no role may do.
            expectError(
                try await client.request(.PATCH, "\(base)/members/bob", token: alice.token, body: "{\"role\":\"owner\"}"), 400, .invalidRequest, "a second owner")
            expectError(
                try await client.request(.POST, "\(base)/members", token: alice.token, body: "{\"userIds\":[\"erin\"],\"role\":\"owner\"}"), 400,
                .invalidRequest, "adding an owner")
            expectError(try await client.request(.DELETE, "\(base)/members/zed", token: alice.token), 404, .notFound, "removing a non-member")
            expectError(try await client.request(.POST, "\(base)/members", token: alice.token, body: "{\"userIds\":[]}"), 400, .invalidRequest, "nobody")
            expectError(
                try await client.request(.POST, "\(base)/members", token: alice.token, body: "{\"userIds\":[\"bad user\"]}"), 400, .invalidRequest, "bad id")
            expectError(try await client.request(.PATCH, base, token: alice.token, body: "{}"), 400, .invalidRequest, "rename without name")
            expectError(try await client.request(.PATCH, "\(base)/members/bob", token: alice.token, body: "{\"role\":\"boss\"}"), 400, .invalidRequest, "role")
            // The refusals changed nothing: three changes so far (role, renamed, added dave, removed dave).
            let now = try await client.conversation(alice, group.id)
            #expect(now.lastSeq == 4)
            #expect(try await client.allMessages(alice, group.id).map { try Self.change($0).action } == [.role, .renamed, .added, .removed])
            #expect(now.members.map(\.userId) == ["alice", "bob", "carol"])
            // Changes that change nothing write nothing.
            #expect(try await client.request(.PATCH, base, token: alice.token, body: "{\"name\":\"renamed\"}").status == 200)
            #expect(try await client.request(.POST, "\(base)/members", token: alice.token, body: "{\"userIds\":[\"carol\"]}").status == 200)
            #expect(try await client.request(.PATCH, "\(base)/members/bob", token: alice.token, body: "{\"role\":\"admin\"}").status == 200)
            #expect(try await client.conversation(alice, group.id).lastSeq == 4)
        }
    }

    /// Roles rank owner > admin > member: an admin cannot grant admin by any route (the probe: it removed a member,
    /// re-added it with `"role": "admin"`, and the new admin removed it), nor remove another admin or the owner.
    @Test func anAdminNeitherGrantsAdminByAnyRouteNorRemovesItsEqualsOrTheOwner() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            _ = try await client.register("carol")
            let dave = try await client.register("dave")
            let group = try await client.createConversation(alice, members: ["bob", "carol", "dave"], name: "g")
            let base = "/v1/conversations/\(group.id)"
            for admin in ["bob", "dave"] {
                #expect(try await client.request(.PATCH, "\(base)/members/\(admin)", token: alice.token, body: "{\"role\":\"admin\"}").status == 200)
            }
            let before = try await client.conversation(alice, group.id)
            // The way round PATCH: remove carol, re-add her as admin.
            #expect(try await client.request(.DELETE, "\(base)/members/carol", token: bob.token).status == 200)
            expectError(
                try await client.request(.POST, "\(base)/members", token: bob.token, body: "{\"userIds\":[\"carol\"],\"role\":\"admin\"}"), 403,
                .forbidden, "an admin adds an admin")
            expectError(
                try await client.request(.POST, "\(base)/members", token: bob.token, body: "{\"userIds\":[\"erin\"],\"role\":\"admin\"}"), 403,
                .forbidden, "an admin adds a new user as admin")
            expectError(try await client.request(.DELETE, "\(base)/members/dave", token: bob.token), 403, .forbidden, "an admin removes an admin")
            expectError(
                try await client.request(.PATCH, "\(base)/members/dave", token: bob.token, body: "{\"role\":\"member\"}"), 403, .forbidden,
                "an admin demotes an admin")
            expectError(try await client.request(.DELETE, "\(base)/members/alice", token: dave.token), 403, .forbidden, "an admin removes the owner")
            // The refusals changed nothing: only carol's removal was written.
            let after = try await client.conversation(alice, group.id)
            #expect(after.lastSeq == before.lastSeq + 1)
            #expect(after.members.map(\.userId) == ["alice", "bob", "dave"])
            #expect(after.members.map(\.role) == [.owner, .admin, .admin])
            // The owner grants admin by either route and removes an admin; an admin still adds members as members.
            #expect(try await client.request(.POST, "\(base)/members", token: bob.token, body: "{\"userIds\":[\"carol\"]}").status == 200)
            let added = try await client.request(.POST, "\(base)/members", token: alice.token, body: "{\"userIds\":[\"erin\"],\"role\":\"admin\"}")
            #expect(added.status == 200, "\(added.text)")
            #expect(try added.decode(Conversation.self).members.first { $0.userId == "erin" }?.role == .admin)
            #expect(try await client.request(.DELETE, "\(base)/members/dave", token: alice.token).status == 200)
            let final = try await client.conversation(alice, group.id)
            #expect(final.members.map(\.userId) == ["alice", "bob", "carol", "erin"])
            #expect(final.members.map(\.role) == [.owner, .admin, .member, .admin])
        }
    }

    /// A userId in the path may come percent-encoded (`encodeURIComponent("bob@example.com")` is `bob%40example.com`):
    /// it is the same member (schemathesis found it refused 400).
    @Test func aPercentEncodedUserIdInThePathIsTheMember() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let group = try await client.createConversation(alice, members: ["bob@example.com", "carol.x@example.com"], name: "g")
            let base = "/v1/conversations/\(group.id)/members"
            let promoted = try await client.request(.PATCH, "\(base)/bob%40example.com", token: alice.token, body: "{\"role\":\"admin\"}")
            #expect(promoted.status == 200, "\(promoted.text)")
            #expect(try promoted.decode(Conversation.self).members.first { $0.userId == "bob@example.com" }?.role == .admin)
            let removed = try await client.request(.DELETE, "\(base)/carol.x%40example%2Ecom", token: alice.token)
            #expect(removed.status == 200, "\(removed.text)")
            #expect(try await client.conversation(alice, group.id).members.map(\.userId) == ["alice", "bob@example.com"])
            expectError(try await client.request(.DELETE, "\(base)/bob%20x", token: alice.token), 400, .invalidRequest, "a space is still not a userId")
            expectError(try await client.request(.DELETE, "\(base)/bob%zz", token: alice.token), 400, .invalidRequest, "malformed percent-encoding")
        }
    }

    @Test func aDirectConversationNeverGainsMembersAndTheLimitHolds() async throws {
        // The strangers limit is lifted: it would refuse the 998 strangers first.
        try await withTestServer(configure: { $0.appBackend.strangerAddsPerHour = 0 }) { client in
            let alice = try await client.register("alice")
            let direct = try await client.createConversation(alice, members: ["bob"])
            #expect(direct.kind == .direct)
            expectError(
                try await client.request(.POST, "/v1/conversations/\(direct.id)/members", token: alice.token, body: "{\"userIds\":[\"carol\"]}"), 400,
                .invalidRequest, "adding to a direct conversation")
            expectError(
                try await client.request(.PATCH, "/v1/conversations/\(direct.id)", token: alice.token, body: "{\"name\":\"x\"}"), 400, .invalidRequest,
                "naming a direct conversation")
            #expect(try await client.conversation(alice, direct.id).members.count == 2)
            // maxMembers (1,000 by default) counts everyone after the change.
            let group = try await client.createConversation(alice, members: (1...998).map { "user\($0)" }, name: "big")
            expectError(
                try await client.request(
                    .POST, "/v1/conversations/\(group.id)/members", token: alice.token, body: "{\"userIds\":[\"late1\",\"late2\"]}"), 400,
                .invalidRequest, "over maxMembers")
            #expect(try await client.conversation(alice, group.id).members.count == 999, "nothing added")
            #expect(try await client.request(.POST, "/v1/conversations/\(group.id)/members", token: alice.token, body: "{\"userIds\":[\"late1\"]}").status == 200)
        }
    }

    @Test func theOwnerLeavingHandsOwnershipOnAndTheLastOneClosesIt() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let group = try await client.createConversation(alice, members: ["bob", "carol"], name: "g")
            let base = "/v1/conversations/\(group.id)"
            #expect(try await client.request(.PATCH, "\(base)/members/carol", token: alice.token, body: "{\"role\":\"admin\"}").status == 200)
            let left = try await client.request(.DELETE, "\(base)/members/alice", token: alice.token)
            #expect(left.status == 200, "\(left.text)")
            let afterLeaving = try left.decode(Conversation.self)
            #expect(afterLeaving.members.map(\.userId) == ["bob", "carol"])
            #expect(afterLeaving.members.first { $0.userId == "carol" }?.role == .owner, "the admin, not the longer-standing... member bob")
            expectError(try await client.request(.GET, base, token: alice.token), 404, .notFound, "after leaving")
            let messages = try await client.allMessages(carol, group.id)
            #expect(try messages.map { try Self.change($0) }.suffix(2) == [
                MembersChange(action: .left, userIds: ["alice"], by: "alice"),
                MembersChange(action: .role, userIds: ["carol"], role: .owner, by: "alice"),
            ])
            // Carol (now the owner) may set roles; bob leaves, then carol: the conversation is gone.
            #expect(try await client.request(.PATCH, "\(base)/members/bob", token: carol.token, body: "{\"role\":\"admin\"}").status == 200)
            #expect(try await client.request(.DELETE, "\(base)/members/bob", token: bob.token).status == 200)
            let last = try await client.request(.DELETE, "\(base)/members/carol", token: carol.token)
            #expect(last.status == 200, "\(last.text)")
            #expect(try last.decode(Conversation.self).members.isEmpty)
            for device in [alice, bob, carol] {
                expectError(try await client.request(.GET, base, token: device.token), 404, .notFound, "closed, \(device.userId)")
            }
        }
    }

    @Test func aMemberOnlyOwnerLeavingPassesOwnershipToTheLongestStandingMember() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let dave = try await client.register("dave")
            let group = try await client.createConversation(alice, members: ["zoe"], name: "g")
            // dave joins later than zoe (a founder), so zoe has stood longer though "dave" sorts first.
            #expect(try await client.request(.POST, "/v1/conversations/\(group.id)/members", token: alice.token, body: "{\"userIds\":[\"dave\"]}").status == 200)
            let left = try await client.request(.DELETE, "/v1/conversations/\(group.id)/members/alice", token: alice.token)
            #expect(try left.decode(Conversation.self).members.first { $0.role == .owner }?.userId == "zoe")
            #expect(try await client.conversation(dave, group.id).members.first { $0.userId == "dave" }?.role == .member)
        }
    }

    @Test func theWebSocketCarriesEveryDeviceTheChangesAndTheActorsOwnDeviceToo() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let alicePhone = try await client.register("alice", existing: alice)
            let group = try await client.createConversation(alice, members: ["bob"], name: "g")
            let own = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let phone = try await TestWebSocket.connect(port: client.port, token: alicePhone.token)
            defer { Task { await own.close(); await phone.close() } }
            #expect(try await client.request(.PATCH, "/v1/conversations/\(group.id)", token: alice.token, body: "{\"name\":null}").status == 200)
            for socket in [own, phone] {
                let event = await socket.firstEvent { if case .messageNew(_, let m) = $0 { m.type == "pigeon.members" } else { false } }
                guard case .messageNew(_, let message)? = event else { Issue.record("no change on a device of alice"); continue }
                #expect(try Self.change(message) == MembersChange(action: .renamed, userIds: [], name: nil, by: "alice"))
                #expect(message.body.contains("\"name\":null"), "a removed name is null, present: \(message.body)")
            }
            #expect(try await client.conversation(alice, group.id).name == nil)
        }
    }
}

extension ServerEvent {
    /// The conversation an event is about, when it names one.
    var conversationIdIfAny: String? {
        switch self {
        case .messageNew(_, let message): message.conversationId
        case .messageStored(_, let event): event.conversationId
        case .messageFailed(_, let event): event.conversationId
        case .receipt(_, let event): event.conversationId
        case .conversationCreated(_, let conversation): conversation.id
        case .typing(let event): event.conversationId
        default: nil
        }
    }
}
