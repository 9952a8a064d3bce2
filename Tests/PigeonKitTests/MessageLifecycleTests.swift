import Foundation
import NIOConcurrencyHelpers
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Editing and deleting (API.md 1.1) against a real in-process server: through the outbox in the conversation's
/// order, offline too, shown at once, confirmed when stored, undone when refused; and what search finds.
@Suite(.timeLimit(.minutes(3)))
struct MessageLifecycleTests {
    @Test(arguments: [PigeonClient.StreamTransport.webSocket, .serverSentEvents])
    func editsAndDeletesMadeOfflineGoOutInOrderAfterTheirTargets(stream: PigeonClient.StreamTransport) async throws {
        try await withKitTestServer { server in
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) { $0.streamTransport = stream }
            let bob = try await TestDevice.register("bob", on: server.url)
            let operations = NIOLockedValueBox<[ClientOperation]>([])
            faulty.setOperationObserver { operation in
                if case .receipt = operation { return }
                if case .typing = operation { return }
                operations.withLockedValue { $0.append(operation) }
            }
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            let draft = try alice.client.send("first draft of the plan", to: conversation)
            let edit = try alice.client.edit(localId: draft.localId, body: "final plan")
            let oops = try alice.client.send("oops wrong chat", to: conversation)
            let deletion = try alice.client.delete(localId: oops.localId)
            let last = try alice.client.send("see you", to: conversation)
            // Shown at once, before anything left the device.
            #expect(try alice.message(draft.localId).body == "final plan" && alice.message(draft.localId).editedAt != nil)
            #expect(try alice.message(oops.localId).body == "" && alice.message(oops.localId).deletedAt != nil)
            #expect(try alice.allMessages(in: conversation).map(\.body) == ["final plan", "", "see you"])
            #expect(try alice.client.unsentMessages().map(\.localId) == [draft, edit, oops, deletion, last].map(\.localId))
            #expect(try alice.client.search("draft").isEmpty && alice.client.search("plan").map(\.localId) == [draft.localId])
            #expect(try alice.client.search("oops").isEmpty)
            #expect(operations.withLockedValue { $0 }.isEmpty)

            alice.client.setNetworkEnabled(true)
            for message in [draft, edit, oops, deletion, last] { try await alice.waitForStatus(message.localId, atLeast: .stored) }
            let sent = operations.withLockedValue { $0 }
            let draftId = try #require(alice.message(draft.localId).serverId)
            let oopsId = try #require(alice.message(oops.localId).serverId)
            #expect(sent.count == 5, "\(sent)")
            guard sent.count == 5 else { return }
            #expect(sent[0] == .send(conversationId: conversation, SendMessageRequest(
                clientMessageId: draft.clientMessageId, type: "text", body: "first draft of the plan", clientTimestamp: draft.clientTimestamp)),
                "the message goes with the text it was sent with")
            #expect(sent[1] == .edit(conversationId: conversation, serverId: draftId, EditMessageRequest(
                clientMessageId: edit.clientMessageId, body: "final plan", clientTimestamp: edit.clientTimestamp)))
            if case .send(_, let request) = sent[2] { #expect(request.clientMessageId == oops.clientMessageId) } else { Issue.record("\(sent[2])") }
            #expect(sent[3] == .delete(conversationId: conversation, serverId: oopsId, DeleteMessageRequest(
                clientMessageId: deletion.clientMessageId, clientTimestamp: deletion.clientTimestamp)))
            if case .send(_, let request) = sent[4] { #expect(request.clientMessageId == last.clientMessageId) } else { Issue.record("\(sent[4])") }

            let history = try await server.history(conversationId: conversation, token: bob.credentials.token)
            #expect(history.map(\.type) == ["text", ServerMessageType.edit, "text", ServerMessageType.delete, "text"])
            #expect(history[0].body == "final plan" && history[0].editedAt != nil)
            #expect(history[2].body == "" && history[2].deletedAt != nil)
            let confirmed = try alice.message(draft.localId)
            #expect(confirmed.body == "final plan" && confirmed.editedAt == history[1].storedAt, "confirmed with the server's time")

            // Bob's device: the same texts, in place, found by the right words.
            try await waitUntil("bob has all five") { try bob.client.conversation(id: conversation)?.contiguousSeq == 5 }
            #expect(try bob.allMessages(in: conversation).map(\.body) == ["final plan", "", "see you"])
            #expect(try bob.allMessages(in: conversation)[1].deletedAt != nil)
            #expect(try bob.client.search("draft").isEmpty && bob.client.search("final").count == 1 && bob.client.search("oops").isEmpty)
            #expect(await eventually { bob.events.contains { if case .messageEdited(let m) = $0 { m.body == "final plan" } else { false } } })
            #expect(await eventually { bob.events.contains { if case .messageDeleted(let m) = $0 { m.serverId == oopsId } else { false } } })
            #expect(!bob.received.contains { $0.isChange }, "edits and deletions are not announced as messages")
            for message in [edit, deletion] {
                #expect(isMonotonic(alice.statusHistory(localId: message.localId)))
                #expect(try alice.message(message.localId).status == .stored, "an edit has no ✓✓ of its own")
            }
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func anEditOfAnotherUsersMessageIsRefusedAndUndone() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            try bob.client.send("bob's own words", to: conversation)
            try await waitUntil("alice has it") { alice.received.contains { $0.body == "bob's own words" } }
            let target = try #require(alice.received.first { $0.body == "bob's own words" })

            let edit = try alice.client.edit(localId: target.localId, body: "alice's words")
            #expect(try alice.message(target.localId).body == "alice's words", "shown at once: the server decides")
            try await waitUntil("the edit fails") { try alice.message(edit.localId).status == .failed }
            #expect(try alice.message(edit.localId).failure?.code == .forbidden)
            #expect(try alice.message(target.localId).body == "bob's own words" && alice.message(target.localId).editedAt == nil)
            #expect(try alice.client.search("alice").isEmpty && alice.client.search("own words").count == 1)
            #expect(await eventually {
                alice.events.contains {
                    if case .messageChangeFailed(let change, let message) = $0 {
                        change.localId == edit.localId && message.localId == target.localId && message.body == "bob's own words"
                    } else {
                        false
                    }
                }
            })
            #expect(try alice.client.unsentMessages().map(\.localId) == [edit.localId], "kept for a retry, like a failed send")
            let deletion = try alice.client.delete(localId: target.localId)
            try await waitUntil("the deletion fails too") { try alice.message(deletion.localId).status == .failed }
            #expect(try alice.message(target.localId).body == "bob's own words")
            #expect(try bob.allMessages(in: conversation).map(\.body) == ["bob's own words"])
            #expect(try await server.history(conversationId: conversation, token: bob.credentials.token).map(\.body) == ["bob's own words"])
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// An edit made on one device of a user reaches its other device and the other members in place; a later send
    /// after it keeps its order.
    @Test func anEditFromAnotherDeviceOfTheSameUserAppliesInPlace() async throws {
        try await withKitTestServer { server in
            let phone = try await TestDevice.register("alice", on: server.url)
            let laptop = try await TestDevice.register("alice", on: server.url, existing: phone)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(phone, laptop, bob)
            let conversation = try await makeConversation([phone, laptop, bob])
            let original = try phone.client.send("lunch at noon", to: conversation)
            try await phone.waitForStatus(original.localId, atLeast: .stored)
            try await waitUntil("the laptop has it") { try laptop.allMessages(in: conversation).count == 1 }
            let onLaptop = try #require(laptop.allMessages(in: conversation).first)
            #expect(onLaptop.isOutgoing)
            let edit = try laptop.client.edit(localId: onLaptop.localId, body: "lunch at one")
            try await laptop.waitForStatus(edit.localId, atLeast: .stored)
            for device in [phone, bob] {
                try await waitUntil("\(device.userId) sees the edit") { try device.allMessages(in: conversation).first?.body == "lunch at one" }
            }
            #expect(try phone.message(original.localId).editedAt != nil)
            #expect(try phone.message(original.localId).status >= .stored, "the edit does not touch the message's ticks")
            for device in [phone, laptop, bob] { await device.client.stop() }
        }
    }
}

/// The app's before-send hook answered `replace`: the sender's own copy reads as stored once the answer says
/// `bodyReplaced` (a send and an edit, over HTTP and over the WebSocket), as every other member reads it.
@Suite(.timeLimit(.minutes(3)))
struct ReplacedBodyTests {
    /// A server whose before-send hook replaces any text with "secret" in it by "[redacted]" and allows the rest.
    private func withRedactingHook(_ body: (KitTestServer) async throws -> Void) async throws {
        let hook = try await WebhookReceiver.start()
        defer { Task { await hook.stop() } }
        hook.answer { request in
            let text = ((request.json?["message"] as? [String: Any])?["body"] as? String) ?? ""
            return text.contains("secret") ? .json(#"{"action":"replace","body":"[redacted]"}"#) : .json(#"{"action":"allow"}"#)
        }
        try await withKitTestServer(configure: { configuration in
            configuration.appBackend.beforeSendHookURL = hook.url
            configuration.appBackend.webhookSecret = "hook-secret-for-tests-0123456789"
        }, body)
    }

    @Test(arguments: [PigeonClient.StreamTransport.webSocket, .serverSentEvents])
    func theSendersCopyReadsAsStored(stream: PigeonClient.StreamTransport) async throws {
        try await withRedactingHook { server in
            let alice = try await TestDevice.register("alice", on: server.url) { $0.streamTransport = stream }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let sent = try alice.client.send("my secret is 1234", to: conversation)
            try await alice.waitForStatus(sent.localId, atLeast: .stored)
            try await waitUntil("alice's copy reads as stored") { try alice.message(sent.localId).body == "[redacted]" }
            let plain = try alice.client.send("hello", to: conversation)
            try await alice.waitForStatus(plain.localId, atLeast: .stored)
            let edit = try alice.client.edit(localId: plain.localId, body: "hello, secret")
            try await alice.waitForStatus(edit.localId, atLeast: .stored)
            try await waitUntil("the edited message reads as stored") { try alice.message(plain.localId).body == "[redacted]" }
            #expect(try alice.client.search("secret").isEmpty, "the search finds what is stored, not what was typed")
            let history = try await server.history(conversationId: conversation, token: bob.credentials.token)
            #expect(history.first?.body == "[redacted]")
        }
    }

    /// Over HTTP the stream can say an edit is stored before the edit's own answer (which says the hook replaced its
    /// body) arrives: the edited message still reads as stored, not as typed. (It kept the typed body: the edit's
    /// stored evidence had already applied the typed body to the message's confirmed revision.)
    @Test func anEditStoredBeforeItsAnswerArrivesStillReadsAsStored() async throws {
        try await withRedactingHook { server in
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) { $0.streamTransport = .serverSentEvents }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let plain = try alice.client.send("hello", to: conversation)
            try await alice.waitForStatus(plain.localId, atLeast: .stored)
            faulty.holdAnswers(.edit)
            let edit = try alice.client.edit(localId: plain.localId, body: "hello, secret")
            try await waitUntil("the edit's answer is held back") { faulty.heldAnswerCount(.edit) == 1 }
            try await alice.waitForStatus(edit.localId, atLeast: .stored)
            faulty.releaseAnswers(.edit)
            try await waitUntil("the edit's answer is applied") { faulty.heldAnswerCount(.edit) == 0 }
            try await waitUntil("the edited message reads as stored", describe: { (try? alice.message(plain.localId).body) ?? "?" }) {
                try alice.message(plain.localId).body == "[redacted]"
            }
            #expect(try alice.client.search("secret").isEmpty, "the search finds what is stored, not what was typed")
            await alice.client.stop()
            await bob.client.stop()
        }
    }
}
