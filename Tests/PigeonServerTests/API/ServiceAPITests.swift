import Foundation
import NIOHTTP1
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.2 "The server API: the app's backend acts", through the real HTTP and WebSocket stack.
@Suite struct ServiceAPITests {
    static let serviceToken = "service-token-0123456789abcdef"

    static func withServiceServer<T: Sendable>(
        configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }, _ body: @Sendable (PigeonTestClient) async throws -> T
    ) async throws -> T {
        try await withTestServer(configure: { configuration in
            configuration.appBackend.serviceToken = serviceToken
            configure(&configuration)
        }, body)
    }

    static func service(
        _ client: PigeonTestClient, _ method: HTTPMethod, _ path: String, body: String? = nil, token: String? = serviceToken
    ) async throws -> HTTPAnswer {
        try await client.request(method, "/v1/service" + path, token: token, body: body)
    }

    static func post(_ client: PigeonTestClient, _ conversationId: String, _ request: ServiceSendMessageRequest) async throws -> HTTPAnswer {
        try await service(client, .POST, "/conversations/\(conversationId)/messages", body: client.json(request))
    }

    static func message(senderId: String, body: String, clientMessageId: String = newId()) -> ServiceSendMessageRequest {
        ServiceSendMessageRequest(senderId: senderId, clientMessageId: clientMessageId, type: "text", body: body, clientTimestamp: 1_763_700_000_000)
    }

    @Test func aServiceCreatedConversationHasEveryoneJoinedAndTheOwnerItNames() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let aliceStream = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await aliceStream.close() } }
            let answer = try await Self.service(
                client, .POST, "/conversations",
                body: client.json(ServiceCreateConversationRequest(members: ["alice", "bob", "carol"], name: "team", owner: "bob")))
            #expect(answer.status == 201, "\(answer.text)")
            let conversation = try answer.decode(Conversation.self)
            #expect(conversation.members.map(\.userId) == ["alice", "bob", "carol"])
            #expect(conversation.members.first { $0.userId == "bob" }?.role == .owner)
            #expect(conversation.members.filter { $0.role == .owner }.count == 1)
            #expect(conversation.kind == .group && conversation.name == "team")
            // Every member sees it and may send at once.
            #expect(try await client.conversations(bob).map(\.id) == [conversation.id])
            let created = await aliceStream.firstEvent { if case .conversationCreated = $0 { true } else { false } }
            #expect(created != nil)
            _ = try await client.sendAccepted(alice, to: conversation.id, body: "hi team")
            // Without owner, the first member listed owns it.
            let second = try await Self.service(client, .POST, "/conversations", body: #"{"members":["carol","alice"]}"#)
            #expect(second.status == 201, "\(second.text)")
            #expect(try second.decode(Conversation.self).members.first { $0.role == .owner }?.userId == "carol")
        }
    }

    @Test func underInvitesTheServiceAPIJoinsEveryoneAndIsHeldToNoConsentRule() async throws {
        try await Self.withServiceServer(configure: {
            $0.appBackend.consent = .invites
            $0.appBackend.strangerAddsPerHour = 1
        }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            // bob blocks alice: a user's add of him would be refused; the app's backend's is not.
            let blocked = try await client.request(.PUT, "/v1/blocks/alice", token: bob.token)
            #expect(blocked.status == 204, "\(blocked.text)")
            let answer = try await Self.service(
                client, .POST, "/conversations",
                body: client.json(ServiceCreateConversationRequest(members: ["alice", "bob", "carol", "dave"], name: "ops", owner: "alice")))
            #expect(answer.status == 201, "\(answer.text)")
            let conversation = try answer.decode(Conversation.self)
            #expect(conversation.members.allSatisfy { $0.membership == .joined }, "\(conversation.members)")
            let added = try await Self.service(client, .POST, "/conversations/\(conversation.id)/members", body: #"{"userIds":["erin","frank"]}"#)
            #expect(added.status == 200, "\(added.text)")
            #expect(try added.decode(Conversation.self).members.allSatisfy { $0.membership == .joined })
            // The same adds by alice herself are held to the rules: frank's friend gary is a stranger past her limit of 1.
            let userAdd = try await client.request(
                .POST, "/v1/conversations", token: alice.token, body: #"{"members":["gary","henry"]}"#)
            #expect(userAdd.status == 429, "\(userAdd.text)")
            #expect(try await client.conversations(bob).map(\.id) == [conversation.id])
        }
    }

    @Test func membersAreAddedAndRemovedByTheServiceAsPigeonMembersMessages() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice")
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "group")
            let added = try await Self.service(client, .POST, "/conversations/\(conversation.id)/members", body: #"{"userIds":["carol"],"role":"admin"}"#)
            #expect(added.status == 200, "\(added.text)")
            #expect(try added.decode(Conversation.self).members.first { $0.userId == "carol" }?.role == .admin)
            #expect(try await client.conversation(carol, conversation.id).members.count == 3)
            // The owner may be removed by the service: the longest-standing admin, else member, becomes owner.
            let removed = try await Self.service(client, .DELETE, "/conversations/\(conversation.id)/members/alice")
            #expect(removed.status == 200, "\(removed.text)")
            let after = try removed.decode(Conversation.self)
            #expect(after.members.map(\.userId) == ["bob", "carol"])
            #expect(after.members.first { $0.userId == "carol" }?.role == .owner)
            let messages = try await client.waitForCount(carol, conversation.id, 3)
            let changes = try messages.map { try JSONDecoder().decode(MembersChange.self, from: Data($0.body.utf8)) }
            #expect(messages.allSatisfy { $0.type == "pigeon.members" && $0.senderId == SystemSender.service })
            #expect(changes.map(\.action) == [.added, .removed, .role])
            #expect(changes.allSatisfy { $0.by == "service" })
            expectError(try await client.request(.GET, "/v1/conversations/\(conversation.id)", token: alice.token), 404, .notFound, "removed alice")
            // Removing a non-member: 404; an unknown conversation: 404; both change nothing.
            expectError(try await Self.service(client, .DELETE, "/conversations/\(conversation.id)/members/dave"), 404, .notFound, "non-member")
            expectError(try await Self.service(client, .DELETE, "/conversations/\(newId())/members/bob"), 404, .notFound, "unknown")
            #expect(try await client.allMessages(carol, conversation.id).count == 3)
        }
    }

    @Test func aSystemSendersMessageReachesEveryMemberDeviceUnreadCountsAndIsIdempotent() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let aliceStream = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let bobStream = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await aliceStream.close(); await bobStream.close() } }
            let id = newId()
            let answer = try await Self.post(client, conversation.id, Self.message(senderId: "system:billing", body: "invoice ready", clientMessageId: id))
            #expect(answer.status == 202, "\(answer.text)")
            let accepted = try answer.decode(SendMessageResponse.self)
            for stream in [aliceStream, bobStream] {
                let event = await stream.firstEvent { if case .messageNew = $0 { true } else { false } }
                guard case .messageNew(_, let message)? = event else { throw TestFailure("no message.new") }
                #expect(message.senderId == "system:billing" && message.senderDeviceId == SystemSender.deviceId)
                #expect(message.body == "invoice ready" && message.seq == 1 && message.serverId == accepted.serverId)
            }
            #expect(try await client.conversation(alice, conversation.id).unreadCount == 1)
            #expect(try await client.conversation(bob, conversation.id).unreadCount == 1)
            // Idempotent per clientMessageId.
            let again = try await Self.post(client, conversation.id, Self.message(senderId: "system:billing", body: "invoice ready", clientMessageId: id))
            #expect(again.status == 200 && (try? again.decode(SendMessageResponse.self))?.serverId == accepted.serverId, "\(again.text)")
            // In a member's name: every device of that member gets it too (none is "the sending device").
            let asBob = try await Self.post(client, conversation.id, Self.message(senderId: "bob", body: "from bob's backend"))
            #expect(asBob.status == 202, "\(asBob.text)")
            let bobsOwn = await bobStream.firstEvent { if case .messageNew(_, let m) = $0 { m.seq == 2 } else { false } }
            guard case .messageNew(_, let own)? = bobsOwn else { throw TestFailure("bob's device did not get its user's service message") }
            #expect(own.senderId == "bob" && own.senderDeviceId == SystemSender.deviceId)
            #expect(try await client.conversation(alice, conversation.id).unreadCount == 2)
            #expect(try await client.conversation(bob, conversation.id).unreadCount == 1)
        }
    }

    @Test func aModerationDeleteErasesAnyMessageAndSaysByService() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "regrettable")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let path = "/conversations/\(conversation.id)/messages/\(sent.serverId)/delete"
            let deleted = try await Self.service(client, .POST, path)
            #expect(deleted.status == 202, "\(deleted.text)")
            let messages = try await client.waitForMessages(alice, conversation.id) { $0.count == 2 }
            #expect(messages[0].body == "" && messages[0].deletedAt != nil)
            #expect(messages[1].type == "pigeon.delete" && messages[1].senderId == SystemSender.service)
            #expect(try JSONDecoder().decode(DeleteBody.self, from: Data(messages[1].body.utf8)) == DeleteBody(serverId: sent.serverId, by: "service"))
            // Deleting it again is the same deletion.
            let again = try await Self.service(client, .POST, path)
            #expect(again.status == 200, "\(again.text)")
            #expect(try again.decode(SendMessageResponse.self).serverId == (try deleted.decode(SendMessageResponse.self)).serverId)
            // A user's own delete says who deleted it.
            let other = try await client.sendAccepted(alice, to: conversation.id, body: "oops")
            _ = try await client.waitForCount(alice, conversation.id, 3)
            #expect(try await EditDeleteTests.delete(client, alice, conversation.id, other.serverId).status == 202)
            let all = try await client.waitForCount(alice, conversation.id, 4)
            #expect(try JSONDecoder().decode(DeleteBody.self, from: Data(all[3].body.utf8)).by == "alice")
            // An unknown target: 404 where the accept path stores at once (the embedded store); a buffered path takes the
            // delete and its processing refuses it (message.failed), as for a user's delete (API.md 1.1).
            let unknown = try await Self.service(client, .POST, "/conversations/\(conversation.id)/messages/\(newId())/delete")
            if TestBackend.current == .embedded {
                expectError(unknown, 404, .notFound, "unknown")
            } else {
                #expect(unknown.status == 202, "\(unknown.text)")
            }
        }
    }

    @Test func theUsersConversationsAndDevicesAreListedAndADeviceRevoked() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice", deviceName: "phone")
            let laptop = try await client.register("alice", deviceName: "laptop", existing: alice)
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let listed = try await Self.service(client, .GET, "/users/alice/conversations")
            #expect(listed.status == 200, "\(listed.text)")
            #expect(try listed.decode(ConversationList.self).conversations.map(\.id) == [conversation.id])
            #expect(try await Self.service(client, .GET, "/users/nobody/conversations").decode(ConversationList.self).conversations.isEmpty)
            let devices = try await Self.service(client, .GET, "/users/alice/devices")
            #expect(devices.status == 200, "\(devices.text)")
            let list = try devices.decode(DeviceList.self).devices
            #expect(Set(list.map(\.deviceId)) == [alice.deviceId, laptop.deviceId] && list.allSatisfy { !$0.current })
            let stream = try await TestWebSocket.connect(port: client.port, token: laptop.token)
            defer { Task { await stream.close() } }
            let revoked = try await Self.service(client, .DELETE, "/users/alice/devices/\(laptop.deviceId)")
            #expect(revoked.status == 204, "\(revoked.text)")
            expectError(try await client.request(.GET, "/v1/devices", token: laptop.token), 401, .unauthorized, "revoked token")
            #expect(try await client.request(.GET, "/v1/devices", token: alice.token).status == 200)
            try await waitUntil("the revoked device's WebSocket is closed", timeout: .seconds(10)) { stream.closeFrame.withLockedValue { $0 } != nil }
            #expect(stream.closeFrame.withLockedValue { $0 }?.code == 4001)
            expectError(try await Self.service(client, .DELETE, "/users/alice/devices/\(laptop.deviceId)"), 404, .notFound, "twice")
            expectError(try await Self.service(client, .DELETE, "/users/bob/devices/\(alice.deviceId)"), 404, .notFound, "another user's")
        }
    }

    /// Every route: a device's token `403`, no token or a wrong one `401`; nothing changes.
    @Test func everyRouteRefusesDeviceTokensAndMissingCredentials() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "g")
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "keep")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let id = conversation.id
            let routes: [(HTTPMethod, String, String?)] = [
                (.POST, "/conversations", #"{"members":["alice","bob"]}"#),
                (.POST, "/conversations/\(id)/members", #"{"userIds":["carol"]}"#),
                (.DELETE, "/conversations/\(id)/members/bob", nil),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:x", body: "no"))),
                (.POST, "/conversations/\(id)/messages/\(sent.serverId)/delete", nil),
                (.GET, "/users/alice/conversations", nil),
                (.GET, "/users/alice/devices", nil),
                (.DELETE, "/users/alice/devices/\(alice.deviceId)", nil),
            ]
            for (method, path, body) in routes {
                expectError(try await Self.service(client, method, path, body: body, token: alice.token), 403, .forbidden, "device token \(path)")
                expectError(try await Self.service(client, method, path, body: body, token: nil), 401, .unauthorized, "no token \(path)")
                expectError(
                    try await Self.service(client, method, path, body: body, token: Self.serviceToken + "x"), 401, .unauthorized, "wrong token \(path)")
            }
            #expect(try await client.conversations(alice).map(\.id) == [id])
            #expect(try await client.conversation(alice, id).members.map(\.userId) == ["alice", "bob"])
            #expect(try await client.allMessages(alice, id).map(\.body) == ["keep"])
            #expect(try await client.request(.GET, "/v1/devices", token: alice.token).status == 200)
            // The service token is no device's.
            expectError(try await client.request(.GET, "/v1/conversations", token: Self.serviceToken), 401, .unauthorized, "service token as a device")
        }
    }

    @Test func badInputIs400AndChangesNothing() async throws {
        try await Self.withServiceServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "g")
            let id = conversation.id
            let bad: [(HTTPMethod, String, String?)] = [
                (.POST, "/conversations", #"{"members":[]}"#),
                (.POST, "/conversations", #"{"members":["not valid"]}"#),
                (.POST, "/conversations", #"{"members":["alice"],"owner":"system:x"}"#),
                (.POST, "/conversations", #"{"members":["alice"],"name":""}"#),
                (.POST, "/conversations", #"{"members":"alice"}"#),
                (.POST, "/conversations", "not json"),
                (.POST, "/conversations/not-a-uuid/members", #"{"userIds":["carol"]}"#),
                (.POST, "/conversations/\(id)/members", #"{"userIds":[]}"#),
                (.POST, "/conversations/\(id)/members", #"{"userIds":["carol"],"role":"owner"}"#),
                (.DELETE, "/conversations/\(id)/members/not%20valid", nil),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "carol", body: "not a member"))),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:", body: "empty name"))),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:a b", body: "bad name"))),
                // The server's own senders: no app message passes for one of them.
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:service", body: "as the server"))),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:Service", body: "as the server"))),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:pigeon", body: "as pigeon"))),
                (.POST, "/conversations/\(id)/messages", client.json(Self.message(senderId: "system:\(String(repeating: "x", count: 65))", body: "long"))),
                (
                    .POST, "/conversations/\(id)/messages",
                    client.json(
                        ServiceSendMessageRequest(senderId: "system:x", clientMessageId: newId(), type: "pigeon.members", body: "{}", clientTimestamp: 1))
                ),
                (.POST, "/conversations/\(id)/messages", #"{"senderId":"system:x","type":"text","body":"no id","clientTimestamp":1}"#),
                (.POST, "/conversations/\(id)/messages/not-a-uuid/delete", nil),
                (.POST, "/conversations/\(id)/messages/\(newId())/delete", #"{"clientMessageId":"nope"}"#),
                (.GET, "/users/not%20valid/conversations", nil),
                (.GET, "/users/alice/conversations?limit=0", nil),
                (.GET, "/users/a%20b/devices", nil),
            ]
            for (method, path, body) in bad {
                expectError(try await Self.service(client, method, path, body: body), 400, .invalidRequest, "\(method) \(path) \(body ?? "")")
            }
            #expect(try await client.conversations(alice).map(\.id) == [id])
            #expect(try await client.conversation(alice, id).members.map(\.userId) == ["alice", "bob"])
            #expect(try await client.allMessages(alice, id).isEmpty)
        }
    }

    @Test func aJWTWithTheServiceRoleAndNoDeviceIsAServiceCredentialAndOneWithADeviceIsADevice() async throws {
        try await withTestServer(configure: { $0.auth.jwtSecret = JWTTests.secret }) { client in
            let exp = Int64(Date().timeIntervalSince1970) + 3600
            let service = JWTTests.token(claims: #"{"sub":"backend","pigeon_role":"service","exp":\#(exp)}"#)
            let withDevice = JWTTests.token(claims: #"{"sub":"alice","did":"phone","pigeon_role":"service","exp":\#(exp)}"#)
            let expired = JWTTests.token(claims: #"{"pigeon_role":"service","exp":\#(exp - 7200)}"#)
            let otherKey = JWTTests.token(claims: #"{"pigeon_role":"service","exp":\#(exp)}"#, secret: "another-secret")
            let noRole = JWTTests.token(claims: #"{"sub":"backend","exp":\#(exp)}"#)
            let create = #"{"members":["alice","bob"]}"#
            #expect(try await Self.service(client, .POST, "/conversations", body: create, token: service).status == 201)
            expectError(try await Self.service(client, .POST, "/conversations", body: create, token: withDevice), 403, .forbidden, "a device's JWT")
            for (name, token) in [("expired", expired), ("other key", otherKey), ("no role", noRole)] {
                expectError(try await Self.service(client, .POST, "/conversations", body: create, token: token), 401, .unauthorized, name)
            }
            // The JWT with a device is a device on the device routes; the service JWT is none.
            let alice = TestDevice(userId: "alice", deviceId: "phone", token: withDevice)
            #expect(try await client.conversations(alice).count == 1)
            expectError(try await client.request(.GET, "/v1/conversations", token: service), 401, .unauthorized, "service JWT as a device")
            // No static token is configured: nothing else passes.
            expectError(try await Self.service(client, .GET, "/users/alice/devices"), 401, .unauthorized, "unconfigured static token")
        }
    }

    @Test func duringARotationThePreviousTokenWorksBesideTheNewOne() async throws {
        let previous = "previous-token-0123456789abcdef"
        try await Self.withServiceServer(configure: { $0.appBackend.previousServiceToken = previous }) { client in
            #expect(try await Self.service(client, .GET, "/users/alice/devices").status == 200)
            #expect(try await Self.service(client, .GET, "/users/alice/devices", token: previous).status == 200)
            expectError(try await Self.service(client, .GET, "/users/alice/devices", token: previous + "x"), 401, .unauthorized, "neither")
        }
    }

    @Test func aPreviousTokenNeedsTheNewOneAndBothAtLeast16Characters() {
        var configuration = AppBackendConfiguration()
        configuration.previousServiceToken = "previous-token-0123456789"
        #expect(configuration.problem?.contains("needs --service-token") == true)
        configuration.serviceToken = "new-token-0123456789"
        #expect(configuration.problem == nil)
        configuration.previousServiceToken = "short"
        #expect(configuration.problem?.contains("--service-token-previous must be at least 16") == true)
        configuration.previousServiceToken = nil
        configuration.serviceToken = "short"
        #expect(configuration.problem?.contains("--service-token must be at least 16") == true)
    }

    @Test func theCredentialComparisonMatchesOnlyTheWholeToken() {
        let credential = ServiceCredential(tokens: ["abcdefghijklmnop", "qrstuvwxyz012345"])
        #expect(credential.matches("abcdefghijklmnop") && credential.matches("qrstuvwxyz012345"))
        for wrong in ["", "abcdefghijklmno", "abcdefghijklmnopq", "Abcdefghijklmnop", "qrstuvwxyz01234"] {
            #expect(!credential.matches(wrong), "\(wrong)")
        }
        #expect(!ServiceCredential(tokens: []).matches("abcdefghijklmnop"))
    }

    @Test func systemSenderNames() {
        for valid in ["system:a", "system:billing-bot.v2_1", "system:" + String(repeating: "x", count: 64)] { #expect(SystemSender.isValid(valid), "\(valid)") }
        for invalid in ["system:", "system:a b", "system:a:b", "system:" + String(repeating: "x", count: 65), "alice", "System:a", "system:é"] {
            #expect(!SystemSender.isValid(invalid), "\(invalid)")
        }
        // No userId can be a system sender: a userId never holds a colon.
        #expect(!Validation.isValidUserId("system:a"))
    }
}
