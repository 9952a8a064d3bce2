import AsyncHTTPClient
import Foundation
import NIOHTTP1
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md 1.1 "Editing and deleting a message", through the real HTTP, WebSocket and sync stack.
@Suite struct EditDeleteTests {
    static func edit(_ client: PigeonTestClient, _ device: TestDevice, _ conversationId: String, _ serverId: String, body: String,
        clientMessageId: String = newId()) async throws -> HTTPAnswer
    {
        try await client.request(
            .POST, "/v1/conversations/\(conversationId)/messages/\(serverId)/edit", token: device.token,
            body: client.json(EditMessageRequest(clientMessageId: clientMessageId, body: body, clientTimestamp: 1_763_700_000_000)))
    }

    static func delete(_ client: PigeonTestClient, _ device: TestDevice, _ conversationId: String, _ serverId: String,
        clientMessageId: String = newId()) async throws -> HTTPAnswer
    {
        try await client.request(
            .POST, "/v1/conversations/\(conversationId)/messages/\(serverId)/delete", token: device.token,
            body: client.json(DeleteMessageRequest(clientMessageId: clientMessageId, clientTimestamp: 1_763_700_000_000)))
    }

    @Test func anEditIsOrderedLikeAMessageAndTheTargetReadsWithItsNewText() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let bobCursor = try await client.headCursor(bob)
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "helo")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let bobStream = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobStream.close() } }

            let editId = newId()
            let answer = try await Self.edit(client, alice, conversation.id, sent.serverId, body: "hello", clientMessageId: editId)
            #expect(answer.status == 202, "\(answer.text)")
            let accepted = try answer.decode(SendMessageResponse.self)
            #expect(accepted.clientMessageId == editId && accepted.status == .queued)
            let messages = try await client.waitForCount(alice, conversation.id, 2)
            #expect(messages[0].body == "hello")
            #expect(messages[0].editedAt.map { $0 >= messages[0].storedAt } == true)
            #expect(messages[0].deletedAt == nil)
            #expect(messages[1].type == "pigeon.edit" && messages[1].seq == 2 && messages[1].serverId == accepted.serverId)
            #expect(try JSONDecoder().decode(EditBody.self, from: Data(messages[1].body.utf8)) == EditBody(serverId: sent.serverId, body: "hello"))
            // Live to the other member, and in sync the target reads with its latest text.
            let live = await bobStream.firstEvent { if case .messageNew(_, let m) = $0 { m.seq == 2 } else { false } }
            #expect(live != nil)
            let synced = try await client.sync(bob, cursor: bobCursor).events.compactMap { event -> Message? in
                if case .messageNew(_, let m) = event { m } else { nil }
            }
            #expect(synced.map(\.body).first == "hello")
            #expect(synced.first?.editedAt != nil)
            // A resend of the edit: the original answer.
            let again = try await Self.edit(client, alice, conversation.id, sent.serverId, body: "hello", clientMessageId: editId)
            #expect(again.status == 200, "\(again.text)")
            #expect(try again.decode(SendMessageResponse.self).serverId == accepted.serverId)
            #expect(try await client.allMessages(alice, conversation.id).count == 2)
        }
    }

    @Test func aDeleteErasesTheTextOfTheTargetAndOfItsEdits() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let bobCursor = try await client.headCursor(bob)
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "my secret")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            #expect(try await Self.edit(client, alice, conversation.id, sent.serverId, body: "my other secret").status == 202)
            _ = try await client.waitForCount(alice, conversation.id, 2)
            let deleteId = newId()
            let deleted = try await Self.delete(client, alice, conversation.id, sent.serverId, clientMessageId: deleteId)
            #expect(deleted.status == 202, "\(deleted.text)")
            let messages = try await client.waitForCount(alice, conversation.id, 3)
            #expect(messages[0].body == "" && messages[0].deletedAt != nil)
            #expect(messages[1].body == "{\"serverId\":\"\(sent.serverId)\",\"body\":\"\"}", "the edit's text is erased too")
            #expect(messages[2].type == "pigeon.delete" && messages[2].body == "{\"serverId\":\"\(sent.serverId)\",\"by\":\"alice\"}")
            // Nowhere to be read: history, sync, the conversation's lastMessage.
            let synced = try await client.request(.GET, "/v1/sync?cursor=\(bobCursor)&limit=100", token: bob.token)
            #expect(!synced.text.contains("secret"), "\(synced.text)")
            let history = try await client.request(.GET, "/v1/conversations/\(conversation.id)/messages?after=0", token: bob.token)
            #expect(!history.text.contains("secret"), "\(history.text)")
            // Refused afterwards: editing or deleting it again (nothing written); a resend of the delete is answered.
            expectError(try await Self.edit(client, alice, conversation.id, sent.serverId, body: "back"), 400, .invalidRequest, "edit of a deleted")
            expectError(try await Self.delete(client, alice, conversation.id, sent.serverId), 400, .invalidRequest, "second delete")
            let resend = try await Self.delete(client, alice, conversation.id, sent.serverId, clientMessageId: deleteId)
            #expect(resend.status == 200, "\(resend.text)")
            #expect(try resend.decode(SendMessageResponse.self).seq == 3)
            #expect(try await client.conversation(alice, conversation.id).lastSeq == 3)
        }
    }

    @Test func onlyTheSendersUserMayChangeAMessage() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let alicePhone = try await client.register("alice", existing: alice)
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"], name: "g")
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "mine")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            expectError(try await Self.edit(client, bob, conversation.id, sent.serverId, body: "yours"), 403, .forbidden, "another user's edit")
            expectError(try await Self.delete(client, bob, conversation.id, sent.serverId), 403, .forbidden, "another user's delete")
            // Another device of the sender's user may.
            #expect(try await Self.edit(client, alicePhone, conversation.id, sent.serverId, body: "still mine").status == 202)
            let messages = try await client.waitForCount(alice, conversation.id, 2)
            #expect(messages[0].body == "still mine")
            // The server's own messages cannot be changed; malformed ids and bodies are refused.
            #expect(try await client.request(.PATCH, "/v1/conversations/\(conversation.id)", token: alice.token, body: "{\"name\":\"h\"}").status == 200)
            let change = try #require(try await client.waitForCount(alice, conversation.id, 3).last)
            expectError(try await Self.edit(client, alice, conversation.id, change.serverId, body: "x"), 400, .invalidRequest, "a pigeon.members")
            expectError(try await Self.edit(client, alice, conversation.id, messages[1].serverId, body: "x"), 400, .invalidRequest, "a pigeon.edit")
            expectError(try await Self.edit(client, alice, conversation.id, "not-a-uuid", body: "x"), 400, .invalidRequest, "malformed serverId")
            expectError(
                try await client.request(
                    .POST, "/v1/conversations/\(conversation.id)/messages/\(sent.serverId)/edit", token: alice.token, body: "{\"body\":\"x\"}"),
                400, .invalidRequest, "no clientMessageId")
            let tooLong = String(repeating: "x", count: 70_000)
            expectError(try await Self.edit(client, alice, conversation.id, sent.serverId, body: tooLong), 413, .payloadTooLarge, "body too large")
            #expect(try await client.allMessages(alice, conversation.id).count == 3, "nothing written by the refusals")
            #expect(try await client.allMessages(alice, conversation.id).first?.body == "still mine")
        }
    }

    /// A target the server has not stored when the edit is accepted: a separate ingest buffer accepts the edit (the
    /// target may still be queued) and processing refuses it with `message.failed`; the embedded one-write default
    /// stores at accept, so it knows and answers `404` at once. Either way nothing is written.
    @Test(arguments: [false, true])
    func anUnknownTargetIsRefusedAtAcceptOrByProcessing(separateBuffer: Bool) async throws {
        try await withTestServer(configure: { $0.separateEmbeddedBuffer = separateBuffer }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await socket.close() } }
            let editId = newId()
            socket.send(
                .edit(conversationId: conversation.id, serverId: newId(), EditMessageRequest(clientMessageId: editId, body: "x", clientTimestamp: 1)))
            let answer = await socket.first { frame in
                switch frame {
                case .ack(let ack): ack.clientMessageId == editId
                case .error(let error): error.clientMessageId == editId
                case .event: false
                }
            }
            let oneWrite = TestBackend.current == .embedded && !separateBuffer
            switch answer {
            case .error(let frame)? where oneWrite:
                #expect(frame.error.code == .notFound)
            case .ack? where !oneWrite:
                let failed = await socket.firstEvent { if case .messageFailed = $0 { true } else { false } }
                guard case .messageFailed(_, let event)? = failed else { Issue.record("no message.failed"); return }
                #expect(event.clientMessageId == editId && event.error.code == .notFound)
            default:
                Issue.record("unexpected answer \(String(describing: answer)) (one write: \(oneWrite))")
            }
            #expect(try await client.conversation(alice, conversation.id).lastSeq == 0)
        }
    }

    @Test func theWebSocketEditsAndDeletesAndAnswersRefusalsWithErrorFrames() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "first")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await aliceSocket.close(); await bobSocket.close() } }
            let refusedId = newId()
            bobSocket.send(.delete(conversationId: conversation.id, serverId: sent.serverId, DeleteMessageRequest(clientMessageId: refusedId, clientTimestamp: 1)))
            let refusal = await bobSocket.first { if case .error(let frame) = $0 { frame.clientMessageId == refusedId } else { false } }
            guard case .error(let frame)? = refusal else { Issue.record("no error frame"); return }
            #expect(frame.error.code == .forbidden)
            let editId = newId()
            let deleteId = newId()
            aliceSocket.send(
                .edit(conversationId: conversation.id, serverId: sent.serverId, EditMessageRequest(clientMessageId: editId, body: "second", clientTimestamp: 1)))
            aliceSocket.send(.delete(conversationId: conversation.id, serverId: sent.serverId, DeleteMessageRequest(clientMessageId: deleteId, clientTimestamp: 2)))
            for id in [editId, deleteId] {
                let ack = await aliceSocket.first { if case .ack(let ack) = $0 { ack.clientMessageId == id } else { false } }
                #expect(ack != nil, "ack for \(id)")
            }
            let stored = await aliceSocket.firstEvent { if case .messageStored(_, let e) = $0 { e.clientMessageId == deleteId } else { false } }
            guard case .messageStored(_, let event)? = stored else { Issue.record("no message.stored for the delete"); return }
            #expect(event.seq == 3, "edit then delete, in the socket's order")
            let messages = try await client.allMessages(bob, conversation.id)
            #expect(messages.map(\.type) == ["text", "pigeon.edit", "pigeon.delete"])
            #expect(messages[0].body == "" && messages[0].editedAt != nil && messages[0].deletedAt != nil)
        }
    }
}
