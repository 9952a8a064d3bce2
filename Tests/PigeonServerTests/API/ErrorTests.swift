import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// API.md's error table: every code with its status and body, and a refused request changes nothing.
@Suite struct ErrorTests {
    /// alice and bob share a conversation with two stored messages; carol is registered but not a member.
    struct Fixture {
        var alice: TestDevice
        var bob: TestDevice
        var carol: TestDevice
        var conversation: Conversation

        var messagesPath: String { "/v1/conversations/\(conversation.id)/messages" }
        var receiptsPath: String { "/v1/conversations/\(conversation.id)/receipts" }
        var typingPath: String { "/v1/conversations/\(conversation.id)/typing" }

        static func make(_ client: PigeonTestClient) async throws -> Fixture {
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            try await client.sendAccepted(alice, to: conversation.id, body: "one")
            try await client.sendAccepted(bob, to: conversation.id, body: "two")
            _ = try await client.waitForCount(alice, conversation.id, 2)
            return Fixture(alice: alice, bob: bob, carol: carol, conversation: try await client.conversation(alice, conversation.id))
        }
    }

    /// What a client can see of the fixture's state.
    struct Snapshot: Equatable {
        var aliceConversations: [Conversation]
        var bobConversations: [Conversation]
        var carolConversations: [Conversation]
        var history: [Message]

        static func take(_ client: PigeonTestClient, _ fixture: Fixture) async throws -> Snapshot {
            Snapshot(
                aliceConversations: try await client.conversations(fixture.alice),
                bobConversations: try await client.conversations(fixture.bob),
                carolConversations: try await client.conversations(fixture.carol),
                history: try await client.allMessages(fixture.alice, fixture.conversation.id))
        }
    }

    /// The state equals `before`, and stays so: a marker sent now is stored right after `before`'s last message
    /// (processing is in buffer order, so a refused message that had been buffered anyway would come first).
    func expectNothingChanged(
        _ client: PigeonTestClient, _ fixture: Fixture, since before: Snapshot, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let now = try await Snapshot.take(client, fixture)
        #expect(now == before, "state changed", sourceLocation: sourceLocation)
        let marker = try await client.sendAccepted(fixture.bob, to: fixture.conversation.id, body: "marker-\(newId())")
        let messages = try await client.waitForMessages(fixture.alice, fixture.conversation.id) { $0.contains { $0.serverId == marker.serverId } }
        #expect(messages.dropLast().map(\.serverId) == before.history.map(\.serverId), "unexpected messages", sourceLocation: sourceLocation)
        #expect(messages.last?.serverId == marker.serverId, sourceLocation: sourceLocation)
        #expect(messages.last?.seq == Int64(before.history.count + 1), sourceLocation: sourceLocation)
    }

    func sendJSON(clientMessageId: String = newId(), type: String = "text", body: String = "hi") -> String {
        "{\"clientMessageId\":\"\(clientMessageId)\",\"type\":\"\(type)\",\"body\":\"\(body)\",\"clientTimestamp\":1763700000000}"
    }

    @Test func malformedJSONIs400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let bodies = ["{", "not json", "{\"clientMessageId\": }", "", "\"just a string\"", "[]", "null", "{\"a\":1}}"]
            for body in bodies {
                expectError(try await client.request(.POST, f.messagesPath, token: f.alice.token, body: body), 400, .invalidRequest, "send \(body)")
                expectError(try await client.request(.POST, "/v1/conversations", token: f.alice.token, body: body), 400, .invalidRequest, "create \(body)")
                expectError(try await client.request(.POST, f.receiptsPath, token: f.bob.token, body: body), 400, .invalidRequest, "receipt \(body)")
                expectError(try await client.request(.POST, f.typingPath, token: f.bob.token, body: body), 400, .invalidRequest, "typing \(body)")
                expectError(try await client.request(.POST, "/v1/devices", body: body), 400, .invalidRequest, "register \(body)")
            }
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func illTypedFieldsAre400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let id = newId()
            let sends = [
                "{\"clientMessageId\":\"\(id)\",\"type\":\"text\",\"body\":\"hi\",\"clientTimestamp\":\"1763700000000\"}",
                "{\"clientMessageId\":\"\(id)\",\"type\":\"text\",\"body\":\"hi\",\"clientTimestamp\":1.5}",
                "{\"clientMessageId\":\"\(id)\",\"type\":\"text\",\"body\":42,\"clientTimestamp\":1}",
                "{\"clientMessageId\":\"\(id)\",\"type\":\"text\",\"body\":null,\"clientTimestamp\":1}",
                "{\"clientMessageId\":\"\(id)\",\"type\":7,\"body\":\"hi\",\"clientTimestamp\":1}",
                "{\"clientMessageId\":12345,\"type\":\"text\",\"body\":\"hi\",\"clientTimestamp\":1}",
                "{\"clientMessageId\":\"\(id)\",\"type\":\"text\",\"body\":{\"nested\":true},\"clientTimestamp\":1}",
            ]
            for body in sends {
                expectError(try await client.sendRaw(f.alice, to: f.conversation.id, json: body), 400, .invalidRequest, body)
            }
            for body in ["{\"members\":\"bob\"}", "{\"members\":[1,2]}", "{\"members\":{\"bob\":true}}", "{\"members\":[\"bob\"],\"name\":5}"] {
                expectError(try await client.request(.POST, "/v1/conversations", token: f.alice.token, body: body), 400, .invalidRequest, body)
            }
            for body in ["{\"kind\":\"read\",\"upToSeq\":\"2\"}", "{\"kind\":1,\"upToSeq\":2}", "{\"kind\":\"read\",\"upToSeq\":1.5}"] {
                expectError(try await client.request(.POST, f.receiptsPath, token: f.bob.token, body: body), 400, .invalidRequest, body)
            }
            for body in ["{\"active\":\"yes\"}", "{\"active\":1}"] {
                expectError(try await client.request(.POST, f.typingPath, token: f.bob.token, body: body), 400, .invalidRequest, body)
            }
            for body in ["{\"userId\":5}", "{\"userId\":\"dave\",\"deviceName\":5}"] {
                expectError(try await client.request(.POST, "/v1/devices", body: body), 400, .invalidRequest, body)
            }
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func missingFieldsAre400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let fields = ["\"clientMessageId\":\"\(newId())\"", "\"type\":\"text\"", "\"body\":\"hi\"", "\"clientTimestamp\":1"]
            for missing in fields.indices {
                let body = "{" + fields.enumerated().filter { $0.offset != missing }.map(\.element).joined(separator: ",") + "}"
                expectError(try await client.sendRaw(f.alice, to: f.conversation.id, json: body), 400, .invalidRequest, body)
            }
            expectError(try await client.sendRaw(f.alice, to: f.conversation.id, json: "{}"), 400, .invalidRequest, "{}")
            for body in ["{}", "{\"name\":\"x\"}"] {
                expectError(try await client.request(.POST, "/v1/conversations", token: f.alice.token, body: body), 400, .invalidRequest, body)
            }
            for body in ["{\"kind\":\"read\"}", "{\"upToSeq\":1}", "{}"] {
                expectError(try await client.request(.POST, f.receiptsPath, token: f.bob.token, body: body), 400, .invalidRequest, body)
            }
            expectError(try await client.request(.POST, f.typingPath, token: f.bob.token, body: "{}"), 400, .invalidRequest, "typing {}")
            for body in ["{}", "{\"deviceName\":\"laptop\"}"] {
                expectError(try await client.request(.POST, "/v1/devices", body: body), 400, .invalidRequest, body)
            }
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func badUUIDsAre400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let badIds = ["not-a-uuid", "", "12345678-1234-1234-1234-12345678901g", "123456781234123412341234567890ab",
                          "{12345678-1234-1234-1234-123456789012}", "12345678-1234-1234-1234-1234567890123"]
            for bad in badIds {
                expectError(
                    try await client.sendRaw(f.alice, to: f.conversation.id, json: sendJSON(clientMessageId: bad)), 400, .invalidRequest,
                    "clientMessageId \(bad)")
            }
            for bad in ["not-a-uuid", "12345678-1234-1234-1234-12345678901g", "1234"] {
                let base = "/v1/conversations/\(bad)"
                expectError(try await client.request(.GET, base, token: f.alice.token), 400, .invalidRequest, "GET \(bad)")
                expectError(try await client.request(.GET, base + "/messages", token: f.alice.token), 400, .invalidRequest, "history \(bad)")
                expectError(try await client.request(.POST, base + "/messages", token: f.alice.token, body: sendJSON()), 400, .invalidRequest, "send \(bad)")
                expectError(
                    try await client.request(.POST, base + "/receipts", token: f.alice.token, body: "{\"kind\":\"read\",\"upToSeq\":1}"), 400,
                    .invalidRequest, "receipt \(bad)")
                expectError(try await client.request(.POST, base + "/typing", token: f.alice.token, body: "{\"active\":true}"), 400, .invalidRequest, "typing \(bad)")
            }
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func badMessageTypesAre400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            for type in ["Text", "TEXT", "", String(repeating: "a", count: 33), "has space", " text", "text\\n", "a/b", "a+b", "ünï", "a:b"] {
                expectError(try await client.sendRaw(f.alice, to: f.conversation.id, json: sendJSON(type: type)), 400, .invalidRequest, "type \(type)")
            }
            try await expectNothingChanged(client, f, since: before)
        }
    }

    /// Types beginning with `pigeon.` are the server's own (member changes, edits, deletions: API.md 1.1): a client
    /// sending one is refused over HTTP and WebSocket alike, and nothing is stored.
    @Test func theServersOwnMessageTypesAre400FromAClient() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            for type in ["pigeon.members", "pigeon.edit", "pigeon.delete", "pigeon.anything"] {
                let answer = try await client.sendRaw(f.alice, to: f.conversation.id, json: sendJSON(type: type))
                expectError(answer, 400, .invalidRequest, "type \(type)")
                #expect(answer.text.contains("pigeon."), "the error names the reserved prefix")
            }
            let socket = try await TestWebSocket.connect(port: client.port, token: f.alice.token)
            let clientMessageId = newId()
            socket.send(
                .send(
                    conversationId: f.conversation.id,
                    SendMessageRequest(clientMessageId: clientMessageId, type: "pigeon.members", body: "{}", clientTimestamp: 1)))
            let error = await socket.first { $0.errorFrame != nil }?.errorFrame
            #expect(error?.clientMessageId == clientMessageId)
            #expect(error?.error.code == .invalidRequest)
            await socket.close()
            try await expectNothingChanged(client, f, since: before)
            // An app's own dotted type is still its own.
            #expect(try await client.sendRaw(f.alice, to: f.conversation.id, json: sendJSON(type: "app.pigeon.note")).status == 202)
            let after = try await client.allMessages(f.alice, f.conversation.id)
            #expect(after.filter { $0.type.hasPrefix("pigeon.") }.isEmpty)
        }
    }

    /// U+0000 cannot be stored by PostgreSQL's text type: every backend refuses it up front, instead of accepting a
    /// message (✓) that could then never be stored.
    @Test func nulCharactersAre400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            expectError(try await client.sendRaw(f.alice, to: f.conversation.id, json: sendJSON(body: "a\\u0000b")), 400, .invalidRequest, "body")
            expectError(
                try await client.request(.POST, "/v1/conversations", token: f.alice.token, body: "{\"members\":[\"bob\"],\"name\":\"a\\u0000\"}"), 400,
                .invalidRequest, "conversation name")
            expectError(
                try await client.request(.POST, "/v1/devices", body: "{\"userId\":\"dave\",\"deviceName\":\"\\u0000\"}"), 400, .invalidRequest,
                "device name")
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func badUserIdsAre400() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let bad = ["", String(repeating: "a", count: 65), "has space", "ünï", "a/b", "a:b", "a+b", "tab\\t", "a#b"]
            for userId in bad {
                expectError(
                    try await client.request(.POST, "/v1/devices", body: "{\"userId\":\"\(userId)\",\"deviceName\":\"x\"}"), 400, .invalidRequest,
                    "register \(userId)")
                expectError(
                    try await client.request(.POST, "/v1/conversations", token: f.alice.token, body: "{\"members\":[\"bob\",\"\(userId)\"]}"), 400,
                    .invalidRequest, "member \(userId)")
            }
            try await expectNothingChanged(client, f, since: before)
            // The boundaries are accepted.
            let longest = String(repeating: "a", count: 64)
            #expect(try await client.register(longest).userId == longest)
            #expect(try await client.register("A.z_0@9-x").userId == "A.z_0@9-x")
            #expect(try await client.register("x").userId == "x")
        }
    }

    @Test func oversizedBodiesAre413() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let big = String(repeating: "a", count: 70_000)
            expectError(try await client.send(f.alice, to: f.conversation.id, body: big), 413, .payloadTooLarge, "send")
            expectError(
                try await client.request(.POST, "/v1/conversations", token: f.alice.token, body: "{\"members\":[\"bob\"],\"name\":\"\(big)\"}"), 413,
                .payloadTooLarge, "create")
            expectError(
                try await client.request(.POST, "/v1/devices", body: "{\"userId\":\"dave\",\"deviceName\":\"\(big)\"}"), 413, .payloadTooLarge,
                "register")
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func oversizedWebSocketMessageGetsPayloadTooLarge() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let socket = try await TestWebSocket.connect(port: client.port, token: f.alice.token)
            let clientMessageId = newId()
            socket.sendMessage(to: f.conversation.id, body: String(repeating: "a", count: 70_000), clientMessageId: clientMessageId)
            let error = await socket.first { $0.errorFrame != nil }?.errorFrame
            #expect(error?.error.code == .payloadTooLarge)
            #expect(error?.clientMessageId == clientMessageId)
            #expect(error?.error.message.isEmpty == false)
            // The socket still works.
            let next = newId()
            socket.sendMessage(to: f.conversation.id, body: "small", clientMessageId: next)
            let ack = await socket.first { $0.ack != nil }?.ack
            #expect(ack?.clientMessageId == next)
            let messages = try await client.waitForCount(f.alice, f.conversation.id, 3)
            #expect(messages.map(\.body) == before.history.map(\.body) + ["small"])
            await socket.close()
        }
    }

    /// docs/API.md: a WebSocket message over 1 MiB closes the connection (close code 1009) instead of an error frame.
    @Test func webSocketMessageOverOneMiBClosesTheConnection() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let socket = try await TestWebSocket.connect(port: client.port, token: f.alice.token)
            socket.sendMessage(to: f.conversation.id, body: String(repeating: "a", count: 1_100_000))
            let frames = await socket.inbox.collect(timeout: .seconds(10)) { _ in false }
            #expect(socket.inbox.isClosed)
            #expect(frames.compactMap(\.ack).isEmpty)
            try await expectNothingChanged(client, f, since: before)
            await socket.close()
        }
    }

    @Test func missingMalformedOrUnknownTokenIs401() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let c = f.conversation.id
            let calls: [(HTTPMethod, String, String?)] = [
                (.GET, "/v1/conversations", nil),
                (.POST, "/v1/conversations", "{\"members\":[\"bob\"]}"),
                (.GET, "/v1/conversations/\(c)", nil),
                (.GET, "/v1/conversations/\(c)/messages", nil),
                (.POST, "/v1/conversations/\(c)/messages", sendJSON()),
                (.POST, "/v1/conversations/\(c)/receipts", "{\"kind\":\"read\",\"upToSeq\":2}"),
                (.POST, "/v1/conversations/\(c)/typing", "{\"active\":true}"),
                (.GET, "/v1/sync", nil),
                (.GET, "/v1/events", nil),
                (.GET, "/v1/ws", nil),
            ]
            let authorizations: [String?] = [
                nil, "Basic YWxpY2U6c2VjcmV0", "Bearer", "Bearer ", "Token \(f.alice.token)", f.alice.token, "Bearer pgn_unknown",
                "Bearer \(f.alice.token)x", "Bearer " + String(repeating: "a", count: 600),
            ]
            for (method, path, body) in calls {
                for authorization in authorizations {
                    let headers = authorization.map { ["Authorization": $0] } ?? [:]
                    let answer = try await client.request(method, path, body: body, headers: headers)
                    expectError(answer, 401, .unauthorized, "\(method) \(path) with \(authorization ?? "no Authorization")")
                }
            }
            // access_token works only where browsers need it (streams), not on ordinary calls.
            expectError(try await client.request(.GET, "/v1/conversations?access_token=\(f.alice.token)"), 401, .unauthorized, "access_token")
            expectError(try await client.request(.GET, "/v1/events?access_token=pgn_unknown"), 401, .unauthorized, "events unknown access_token")
            // The WebSocket upgrade is refused.
            await #expect(throws: (any Error).self) { try await TestWebSocket.connect(port: client.port, token: nil) }
            await #expect(throws: (any Error).self) { try await TestWebSocket.connect(port: client.port, token: "pgn_unknown") }
            let sse = try await TestSSE.open(port: client.port, token: "pgn_unknown")
            #expect(sse.status.withLockedValue { $0 } == 401)
            await sse.close()
            try await expectNothingChanged(client, f, since: before)
        }
    }

    @Test func outsiderAndUnknownConversationGetTheSame404() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let carolCursor = try await client.headCursor(f.carol)
            let unknown = newId()
            for (method, suffix, body) in [
                (HTTPMethod.GET, "", nil), (.GET, "/messages", nil), (.GET, "/messages?after=0&limit=10", nil),
                (.POST, "/messages", sendJSON()), (.POST, "/receipts", "{\"kind\":\"read\",\"upToSeq\":2}"),
                (.POST, "/receipts", "{\"kind\":\"delivered\",\"upToSeq\":1}"), (.POST, "/typing", "{\"active\":true}"),
            ] as [(HTTPMethod, String, String?)] {
                let outsider = try await client.request(method, "/v1/conversations/\(f.conversation.id)\(suffix)", token: f.carol.token, body: body)
                let missing = try await client.request(method, "/v1/conversations/\(unknown)\(suffix)", token: f.carol.token, body: body)
                let memberMissing = try await client.request(method, "/v1/conversations/\(unknown)\(suffix)", token: f.alice.token, body: body)
                expectError(outsider, 404, .notFound, "outsider \(method) \(suffix)")
                expectError(missing, 404, .notFound, "unknown \(method) \(suffix)")
                // The same answer (JSON key order aside): nothing tells an outsider that the conversation exists.
                #expect((try? outsider.decode(ErrorBody.self)) == (try? missing.decode(ErrorBody.self)), "\(outsider.text) vs \(missing.text)")
                #expect((try? outsider.decode(ErrorBody.self)) == (try? memberMissing.decode(ErrorBody.self)), "\(outsider.text) vs \(memberMissing.text)")
                #expect(outsider.headers.filter { $0.key != "date" } == missing.headers.filter { $0.key != "date" })
            }
            // The outsider's streams carry nothing of the conversation either.
            #expect(try await client.conversations(f.carol).isEmpty)
            try await expectNothingChanged(client, f, since: before)
            #expect(try await client.sync(f.carol, cursor: carolCursor).events.isEmpty)
        }
    }

    /// docs/API.md "Errors beyond the table": a known path with another method is `405 method_not_allowed` with
    /// `Allow`, whoever asks (before the token is looked at), and changes nothing; an unknown path stays `404`.
    @Test func aKnownPathWithAnotherMethodIs405WithAllow() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let id = f.conversation.id
            let cases: [(HTTPMethod, String, String)] = [
                (.DELETE, "/v1/devices", "GET, POST"),
                (.PUT, "/v1/devices", "GET, POST"),
                (.GET, "/v1/devices/\(f.alice.deviceId)", "DELETE"),
                (.PUT, "/v1/conversations", "GET, POST"),
                (.DELETE, "/v1/conversations", "GET, POST"),
                (.OPTIONS, "/v1/conversations", "GET, POST"),
                (.TRACE, "/v1/conversations", "GET, POST"),
                (.DELETE, "/v1/conversations/\(id)", "GET, PATCH"),
                (.PUT, "/v1/conversations/\(id)/messages", "GET, POST"),
                (.DELETE, "/v1/conversations/\(id)/messages", "GET, POST"),
                (.GET, "/v1/conversations/\(id)/receipts", "POST"),
                (.GET, "/v1/conversations/\(id)/typing", "POST"),
                (.GET, "/v1/conversations/\(id)/members", "POST"),
                (.POST, "/v1/conversations/\(id)/members/bob", "DELETE, PATCH"),
                (.GET, "/v1/conversations/\(id)/messages/\(newId())/edit", "POST"),
                (.POST, "/v1/sync", "GET"),
                (.POST, "/v1/events", "GET"),
                (.DELETE, "/v1/ws", "GET"),
                (.POST, "/healthz", "GET"),
                (.DELETE, "/metrics", "GET"),
                (.RAW(value: "PURGE"), "/v1/conversations", "GET, POST"),
                // The router ignores empty path segments; so does the method check.
                (.PUT, "/v1/conversations/", "GET, POST"),
            ]
            for (method, path, allow) in cases {
                for token in [f.alice.token, nil] {
                    let answer = try await client.request(method, path, token: token, body: method == .GET || method == .TRACE ? nil : "{}")
                    expectError(answer, 405, .methodNotAllowed, "\(method) \(path) \(token == nil ? "without" : "with") a token")
                    #expect(answer.headers["allow"] == allow, "\(method) \(path): \(answer.headers)")
                }
            }
            // HEAD: the same status and Allow, without a body.
            for path in ["/v1/conversations", "/v1/conversations/\(id)", "/v1/events", "/healthz"] {
                let answer = try await client.request(.HEAD, path, token: f.alice.token)
                #expect(answer.status == 405, "HEAD \(path)")
                #expect(answer.headers["allow"]?.contains("GET") == true, "HEAD \(path): \(answer.headers)")
                #expect(answer.body.isEmpty, "HEAD \(path)")
            }
            // The device is still there, and nothing else changed.
            #expect(try await client.request(.GET, "/v1/devices", token: f.alice.token).status == 200)
            try await expectNothingChanged(client, f, since: before)
            // Unknown paths are still 404, whatever the method.
            for (method, path) in [
                (HTTPMethod.GET, "/v1/nothing"), (.DELETE, "/v1/nothing"), (.OPTIONS, "/v1/nothing"), (.GET, "/v1/conversations/\(id)/nothing"),
                (.POST, "/v1/devices/\(f.alice.deviceId)/nothing"), (.GET, "/nothing"), (.GET, "/v1"),
            ] {
                expectError(try await client.request(method, path, token: f.alice.token), 404, .notFound, "\(method) \(path)")
            }
        }
    }

    @Test func outsiderOverWebSocketGetsNotFoundFrames() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let carolCursor = try await client.headCursor(f.carol)
            let socket = try await TestWebSocket.connect(port: client.port, token: f.carol.token)
            for conversationId in [f.conversation.id, newId()] {
                let clientMessageId = newId()
                socket.sendMessage(to: conversationId, body: "sneaky", clientMessageId: clientMessageId)
                let error = await socket.first { $0.errorFrame != nil }?.errorFrame
                #expect(error?.clientMessageId == clientMessageId)
                #expect(error?.error.code == .notFound)
                #expect(error?.error.message.isEmpty == false)
                socket.send(.typing(conversationId: conversationId, active: true))
                let typingError = await socket.first { $0.errorFrame != nil }?.errorFrame
                #expect(typingError?.error.code == .notFound)
                socket.send(.receipt(conversationId: conversationId, ReceiptRequest(kind: .read, upToSeq: 2)))
                let receiptError = await socket.first { $0.errorFrame != nil }?.errorFrame
                #expect(receiptError?.error.code == .notFound)
            }
            // The raw frame has exactly API.md's shape.
            let clientMessageId = newId()
            socket.sendMessage(to: f.conversation.id, body: "sneaky", clientMessageId: clientMessageId)
            let raw = await socket.rawInbox.take { $0.contains(clientMessageId) }
            let object = raw.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(object?["type"] as? String == "error")
            #expect(object?["clientMessageId"] as? String == clientMessageId)
            #expect((object?["error"] as? [String: Any])?["code"] as? String == "not_found")
            #expect(try await client.sync(f.carol, cursor: carolCursor).events.isEmpty)
            try await expectNothingChanged(client, f, since: before)
            await socket.close()
        }
    }

    @Test func rateLimitedIs429WithRetryAfterAndStoresNothing() async throws {
        // A token every 4 s: the three sends must fall within one refill, also on a slow, loaded machine (with one
        // a second, CI's saw the third accepted).
        try await withTestServer(configure: { $0.rateLimitPerDevice = 0.25; $0.rateLimitBurst = 2 }) { client in
            let alice = try await client.register("alice")
            let alicePhone = try await client.register("alice", existing: alice)
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "1")
            let second = try await client.sendAccepted(alice, to: conversation.id, body: "2")
            let refusedId = newId()
            let refused = try await client.send(alice, to: conversation.id, body: "3", clientMessageId: refusedId)
            expectError(refused, 429, .rateLimited, "third send")
            // Another device has its own budget.
            let other = try await client.sendAccepted(alicePhone, to: conversation.id, body: "phone")
            let messages = try await client.waitForCount(alice, conversation.id, 3)
            #expect(messages.map(\.serverId) == [first.serverId, second.serverId, other.serverId])

            // After Retry-After the same id is a new message: the refused send was not accepted.
            let wait = Int(refused.headers["retry-after"] ?? "1") ?? 1
            try await Task.sleep(for: .seconds(wait) + .milliseconds(100))
            let retried = try await client.send(alice, to: conversation.id, body: "3", clientMessageId: refusedId)
            #expect(retried.status == 202, "\(retried.text)")
            let after = try await client.waitForCount(alice, conversation.id, 4)
            #expect(after.map(\.body) == ["1", "2", "phone", "3"])
        }
    }

    @Test func rateLimitedOverWebSocketIsAnErrorFrame() async throws {
        try await withTestServer(configure: { $0.rateLimitPerDevice = 0.25; $0.rateLimitBurst = 2 }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let ids = (0..<3).map { _ in newId() }
            for (index, id) in ids.enumerated() { socket.sendMessage(to: conversation.id, body: "\(index)", clientMessageId: id) }
            let frames = await socket.inbox.collect { $0.filter { $0.ack != nil || $0.errorFrame != nil }.count >= 3 }
            #expect(frames.compactMap(\.ack).map(\.clientMessageId) == Array(ids.prefix(2)))
            let error = frames.compactMap(\.errorFrame).first
            #expect(error?.clientMessageId == ids[2])
            #expect(error?.error.code == .rateLimited)
            let messages = try await client.waitForCount(alice, conversation.id, 2)
            #expect(messages.map(\.body) == ["0", "1"])
            await socket.close()
        }
    }

    @Test func overloadedIs503WithRetryAfterAndStoresNothing() async throws {
        let gate = SendTests.Gate()
        try await withTestServer(configure: { configuration in
            SendTests.gated(gate)(&configuration)
            configuration.maxBufferedMessages = 1
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let accepted = try await client.sendAccepted(alice, to: conversation.id, body: "accepted")
            let refusedId = newId()
            expectError(try await client.send(alice, to: conversation.id, body: "refused", clientMessageId: refusedId), 503, .overloaded, "HTTP")
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let wsId = newId()
            socket.sendMessage(to: conversation.id, body: "refused ws", clientMessageId: wsId)
            let error = await socket.first { $0.errorFrame != nil }?.errorFrame
            #expect(error?.clientMessageId == wsId)
            #expect(error?.error.code == .overloaded)
            // The Redis buffer's depth is an estimate refreshed with its heartbeat (an append racing the refresh may
            // count twice until the next): wait for it rather than read it once.
            let depthIsOne = try await eventually(within: .seconds(10)) { try await client.metric("pigeon_buffer_depth") == 1 }
            #expect(depthIsOne)
            #expect(try await client.metric("pigeon_messages_accepted_total") == 1)

            gate.open()
            let messages = try await client.waitForCount(alice, conversation.id, 1)
            #expect(messages.map(\.serverId) == [accepted.serverId])
            // Room again once the stored message's entry is acknowledged and the depth says so.
            let emptied = try await eventually(within: .seconds(10)) { try await client.metric("pigeon_buffer_depth") == 0 }
            #expect(emptied)
            // The refused ids were never accepted: sending them now creates them (202, not a 200 resend).
            let retried = try await client.send(alice, to: conversation.id, body: "refused", clientMessageId: refusedId)
            #expect(retried.status == 202, "\(retried.text)")
            _ = try await client.waitForCount(alice, conversation.id, 2)
            // Room again for the second one too (the Redis buffer's depth estimate can lag its acknowledgement until
            // the next heartbeat: CI's production pass got 503 here).
            let emptiedAgain = try await eventually(within: .seconds(10)) { try await client.metric("pigeon_buffer_depth") == 0 }
            #expect(emptiedAgain)
            let retriedWs = try await client.send(alice, to: conversation.id, body: "refused ws", clientMessageId: wsId)
            #expect(retriedWs.status == 202, "\(retriedWs.text)")
            let after = try await client.waitForCount(alice, conversation.id, 3)
            #expect(after.map(\.body) == ["accepted", "refused", "refused ws"])
            await socket.close()
        }
    }

    @Test func unknownFieldsAreIgnored() async throws {
        try await withTestServer { client in
            let register = try await client.request(.POST, "/v1/devices", body: "{\"userId\":\"alice\",\"deviceName\":\"x\",\"color\":\"blue\",\"n\":[1]}")
            #expect(register.status == 201, "\(register.text)")
            let alice = try register.decode(DeviceRegistration.self)
            let aliceDevice = TestDevice(userId: alice.userId, deviceId: alice.deviceId, token: alice.token)
            let create = try await client.request(
                .POST, "/v1/conversations", token: alice.token, body: "{\"members\":[\"bob\"],\"topic\":{\"a\":1},\"name\":\"n\"}")
            #expect(create.status == 201, "\(create.text)")
            let conversation = try create.decode(Conversation.self)
            let clientMessageId = newId()
            let send = try await client.sendRaw(
                aliceDevice, to: conversation.id,
                json: "{\"clientMessageId\":\"\(clientMessageId)\",\"type\":\"text\",\"body\":\"hi\",\"clientTimestamp\":5,\"priority\":\"high\",\"extra\":null}")
            #expect(send.status == 202, "\(send.text)")
            let messages = try await client.waitForCount(aliceDevice, conversation.id, 1)
            #expect(messages.first?.body == "hi")
            #expect(messages.first?.clientTimestamp == 5)
            #expect(messages.first?.clientMessageId == clientMessageId)
            let receipt = try await client.request(
                .POST, "/v1/conversations/\(conversation.id)/receipts", token: alice.token, body: "{\"kind\":\"read\",\"upToSeq\":1,\"device\":\"x\"}")
            #expect(receipt.status == 200, "\(receipt.text)")
            let typing = try await client.request(
                .POST, "/v1/conversations/\(conversation.id)/typing", token: alice.token, body: "{\"active\":true,\"x\":1}")
            #expect(typing.status == 204, "\(typing.text)")
            // Over WebSocket too.
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let wsId = newId()
            socket.sendRaw(
                "{\"op\":\"send\",\"conversationId\":\"\(conversation.id)\",\"clientMessageId\":\"\(wsId)\",\"type\":\"text\",\"body\":\"ws\",\"clientTimestamp\":1,\"unknown\":true}")
            let ack = await socket.first { $0.ack != nil || $0.errorFrame != nil }
            #expect(ack?.ack?.clientMessageId == wsId, "\(String(describing: ack))")
            await socket.close()
        }
    }

    @Test func malformedWebSocketOperationsGetInvalidRequestFrames() async throws {
        try await withTestServer { client in
            let f = try await Fixture.make(client)
            let before = try await Snapshot.take(client, f)
            let socket = try await TestWebSocket.connect(port: client.port, token: f.alice.token)
            let c = f.conversation.id
            let id = newId()
            let operations = [
                "{", "not json", "{}", "{\"op\":\"dance\",\"conversationId\":\"\(c)\"}",
                "{\"op\":\"send\",\"conversationId\":\"\(c)\",\"clientMessageId\":\"\(id)\",\"type\":\"text\",\"body\":\"x\"}",
                "{\"op\":\"send\",\"conversationId\":\"\(c)\",\"clientMessageId\":\"bad\",\"type\":\"text\",\"body\":\"x\",\"clientTimestamp\":1}",
                "{\"op\":\"send\",\"conversationId\":\"\(c)\",\"clientMessageId\":\"\(newId())\",\"type\":\"Text\",\"body\":\"x\",\"clientTimestamp\":1}",
                "{\"op\":\"send\",\"conversationId\":\"nope\",\"clientMessageId\":\"\(newId())\",\"type\":\"text\",\"body\":\"x\",\"clientTimestamp\":1}",
                "{\"op\":\"receipt\",\"conversationId\":\"\(c)\",\"kind\":\"seen\",\"upToSeq\":1}",
                "{\"op\":\"typing\",\"conversationId\":\"\(c)\",\"active\":\"yes\"}",
                "{\"op\":\"send\",\"conversationId\":\"\(c)\",\"clientMessageId\":\"\(newId())\",\"type\":\"text\",\"body\":\"\\u0000\",\"clientTimestamp\":1}",
            ]
            for operation in operations {
                socket.sendRaw(operation)
                let error = await socket.first { $0.errorFrame != nil }?.errorFrame
                #expect(error?.error.code == .invalidRequest, "\(operation): \(String(describing: error))")
                #expect(error?.error.message.isEmpty == false)
            }
            try await expectNothingChanged(client, f, since: before)
            await socket.close()
        }
    }
}
