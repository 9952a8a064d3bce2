import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md "Devices and auth" and "Conversations".
@Suite struct ConversationTests {
    @Test func registrationAnswers201WithIdentityAndToken() async throws {
        try await withTestServer { client in
            let answer = try await client.request(.POST, "/v1/devices", body: "{\"userId\":\"alice\",\"deviceName\":\"laptop\"}")
            #expect(answer.status == 201, "\(answer.text)")
            let first = try answer.decode(DeviceRegistration.self)
            #expect(first.userId == "alice")
            #expect(isLowercaseUUID(first.deviceId))
            #expect(!first.token.isEmpty)
            #expect(Set(answer.jsonObject.map { Array($0.keys) } ?? []) == ["userId", "deviceId", "token"])
            // deviceName is optional; a second device of the same user is another device.
            let second = try await client.request(.POST, "/v1/devices", token: first.token, body: "{\"userId\":\"alice\"}")
            #expect(second.status == 201, "\(second.text)")
            let phone = try second.decode(DeviceRegistration.self)
            #expect(phone.userId == "alice")
            #expect(phone.deviceId != first.deviceId)
            #expect(phone.token != first.token)
            // Both tokens work.
            for token in [first.token, phone.token] {
                #expect(try await client.request(.GET, "/v1/conversations", token: token).status == 200)
            }
        }
    }

    /// docs/API.md: `deviceName` and a new conversation's `name` may be `null`, which is the same as leaving them out
    /// (no name); an ill-typed one is still 400.
    @Test func nullNamesAreNoName() async throws {
        try await withTestServer { client in
            let answer = try await client.request(.POST, "/v1/devices", body: "{\"userId\":\"alice\",\"deviceName\":null}")
            #expect(answer.status == 201, "\(answer.text)")
            let alice = try answer.decode(DeviceRegistration.self)
            let devices = try await client.request(.GET, "/v1/devices", token: alice.token)
            let listed = (devices.jsonObject?["devices"] as? [[String: Any]])?.first
            #expect(listed?["deviceId"] as? String == alice.deviceId)
            #expect(listed?["deviceName"] is NSNull, "\(devices.text)")

            let created = try await client.request(.POST, "/v1/conversations", token: alice.token, body: "{\"members\":[\"bob\"],\"name\":null}")
            #expect(created.status == 201, "\(created.text)")
            #expect(created.jsonObject?["name"] is NSNull, "\(created.text)")
            #expect(try created.decode(Conversation.self).kind == .direct, "no name: a direct conversation, as without the key")

            for (path, body) in [("/v1/devices", "{\"userId\":\"carol\",\"deviceName\":5}"), ("/v1/conversations", "{\"members\":[\"bob\"],\"name\":false}")] {
                expectError(try await client.request(.POST, path, token: alice.token, body: body), 400, .invalidRequest, body)
            }
        }
    }

    @Test func createMakesTheCallerAMemberAndMergesDuplicates() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let before = nowMillis()
            let answer = try await client.request(
                .POST, "/v1/conversations", token: alice.token, body: "{\"members\":[\"bob\",\"bob\",\"alice\",\"carol\",\"carol\"],\"name\":\"trip\"}")
            #expect(answer.status == 201, "\(answer.text)")
            let conversation = try answer.decode(Conversation.self)
            #expect(isLowercaseUUID(conversation.id))
            #expect(conversation.name == "trip")
            #expect(conversation.lastSeq == 0)
            #expect(conversation.createdAt >= before - 1 && conversation.createdAt <= nowMillis() + 1)
            #expect(conversation.members.map(\.userId).sorted() == ["alice", "bob", "carol"])
            #expect(conversation.members.allSatisfy { $0.deliveredSeq == 0 && $0.readSeq == 0 })
            #expect(
                Set(answer.jsonObject.map { Array($0.keys) } ?? [])
                    == ["id", "kind", "name", "createdAt", "lastSeq", "updatedAt", "members", "lastMessage", "unreadCount"])
            #expect(answer.jsonObject?["lastMessage"] is NSNull, "present, null without messages")
            #expect(answer.jsonObject?["unreadCount"] as? Int == 0)
            #expect(conversation.updatedAt == conversation.createdAt)
            // API.md 1.1: a named one is a group; its creator is the owner; founding members joined at seq 0.
            #expect(answer.jsonObject?["kind"] as? String == "group")
            let members = (answer.jsonObject?["members"] as? [[String: Any]]) ?? []
            #expect(Set(members.first.map { Array($0.keys) } ?? []) == ["userId", "role", "membership", "joinedSeq", "deliveredSeq", "readSeq"])
            #expect(Dictionary(uniqueKeysWithValues: members.map { ($0["userId"] as? String ?? "", $0["role"] as? String ?? "") })
                == ["alice": "owner", "bob": "member", "carol": "member"])
            #expect(members.allSatisfy { $0["joinedSeq"] as? Int == 0 })

            // Not listing oneself, or listing nobody else, still makes the caller a member.
            let withoutSelf = try await client.createConversation(alice, members: ["bob"])
            #expect(withoutSelf.members.map(\.userId).sorted() == ["alice", "bob"])
            #expect(withoutSelf.kind == .direct, "one other member and no name: direct")
            #expect(try await client.conversation(alice, withoutSelf.id).kind == .direct, "read back as it was created")
            #expect(try await client.createConversation(alice, members: ["bob"], name: "us").kind == .group, "named: a group")
            let alone = try await client.createConversation(alice, members: [])
            #expect(alone.members.map(\.userId) == ["alice"])
            #expect(alone.kind == .group)
            #expect(alone.members.map(\.role) == [.owner])
            // Without a name, "name" is null (present).
            let unnamed = try await client.request(.GET, "/v1/conversations/\(withoutSelf.id)", token: alice.token)
            #expect(unnamed.jsonObject?.keys.contains("name") == true)
            #expect(unnamed.jsonObject?["name"] is NSNull)
        }
    }

    @Test func listShowsOnlyTheCallersConversations() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let dave = try await client.register("dave")
            let ab = try await client.createConversation(alice, members: ["bob"])
            let bc = try await client.createConversation(bob, members: ["carol"])
            let ca = try await client.createConversation(carol, members: ["alice"])
            func ids(_ device: TestDevice) async throws -> Set<String> { Set(try await client.conversations(device).map(\.id)) }
            #expect(try await ids(alice) == [ab.id, ca.id])
            #expect(try await ids(bob) == [ab.id, bc.id])
            #expect(try await ids(carol) == [bc.id, ca.id])
            #expect(try await ids(dave) == [])
            // A member registered after the conversation was created sees it too (membership is by user).
            let bobPhone = try await client.register("bob", existing: bob)
            #expect(try await ids(bobPhone) == [ab.id, bc.id])
            let list = try await client.conversations(alice)
            #expect(list.first { $0.id == ab.id } == ab)
        }
    }

    @Test func getByIdShowsTheConversationWithItsLastSeq() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "pair")
            #expect(try await client.conversation(bob, conversation.id) == conversation)
            for index in 1...3 { try await client.sendAccepted(alice, to: conversation.id, body: "\(index)") }
            _ = try await client.waitForCount(bob, conversation.id, 3)
            var expected = conversation
            expected.lastSeq = 3
            // Its activity time is the third message's store time.
            expected.updatedAt = try await client.allMessages(bob, conversation.id).last?.storedAt ?? 0
            #expect(expected.updatedAt >= conversation.createdAt)
            // Its newest message, and per caller the unread count (bob has read nothing of alice's three; alice's own
            // messages are never unread for her).
            expected.lastMessage = try await client.allMessages(bob, conversation.id).last
            #expect(expected.lastMessage?.body == "3")
            var forBob = expected
            forBob.unreadCount = 3
            #expect(try await client.conversation(bob, conversation.id) == forBob)
            #expect(try await client.conversation(alice, conversation.id) == expected)
            // An upper-case id in the path names the same conversation.
            let upper = try await client.request(.GET, "/v1/conversations/\(conversation.id.uppercased())", token: alice.token)
            #expect(upper.status == 200)
            #expect((try? upper.decode(Conversation.self)) == expected)
            _ = try await client.receipt(bob, conversation.id, kind: .read, upToSeq: 2)
            #expect(try await client.conversation(bob, conversation.id).unreadCount == 1, "read up to 2 of 3")
        }
    }

    @Test func moreThanMaxMembersIs400() async throws {
        try await withTestServer(configure: { $0.maxMembers = 3 }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let three = try await client.createConversation(alice, members: ["bob", "carol"])
            #expect(three.members.count == 3)
            // The caller and duplicates count once.
            let merged = try await client.createConversation(alice, members: ["bob", "carol", "alice", "bob"])
            #expect(merged.members.count == 3)
            let listBefore = try await client.conversations(alice)
            let bobCursor = try await client.headCursor(bob)
            for members in [["bob", "carol", "dave"], ["b1", "b2", "b3", "b4", "b5"]] {
                let answer = try await client.request(.POST, "/v1/conversations", token: alice.token, body: client.json(CreateConversationRequest(members: members)))
                expectError(answer, 400, .invalidRequest, "\(members)")
            }
            #expect(try await client.conversations(alice) == listBefore)
            #expect(try await client.sync(bob, cursor: bobCursor).events.isEmpty)
        }
    }

    @Test func everyDeviceOfAUserGetsMessageNew() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let aliceTablet = try await client.register("alice", existing: alice)
            let bobLaptop = try await client.register("bob")
            let bobPhone = try await client.register("bob", existing: bobLaptop)
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let laptop = try await TestWebSocket.connect(port: client.port, token: bobLaptop.token)
            let phone = try await TestSSE.open(port: client.port, token: bobPhone.token)
            let tablet = try await TestWebSocket.connect(port: client.port, token: aliceTablet.token)
            let accepted = try await client.sendAccepted(alice, to: conversation.id, body: "to all of bob")
            #expect(await laptop.firstEvent { $0.newMessage != nil }?.newMessage?.serverId == accepted.serverId)
            #expect(await phone.first { $0.event == "message.new" }?.serverEvent?.newMessage?.serverId == accepted.serverId)
            #expect(await tablet.firstEvent { $0.newMessage != nil }?.newMessage?.serverId == accepted.serverId)
            await laptop.close()
            await tablet.close()
            await phone.close()
        }
    }

    /// API 1.1: `GET /v1/conversations?limit=<n>&before=<cursor>`, newest activity first, `hasMore`, and
    /// `nextBefore` (`<updatedAt>:<id>`) to continue without skipping or repeating conversations updated in the
    /// same millisecond.
    @Test func listIsPagedNewestActivityFirst() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            var created: [Conversation] = []
            for index in 0..<9 { created.append(try await client.createConversation(alice, members: ["bob"], name: "c\(index)")) }
            // Messages into several at once: likely one processing batch, so several share an updatedAt.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for conversation in created[3..<8] {
                    group.addTask { try await client.sendAccepted(alice, to: conversation.id, body: "hi") }
                }
                try await group.waitForAll()
            }
            for conversation in created[3..<8] { _ = try await client.waitForCount(bob, conversation.id, 1) }

            func walk(_ device: TestDevice, limit: Int) async throws -> [Conversation] {
                var all: [Conversation] = []
                var query = "/v1/conversations?limit=\(limit)"
                while true {
                    let answer = try await client.request(.GET, query, token: device.token)
                    #expect(answer.status == 200, "\(answer.text)")
                    #expect(Set(answer.jsonObject.map { Array($0.keys) } ?? []) == ["conversations", "hasMore", "nextBefore"])
                    let page = try answer.decode(ConversationList.self)
                    #expect(page.conversations.count <= limit)
                    all += page.conversations
                    guard page.hasMore else {
                        #expect(page.nextBefore == nil)
                        return all
                    }
                    query = "/v1/conversations?limit=\(limit)&before=\(page.nextBefore ?? "")"
                }
            }
            let everything = try await walk(bob, limit: 500)
            #expect(everything.count == 9)
            let order = everything.map(\.id)
            #expect(everything.map { [$0.updatedAt] } == everything.map { [$0.updatedAt] }.sorted { $0[0] > $1[0] })
            #expect(Set(order.prefix(5)) == Set(created[3..<8].map(\.id)), "the five with a message come first")
            #expect(everything.allSatisfy { $0.lastSeq == 0 ? $0.updatedAt == $0.createdAt : $0.updatedAt > $0.createdAt })
            for limit in [1, 2, 4] {
                #expect(try await walk(bob, limit: limit).map(\.id) == order, "limit \(limit)")
            }
            // The default page is 100, so nine fit; a message moves its conversation to the front.
            try await client.sendAccepted(bob, to: created[0].id, body: "back to the top")
            _ = try await client.waitForCount(alice, created[0].id, 1)
            let answer = try await client.request(.GET, "/v1/conversations", token: alice.token)
            let page = try answer.decode(ConversationList.self)
            #expect(page.conversations.first?.id == created[0].id)
            #expect(page.conversations.count == 9)
            #expect(page.hasMore == false)
            // `before=<updatedAt>` alone: strictly older than that time.
            let cut = everything[5].updatedAt
            let older = try await client.request(.GET, "/v1/conversations?before=\(cut)", token: bob.token).decode(ConversationList.self)
            #expect(older.conversations.map(\.id) == everything.filter { $0.updatedAt < cut && $0.id != created[0].id }.map(\.id))
        }
    }

    @Test func badListParametersAre400() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            _ = try await client.createConversation(alice, members: ["bob"])
            for query in [
                "limit=0", "limit=501", "limit=-1", "limit=ten", "limit=", "before=", "before=yesterday", "before=-5", "before=1.5",
                "before=17000:", "before=17000:NOT-AN-ID", "before=17000:\(String(repeating: "a", count: 65))", "before=1:2:3",
            ] {
                let answer = try await client.request(.GET, "/v1/conversations?\(query)", token: alice.token)
                expectError(answer, 400, .invalidRequest, query)
            }
            let fine = try await client.request(.GET, "/v1/conversations?limit=500&before=\(Int64.max)", token: alice.token)
            #expect(fine.status == 200, "\(fine.text)")
            #expect(try fine.decode(ConversationList.self).conversations.count == 1)
        }
    }
}
