import Foundation
import NIOHTTP1
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.2 "The before-send hook": a real hook server (``BeforeSendHookServer``) asked by a real Pigeon server,
/// over HTTP and the WebSocket.
@Suite struct BeforeSendHookTests {
    /// A server whose before-send hook is `hook`.
    static func withHookedServer<T: Sendable>(
        timeoutMs: Int = 2_000, onFailure: AppBackendConfiguration.HookFailurePolicy = .allow, maxInFlight: Int = 256,
        _ body: @Sendable (PigeonTestClient, BeforeSendHookServer) async throws -> T
    ) async throws -> T {
        try await BeforeSendHookServer.with { hook, url in
            try await withTestServer(configure: { configuration in
                configuration.appBackend.beforeSendHookURL = url
                configuration.appBackend.webhookSecret = BeforeSendHookServer.secret
                configuration.appBackend.beforeSendTimeout = .milliseconds(timeoutMs)
                configuration.appBackend.beforeSendOnFailure = onFailure
                configuration.appBackend.beforeSendMaxInFlight = maxInFlight
            }) { client in try await body(client, hook) }
        }
    }

    /// Alice and bob in a conversation.
    static func pair(_ client: PigeonTestClient) async throws -> (TestDevice, TestDevice, Conversation) {
        let alice = try await client.register("alice")
        let bob = try await client.register("bob")
        return (alice, bob, try await client.createConversation(alice, members: ["bob"]))
    }

    @Test func anAllowedSendIsAskedWithTheWholeMessageSignedAndStoredAsSent() async throws {
        try await Self.withHookedServer { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            let id = newId()
            let answer = try await client.send(alice, to: conversation.id, body: "hello", clientMessageId: id)
            #expect(answer.status == 202, "\(answer.text)")
            #expect(answer.jsonObject?["bodyReplaced"] == nil, "\(answer.text)")
            let call = try #require(hook.received.first)
            #expect(call.signatureValid)
            #expect(call.json["type"] as? String == "before_send")
            #expect(call.isEdit == false)
            let message = call.message
            #expect(message["conversationId"] as? String == conversation.id)
            #expect(message["senderId"] as? String == "alice")
            #expect(message["senderDeviceId"] as? String == alice.deviceId)
            #expect(message["clientMessageId"] as? String == id)
            #expect(message["type"] as? String == "text" && message["body"] as? String == "hello")
            #expect(message["clientTimestamp"] as? Int == 1_763_700_000_000)
            #expect(message["replyTo"] is NSNull && message["threadRoot"] is NSNull)
            #expect((message["attachments"] as? [Any])?.isEmpty == true)
            let stored = try await client.waitForCount(alice, conversation.id, 1)
            #expect(stored.map(\.body) == ["hello"])
            #expect(try await client.metric("pigeon_before_send_calls_total") == 1)
            #expect(try await client.metric("pigeon_before_send_decisions_total{outcome=\"allow\"}") == 1)
        }
    }

    @Test func aRejectedSendIsRefused403WithTheReasonStoresNothingAndItsResendAsksAgain() async throws {
        try await Self.withHookedServer { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            hook.respond { call in call.messageBody == "spam" ? .reject("no spam here") : .allow }
            let id = newId()
            let refused = try await client.send(alice, to: conversation.id, body: "spam", clientMessageId: id)
            expectError(refused, 403, .rejected, "rejected send")
            #expect((try? refused.decode(ErrorBody.self))?.error.message == "no spam here")
            // Nothing stored: the next message takes seq 1.
            _ = try await client.sendAccepted(alice, to: conversation.id, body: "fine")
            let stored = try await client.waitForCount(alice, conversation.id, 1)
            #expect(stored.map(\.body) == ["fine"] && stored.map(\.seq) == [1])
            // The same clientMessageId asks again, and may now be allowed.
            hook.respond { _ in .allow }
            let resent = try await client.send(alice, to: conversation.id, body: "spam", clientMessageId: id)
            #expect(resent.status == 202, "\(resent.text)")
            #expect(hook.received.filter { $0.clientMessageId == id }.count == 2)
            let after = try await client.waitForCount(alice, conversation.id, 2)
            #expect(after.map(\.body) == ["fine", "spam"])
            #expect(try await client.metric("pigeon_before_send_decisions_total{outcome=\"reject\"}") == 1)
        }
    }

    @Test func aRejectedWebSocketSendGetsAnErrorFrameNamingItAndTheSocketsOrderHolds() async throws {
        try await Self.withHookedServer { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            hook.respond { call in call.messageBody?.hasPrefix("bad") == true ? .reject("not allowed: \(call.messageBody ?? "")") : .allow }
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await socket.close() } }
            let ids = (0..<6).map { _ in newId() }
            let bodies = ["one", "bad two", "three", "four", "bad five", "six"]
            for (id, body) in zip(ids, bodies) { socket.sendMessage(to: conversation.id, body: body, clientMessageId: id) }
            var acked: [String] = []
            var refused: [String: ErrorDetail] = [:]
            while acked.count + refused.count < ids.count {
                guard let frame = await socket.first(where: { if case .event = $0 { false } else { true } }) else { break }
                switch frame {
                case .ack(let ack): acked.append(ack.clientMessageId)
                case .error(let error): refused[error.clientMessageId ?? ""] = error.error
                case .event: break
                }
            }
            #expect(acked == [ids[0], ids[2], ids[3], ids[5]])
            #expect(refused[ids[1]]?.code == .rejected && refused[ids[1]]?.message == "not allowed: bad two")
            #expect(refused[ids[4]]?.code == .rejected)
            let stored = try await client.waitForCount(alice, conversation.id, 4)
            #expect(stored.map(\.body) == ["one", "three", "four", "six"])
        }
    }

    /// A socket's sends are asked side by side (the hook holds the first until four are waiting; asked one at a time,
    /// it would time out and, under the reject policy, be refused) and still stored in the socket's order, though the
    /// hook answers the last first; an edit and a delete behind them keep their place too.
    @Test func aSocketsSendsAreAskedTogetherAndStoredInItsOrder() async throws {
        try await Self.withHookedServer(timeoutMs: 10_000, onFailure: .reject) { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "zero")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await socket.close() } }
            hook.holdUntil(4)
            let ids = (1...3).map { _ in newId() }
            for (index, id) in ids.enumerated() { socket.sendMessage(to: conversation.id, body: "message \(index + 1)", clientMessageId: id) }
            let editId = newId()
            socket.send(
                .edit(
                    conversationId: conversation.id, serverId: first.serverId,
                    EditMessageRequest(clientMessageId: editId, body: "zero, edited", clientTimestamp: 1_763_700_000_000)))
            let deleteId = newId()
            socket.send(
                .delete(
                    conversationId: conversation.id, serverId: first.serverId,
                    DeleteMessageRequest(clientMessageId: deleteId, clientTimestamp: 1_763_700_000_000)))
            var answered: [String] = []
            while answered.count < 5 {
                guard let frame = await socket.first(where: { if case .event = $0 { false } else { true } }) else { break }
                switch frame {
                case .ack(let ack): answered.append(ack.clientMessageId)
                case .error(let error): Issue.record("refused: \(error)")
                case .event: break
                }
            }
            #expect(answered == ids + [editId, deleteId])
            let stored = try await client.waitForCount(alice, conversation.id, 6)
            #expect(stored.map(\.clientMessageId) == [first.clientMessageId] + ids + [editId, deleteId])
            #expect(stored.first?.deletedAt != nil)
        }
    }

    @Test func aReplacedBodyIsStoredDeliveredAndSaidInTheAnswer() async throws {
        try await Self.withHookedServer { client, hook in
            let (alice, bob, conversation) = try await Self.pair(client)
            hook.respond { call in .replace((call.messageBody ?? "").replacingOccurrences(of: "darn", with: "****")) }
            let bobStream = try await TestWebSocket.connect(port: client.port, token: bob.token)
            defer { Task { await bobStream.close() } }
            let answer = try await client.send(alice, to: conversation.id, body: "oh darn")
            #expect(answer.status == 202, "\(answer.text)")
            #expect(answer.jsonObject?["bodyReplaced"] as? Bool == true)
            let live = await bobStream.firstEvent { if case .messageNew = $0 { true } else { false } }
            guard case .messageNew(_, let message)? = live else { throw TestFailure("bob got no message.new") }
            #expect(message.body == "oh ****")
            #expect(try await client.waitForCount(alice, conversation.id, 1).map(\.body) == ["oh ****"])
            // Over the WebSocket, the ack says it too.
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            defer { Task { await socket.close() } }
            let id = newId()
            socket.sendMessage(to: conversation.id, body: "darn it", clientMessageId: id)
            let ack = await socket.first { if case .ack(let ack) = $0 { ack.clientMessageId == id } else { false } }
            guard case .ack(let frame)? = ack else { throw TestFailure("no ack") }
            #expect(frame.bodyReplaced == true)
            #expect(try await client.waitForCount(alice, conversation.id, 2).map(\.body) == ["oh ****", "**** it"])
        }
    }

    @Test func anEditIsAskedWithEditTrueAndCanBeReplacedButADeleteIsNotAsked() async throws {
        try await Self.withHookedServer { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "first")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            hook.respond { call in call.isEdit == true ? .replace("edited by the app") : .allow }
            let edit = try await EditDeleteTests.edit(client, alice, conversation.id, sent.serverId, body: "second")
            #expect(edit.status == 202 && edit.jsonObject?["bodyReplaced"] as? Bool == true, "\(edit.text)")
            let call = try #require(hook.received.last)
            #expect(call.isEdit == true && call.messageBody == "second" && call.message["serverId"] as? String == sent.serverId)
            #expect(call.message["type"] as? String == "pigeon.edit")
            let messages = try await client.waitForMessages(alice, conversation.id) { $0.first?.body == "edited by the app" }
            #expect(messages.first?.body == "edited by the app" && messages.first?.editedAt != nil)
            // A rejected edit changes nothing.
            hook.respond { call in call.isEdit == true ? .reject("frozen") : .allow }
            expectError(try await EditDeleteTests.edit(client, alice, conversation.id, sent.serverId, body: "third"), 403, .rejected, "edit")
            let calls = hook.received.count
            let delete = try await EditDeleteTests.delete(client, alice, conversation.id, sent.serverId)
            #expect(delete.status == 202, "\(delete.text)")
            #expect(hook.received.count == calls)
            let final = try await client.waitForMessages(alice, conversation.id) { $0.first?.deletedAt != nil }
            #expect(final.count == 3 && final.first?.body == "")
        }
    }

    /// One user's flood of pipelined WebSocket sends takes only its share of the calls in flight (the rest are refused
    /// `429` before any call), so another user's message is still checked: under `reject` it is stored, not refused
    /// for a pool the flood filled (with 32 calls in flight at most: a device's share is 1, a user's 2).
    @Test func oneUsersFloodDoesNotDecideWhetherOthersAreChecked() async throws {
        try await Self.withHookedServer(timeoutMs: 10_000, onFailure: .reject, maxInFlight: 32) { client, hook in
            let (mallory, bob, conversation) = try await Self.pair(client)
            let bobs = try await client.createConversation(bob, members: ["carol"])
            hook.respond { call in
                call.messageBody?.hasPrefix("flood") == true ? .after(.seconds(2), #"{"action":"allow"}"#) : .allow
            }
            let socket = try await TestWebSocket.connect(port: client.port, token: mallory.token)
            defer { Task { await socket.close() } }
            let ids = (0..<40).map { _ in newId() }
            for (index, id) in ids.enumerated() { socket.sendMessage(to: conversation.id, body: "flood \(index)", clientMessageId: id) }
            try await waitUntil("the hook is asked about the flood") { hook.received.contains { $0.messageBody?.hasPrefix("flood") == true } }
            let answer = try await client.send(bob, to: bobs.id, body: "bob's message")
            #expect(answer.status == 202, "\(answer.text)")
            #expect(hook.received.contains { $0.messageBody == "bob's message" }, "bob's message was checked")
            var limited = 0
            var acked = 0
            while limited + acked < ids.count {
                guard let frame = await socket.first(timeout: .seconds(30), where: { if case .event = $0 { false } else { true } }) else { break }
                switch frame {
                case .ack: acked += 1
                case .error(let error):
                    #expect(error.error.code == .rateLimited, "\(error)")
                    limited += 1
                case .event: break
                }
            }
            #expect(limited > 0 && acked > 0 && limited + acked == ids.count, "\(acked) acked, \(limited) limited")
            #expect(hook.received.filter { $0.messageBody?.hasPrefix("flood") == true }.count == acked, "no call for a refused send")
            #expect(try await client.metric("pigeon_before_send_limited_total") == Double(limited))
            #expect(try await client.metric("pigeon_before_send_decisions_total{outcome=\"failure\"}") == 0)
        }
    }

    @Test func aTimeoutAllowsUnderTheAllowPolicy() async throws {
        try await Self.withHookedServer(timeoutMs: 200, onFailure: .allow) { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            hook.respond { _ in .after(.seconds(3), #"{"action":"reject","reason":"too late"}"#) }
            let answer = try await client.send(alice, to: conversation.id, body: "slow hook")
            #expect(answer.status == 202, "\(answer.text)")
            #expect(try await client.waitForCount(alice, conversation.id, 1).map(\.body) == ["slow hook"])
            #expect(try await client.metric("pigeon_before_send_decisions_total{outcome=\"failure\"}") == 1)
        }
    }

    @Test func aTimeoutRejectsUnderTheRejectPolicy() async throws {
        try await Self.withHookedServer(timeoutMs: 200, onFailure: .reject) { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            hook.respond { _ in .after(.seconds(3), #"{"action":"allow"}"#) }
            let answer = try await client.send(alice, to: conversation.id, body: "slow hook")
            expectError(answer, 403, .rejected, "timed out under reject")
            #expect((try? answer.decode(ErrorBody.self))?.error.message.contains("could not check") == true, "\(answer.text)")
            hook.respond { _ in .allow }
            // A resend of the same clientMessageId asks again; on a loaded machine the first answers may still miss the
            // 200 ms deadline, so it is resent until the hook's allow arrives in time.
            let clientMessageId = newId()
            try await waitUntil("the resend is allowed") {
                try await client.send(alice, to: conversation.id, body: "then", clientMessageId: clientMessageId).status == 202
            }
            #expect(try await client.waitForCount(alice, conversation.id, 1).map(\.body) == ["then"])
        }
    }

    /// Non-2xx, not JSON, an unknown action, a replace without a body, a replacement a send could not carry: each a
    /// failure, which the policy decides.
    @Test(arguments: [AppBackendConfiguration.HookFailurePolicy.allow, .reject])
    func badAnswersAreFailuresThePolicyDecides(policy: AppBackendConfiguration.HookFailurePolicy) async throws {
        try await Self.withHookedServer(onFailure: policy) { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            let replies: [BeforeSendHookServer.Reply] = [
                .raw(500, #"{"action":"allow"}"#), .raw(403, #"{"action":"reject","reason":"x"}"#), .raw(200, "not json"),
                .raw(200, #"{"action":"shrug"}"#), .raw(200, #"{"action":"replace"}"#), .replace("nul \u{0}"),
                .replace(String(repeating: "x", count: 65_537)),
            ]
            for (index, reply) in replies.enumerated() {
                hook.respond { _ in reply }
                let answer = try await client.send(alice, to: conversation.id, body: "message \(index)")
                switch policy {
                case .allow: #expect(answer.status == 202, "reply \(index): \(answer.text)")
                case .reject: expectError(answer, 403, .rejected, "reply \(index)")
                }
            }
            hook.respond { _ in .allow }
            _ = try await client.sendAccepted(alice, to: conversation.id, body: "last")
            let expected = policy == .allow ? replies.indices.map { "message \($0)" } + ["last"] : ["last"]
            #expect(try await client.waitForCount(alice, conversation.id, expected.count).map(\.body) == expected)
            #expect(try await client.metric("pigeon_before_send_decisions_total{outcome=\"failure\"}") == Double(replies.count))
        }
    }

    @Test func aResendOfAnAcceptedMessageIsAnsweredWithTheOriginalWhateverTheHookSays() async throws {
        try await Self.withHookedServer { client, hook in
            let (alice, _, conversation) = try await Self.pair(client)
            let id = newId()
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "kept", clientMessageId: id)
            _ = try await client.waitForCount(alice, conversation.id, 1)
            hook.respond { _ in .reject("changed my mind") }
            let again = try await client.send(alice, to: conversation.id, body: "kept", clientMessageId: id)
            #expect(again.status == 200, "\(again.text)")
            #expect(try again.decode(SendMessageResponse.self).serverId == first.serverId)
            #expect(try await client.allMessages(alice, conversation.id).map(\.body) == ["kept"])
        }
    }

    @Test func theHookNeedsTheSecretAndAnHTTPURL() {
        var configuration = AppBackendConfiguration()
        configuration.beforeSendHookURL = "http://127.0.0.1:1/hook"
        #expect(configuration.problem?.contains("--webhook-secret") == true)
        configuration.webhookSecret = "s"
        #expect(configuration.problem == nil)
        configuration.beforeSendHookURL = "ftp://example.com"
        #expect(configuration.problem?.contains("http") == true)
    }
}
