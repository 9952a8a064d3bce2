import Foundation
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// docs/SECURITY.md's per-user limits: conversations per minute, stored bytes per minute, duplicate JSON keys,
/// the metrics token.
@Suite struct AbuseLimitTests {
    @Test func conversationsPerUserPerMinuteAreLimited() async throws {
        try await withTestServer(configure: { $0.abuseLimits.conversationsPerMinute = 3 }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            for _ in 0..<3 { _ = try await client.createConversation(alice, members: ["bob"]) }
            let refused = try await client.request(
                .POST, "/v1/conversations", token: alice.token, body: #"{"members":["bob"]}"#)
            expectError(refused, 429, .rateLimited, "fourth conversation")
            #expect(try await client.conversations(alice).count == 3)
            // Another user is not affected.
            _ = try await client.createConversation(bob, members: ["alice"])
            #expect(try await client.metric(#"pigeon_limit_hits_total{limit="conversations_per_user"}"#) == 1)
        }
    }

    /// One user cannot make the server store without bound: a 1,000-member conversation costs a row per member,
    /// so its messages spend the budget a thousand times faster than a direct chat's. Resends are still answered.
    @Test func storedBytesPerUserPerMinuteAreLimited() async throws {
        // The strangers limit is lifted: it would refuse the 999 strangers first.
        try await withTestServer(configure: {
            $0.abuseLimits.storedBytesPerMinute = 600_000
            $0.appBackend.strangerAddsPerHour = 0
        }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let members = (0..<999).map { "member\($0)" }
            let big = try await client.createConversation(alice, members: members)
            let direct = try await client.createConversation(bob, members: ["alice"])
            // Each message in the big conversation costs about 1,000 × 64 bytes.
            var accepted: [(String, SendMessageResponse)] = []
            var refusal: HTTPAnswer?
            let started = ContinuousClock.now
            for _ in 0..<20 {
                let id = newId()
                let answer = try await client.send(alice, to: big.id, body: "hello everyone", clientMessageId: id)
                if answer.status == 202 {
                    accepted.append((id, try answer.decode(SendMessageResponse.self)))
                } else {
                    refusal = answer
                    break
                }
            }
            let refused = try #require(refusal, "20 messages to 1,000 members fit in a 600 KB budget")
            expectError(refused, 429, .rateLimited, "over the stored-bytes budget")
            // The budget refills as time passes (600 KB a minute: one more message every ~6.4 s), which a loaded machine
            // makes visible: a slow run may take that many more.
            let refilled = Int((ContinuousClock.now - started) / .milliseconds(6_400))
            #expect((4...(9 + refilled)).contains(accepted.count), "\(accepted.count) accepted (refill for \(refilled))")
            // A resend of an accepted message is answered, not refused.
            let (resentId, original) = try #require(accepted.first)
            let resend = try await client.send(alice, to: big.id, body: "hello everyone", clientMessageId: resentId)
            #expect(resend.status == 200, "\(resend.text)")
            #expect(try resend.decode(SendMessageResponse.self).serverId == original.serverId)
            // Bob's budget is his own.
            #expect(try await client.send(bob, to: direct.id, body: "hi").status == 202)
            #expect(try await client.metric(#"pigeon_limit_hits_total{limit="stored_bytes_per_user"}"#) ?? 0 >= 1)
        }
    }

    /// Parsers disagree on a repeated key (Foundation keeps the first, JavaScript the last): refused.
    @Test func aKeyGivenTwiceInOneObjectIsRefused() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let bodies = [
                #"{"clientMessageId":"\#(newId())","type":"text","body":"shown","body":"hidden","clientTimestamp":1}"#,
                #"{"clientMessageId":"\#(newId())","type":"text","body":"shown","b\u006fdy":"hidden","clientTimestamp":1}"#,
            ]
            for body in bodies {
                let answer = try await client.sendRaw(alice, to: conversation.id, json: body)
                expectError(answer, 400, .invalidRequest, body)
                #expect(answer.text.contains("body"), "\(answer.text)")
            }
            expectError(
                try await client.request(.POST, "/v1/conversations", token: alice.token, body: #"{"members":["bob"],"members":["carol"]}"#),
                400, .invalidRequest)
            // Over WebSocket: an error frame naming the operation's clientMessageId, and nothing stored.
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let duplicateId = newId()
            socket.sendRaw(
                #"{"op":"send","conversationId":"\#(conversation.id)","clientMessageId":"\#(duplicateId)","type":"text","body":"shown","body":"hidden","clientTimestamp":1}"#)
            let refused = await socket.first { $0.errorFrame != nil }?.errorFrame
            #expect(refused?.error.code == .invalidRequest, "\(String(describing: refused))")
            #expect(refused?.clientMessageId == duplicateId)
            await socket.close()
            // The same key in different objects is fine.
            let nested = try await client.request(
                .POST, "/v1/devices", body: #"{"userId":"carol","extra":{"userId":"x"},"list":[{"a":1},{"a":2}]}"#)
            #expect(nested.status == 201, "\(nested.text)")
            #expect(try await client.history(alice, conversation.id).messages.isEmpty)
        }
    }

    @Test func metricsCanBeKeptBehindAToken() async throws {
        try await withTestServer(configure: { $0.metricsToken = "scrape-secret" }) { client in
            expectError(try await client.request(.GET, "/metrics"), 401, .unauthorized)
            expectError(try await client.request(.GET, "/metrics", token: "wrong"), 401, .unauthorized)
            let answer = try await client.request(.GET, "/metrics", token: "scrape-secret")
            #expect(answer.status == 200)
            #expect(answer.text.contains("pigeon_messages_accepted_total"))
        }
    }
}
