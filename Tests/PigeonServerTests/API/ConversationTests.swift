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
            #expect(Set(answer.jsonObject.map { Array($0.keys) } ?? []) == ["id", "name", "createdAt", "lastSeq", "members"])

            // Not listing oneself, or listing nobody else, still makes the caller a member.
            let withoutSelf = try await client.createConversation(alice, members: ["bob"])
            #expect(withoutSelf.members.map(\.userId).sorted() == ["alice", "bob"])
            let alone = try await client.createConversation(alice, members: [])
            #expect(alone.members.map(\.userId) == ["alice"])
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
            #expect(try await client.conversation(bob, conversation.id) == expected)
            #expect(try await client.conversation(alice, conversation.id) == expected)
            // An upper-case id in the path names the same conversation.
            let upper = try await client.request(.GET, "/v1/conversations/\(conversation.id.uppercased())", token: bob.token)
            #expect(upper.status == 200)
            #expect((try? upper.decode(Conversation.self)) == expected)
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
}
