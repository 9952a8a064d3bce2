import Crypto
import Foundation
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.2 "Webhooks: the app's backend hears what happened", through the real server (on the
/// `PIGEON_TEST_BACKEND`) and a real HTTP endpoint (``WebhookReceiver``).
@Suite struct WebhookTests {
    static let secret = "whsec-test-0123456789"

    /// A server configuration that sends every event type (`receipt.read` too) to `receiver`, retrying fast.
    static func configure(_ receiver: WebhookReceiver, events: Set<String>? = Set(AppBackendConfiguration.webhookEventTypes))
        -> (inout ServerConfiguration) -> Void
    {
        { configuration in
            configuration.appBackend.webhookURL = receiver.url
            configuration.appBackend.webhookSecret = secret
            configuration.appBackend.webhookEvents = events
            configuration.appBackend.webhookFirstRetryDelay = .milliseconds(100)
            configuration.appBackend.webhookMaxRetryDelay = .milliseconds(400)
            configuration.adminToken = "operator-secret"
        }
    }

    /// The hex HMAC-SHA256 of `"<t>.<body>"`, computed here apart from the server's code.
    static func independentSignature(secret: String, timestamp: String, body: Data) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Data((timestamp + ".").utf8) + body, using: SymmetricKey(data: Data(secret.utf8)))
        return mac.map { String(format: "%02x", $0) }.joined()
    }

    /// Every type arrives with its data, each request signed (checked with `RequestSignature.verify` and with an HMAC
    /// computed here), with its id in `Pigeon-Event-Id` and `Content-Type: application/json`.
    @Test func everyEventTypeArrivesSignedWithItsData() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        try await withTestServer(configure: Self.configure(receiver)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let group = try await client.createConversation(alice, members: ["bob"], name: "team")
            let sent = try await client.sendAccepted(alice, to: group.id, body: "hello")
            _ = try await client.waitForCount(alice, group.id, 1)
            #expect(try await EditDeleteTests.edit(client, alice, group.id, sent.serverId, body: "hello, edited").status == 202)
            try await waitUntil("the edit is stored") { try await client.allMessages(alice, group.id).first?.body == "hello, edited" }
            #expect(try await ReactionsAndThreadsTests.react(client, bob, group.id, sent.serverId, "👍").status == 200)
            #expect(try await client.receipt(bob, group.id, kind: .read, upToSeq: 2).status == 200)
            let added = try await client.request(.POST, "/v1/conversations/\(group.id)/members", token: alice.token, body: "{\"userIds\":[\"carol\"]}")
            #expect(added.status == 200)
            #expect(try await EditDeleteTests.delete(client, alice, group.id, sent.serverId).status == 202)
            let phone = try await client.register("bob", deviceName: "phone", existing: bob)
            #expect(try await client.request(.DELETE, "/v1/devices/\(phone.deviceId)", token: bob.token).status == 204)

            let expectedTypes: Set = [
                "device.registered", "conversation.created", "message.stored", "message.edited", "reaction", "receipt.read", "members.changed",
                "message.deleted", "device.revoked",
            ]
            try await waitUntil("every type arrived", timeout: .seconds(30), describe: { "\(receiver.accepted.compactMap(\.type))" }) {
                expectedTypes.isSubset(of: Set(receiver.accepted.compactMap(\.type))) && receiver.accepted.filter { $0.type == "device.registered" }.count == 3
            }
            let requests = receiver.accepted
            for request in requests {
                #expect(request.method == "POST" && request.uri == "/hooks")
                #expect(request.headers["content-type"] == "application/json")
                let header = try #require(request.signature)
                #expect(RequestSignature.verify(header: header, secret: Self.secret, body: request.body), "signed: \(header)")
                #expect(!RequestSignature.verify(header: header, secret: "another secret", body: request.body))
                let parts = Dictionary(uniqueKeysWithValues: header.split(separator: ",").map { part -> (String, String) in
                    let pair = part.split(separator: "=", maxSplits: 1)
                    return (String(pair[0]), String(pair[1]))
                })
                let timestamp = try #require(parts["t"])
                #expect(parts["v1"] == Self.independentSignature(secret: Self.secret, timestamp: timestamp, body: request.body))
                #expect(abs((Int64(timestamp) ?? 0) - WallClock.nowMillis()) < 60_000, "t is milliseconds since the epoch")
                #expect(request.eventId != nil && request.eventId == request.id, "Pigeon-Event-Id is the body's id")
                #expect(request.id.flatMap(Validation.canonicalUUID) == request.id)
                #expect(Set(request.json?.keys.map { $0 } ?? []) == ["id", "type", "createdAt", "data"])
                #expect((jsonInt(request.json?["createdAt"]) ?? 0) > 1_700_000_000_000, "createdAt is milliseconds since the epoch")
            }
            func data(_ type: String) throws -> [String: Any] { try #require(requests.first { $0.type == type }?.data, "\(type)") }
            let stored = try #require(try data("message.stored")["message"] as? [String: Any])
            #expect(stored["serverId"] as? String == sent.serverId && stored["body"] as? String == "hello" && jsonInt(stored["seq"]) == 1)
            #expect(stored["senderId"] as? String == "alice" && stored["conversationId"] as? String == group.id)
            // The message as a history read gives it: the same keys.
            let historyKeys = try JSONSerialization.jsonObject(with: JSONEncoder().encode(try await client.allMessages(alice, group.id)[0])) as? [String: Any]
            #expect(Set(stored.keys).subtracting(["editedAt", "deletedAt"]) == Set(historyKeys?.keys.map { $0 } ?? []).subtracting(["editedAt", "deletedAt"]))
            let edited = try #require(try data("message.edited")["message"] as? [String: Any])
            #expect(edited["serverId"] as? String == sent.serverId && edited["body"] as? String == "hello, edited" && edited["editedAt"] != nil)
            #expect(jsonInt(edited["seq"]) == 1, "the target as it now reads, not the pigeon.edit")
            let deleted = try data("message.deleted")
            #expect(deleted["conversationId"] as? String == group.id && deleted["serverId"] as? String == sent.serverId && deleted["by"] as? String == "alice")
            let reaction = try data("reaction")
            #expect(reaction["serverId"] as? String == sent.serverId && reaction["key"] as? String == "👍")
            #expect(reaction["userId"] as? String == "bob" && reaction["action"] as? String == "add" && reaction["conversationId"] as? String == group.id)
            let read = try data("receipt.read")
            #expect(read["conversationId"] as? String == group.id && read["userId"] as? String == "bob" && jsonInt(read["upToSeq"]) == 2)
            let members = try data("members.changed")
            let change = try #require(members["change"] as? [String: Any])
            #expect(members["conversationId"] as? String == group.id && jsonInt(members["seq"]) == 3)
            #expect(change["action"] as? String == "added" && change["userIds"] as? [String] == ["carol"] && change["by"] as? String == "alice")
            let created = try #require(try data("conversation.created")["conversation"] as? [String: Any])
            #expect(created["id"] as? String == group.id && created["name"] as? String == "team")
            let registered = requests.filter { $0.type == "device.registered" }.compactMap(\.data)
            #expect(registered.contains { $0["userId"] as? String == "bob" && $0["deviceId"] as? String == phone.deviceId })
            let revoked = try data("device.revoked")
            #expect(revoked["userId"] as? String == "bob" && revoked["deviceId"] as? String == phone.deviceId)
            // Each event once: nothing answered 200 is sent again.
            try await Task.sleep(for: .milliseconds(500))
            let ids = receiver.received.compactMap(\.eventId)
            #expect(Set(ids).count == ids.count, "no event twice")
        }
    }

    /// `receipt.read` only when listed; without `--webhook-events` every other type is sent.
    @Test func readReceiptsAreSentOnlyWhenListed() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        try await withTestServer(configure: Self.configure(receiver, events: nil)) { client in
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            try await client.sendAccepted(alice, to: conversation.id, body: "one")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            #expect(try await client.receipt(alice, conversation.id, kind: .read, upToSeq: 1).status == 200)
            try await client.sendAccepted(alice, to: conversation.id, body: "marker")
            try await waitUntil("the marker arrived") {
                receiver.accepted.contains { ($0.data?["message"] as? [String: Any])?["body"] as? String == "marker" }
            }
            #expect(!receiver.received.contains { $0.type == "receipt.read" })
        }
    }

    /// Events arrive in order per conversation: each conversation's `message.stored` in seq order 1, 2, 3 … with
    /// none missing, however the endpoint's answers and the conversations interleave.
    @Test func eventsArriveInSeqOrderPerConversation() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        // Every third try fails: retries must not let a later event of the conversation overtake.
        let tries = TryCounter()
        receiver.answer { _ in tries.next() % 3 == 0 ? .status(503) : nil }
        try await withTestServer(configure: Self.configure(receiver, events: ["message.stored"])) { client in
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            var conversations: [Conversation] = []
            for _ in 0..<4 { conversations.append(try await client.createConversation(alice, members: ["bob"])) }
            let perConversation = 15
            try await withThrowingTaskGroup(of: Void.self) { group in
                for conversation in conversations {
                    group.addTask {
                        for index in 0..<perConversation { try await client.sendAccepted(alice, to: conversation.id, body: "\(index)") }
                    }
                }
                try await group.waitForAll()
            }
            try await waitUntil("every message's event arrived", timeout: .seconds(60), describe: { "\(receiver.accepted.count)" }) {
                receiver.accepted.count == conversations.count * perConversation
            }
            for conversation in conversations {
                let seqs = receiver.accepted.compactMap { request -> Int? in
                    guard let message = request.data?["message"] as? [String: Any], message["conversationId"] as? String == conversation.id else { return nil }
                    return jsonInt(message["seq"])
                }
                #expect(seqs == Array(1...perConversation), "in seq order, each once")
            }
            // Within a conversation, no event was tried before the one before it was answered 2xx.
            for conversation in conversations {
                let tried = receiver.received.compactMap { request -> (Int, Bool)? in
                    guard let message = request.data?["message"] as? [String: Any], message["conversationId"] as? String == conversation.id,
                        let seq = jsonInt(message["seq"])
                    else { return nil }
                    return (seq, request.accepted)
                }
                var delivered = 0
                for (seq, accepted) in tried {
                    #expect(seq == delivered + 1, "seq \(seq) tried while \(delivered + 1) was not answered")
                    if accepted { delivered = seq }
                }
            }
        }
    }

    /// An endpoint that fails (500) and then recovers gets the same events again: the same ids and the same bytes.
    @Test func anEndpointThatFailsThenRecoversGetsTheSameIdsAgain() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.setMode(.status(500))
        try await withTestServer(configure: Self.configure(receiver, events: ["message.stored"])) { client in
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "while down")
            try await waitUntil("tried three times") { receiver.received.count >= 3 }
            #expect(receiver.accepted.isEmpty)
            let failed = receiver.received
            receiver.setMode(.accept)
            try await waitUntil("delivered once the endpoint recovers") { receiver.accepted.count == 1 }
            let delivered = try #require(receiver.accepted.first)
            #expect(Set(failed.compactMap(\.eventId)) == [delivered.eventId], "one event, one id on every try")
            #expect(failed.allSatisfy { $0.body == delivered.body }, "the same bytes on every try")
            #expect((delivered.data?["message"] as? [String: Any])?["serverId"] as? String == sent.serverId)
            let metrics = try await client.metricsText()
            #expect(metrics.contains("pigeon_webhook_retried_total{endpoint=\"\(receiver.url)\"}"))
            try await waitUntil("counted delivered") {
                try await client.metric("pigeon_webhook_delivered_total{endpoint=\"\(receiver.url)\"}") == 1
            }
        }
    }

    /// An endpoint that never answers 2xx: retried until the retry window passes, then the event is a dead letter
    /// (listed for the operator, counted); the conversation's next event goes on; a replay sends it again, same id.
    @Test func aDeadEndpointMakesADeadLetterThatTheOperatorReplays() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        receiver.setMode(.status(500))
        try await withTestServer(configure: { configuration in
            Self.configure(receiver, events: ["message.stored"])(&configuration)
            // Counted from the event's commit: long enough for a retry after a first try that a loaded machine delays
            // (with 1 s, the first try came after the window under CI's load, and the event died untried again).
            configuration.appBackend.webhookRetryWindow = .seconds(3)
        }) { client in
            let admin = ["Authorization": "Bearer operator-secret"]
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let first = try await client.sendAccepted(alice, to: conversation.id, body: "first")
            var dead: [DeadWebhookEvent] = []
            try await waitUntil("the event is a dead letter", timeout: .seconds(30)) {
                dead = try await client.request(.GET, "/v1/admin/webhooks/dead", headers: admin).decode(DeadWebhookList.self).deadWebhooks
                return !dead.isEmpty
            }
            let letter = try #require(dead.first)
            #expect(letter.type == "message.stored" && letter.orderingKey == conversation.id && letter.attempts >= 2)
            #expect(letter.lastError.contains("500"))
            let tries = receiver.received
            #expect(tries.count >= 2 && tries.allSatisfy { $0.eventId == letter.id }, "retried with the same id before it died")
            try await waitUntil("counted dead") { try await client.metric("pigeon_webhook_dead_total{endpoint=\"\(receiver.url)\"}") == 1 }
            let overview = try await client.request(.GET, "/v1/admin/webhooks", headers: admin).decode(WebhookOverview.self)
            #expect(overview.dead == 1 && overview.endpoint == receiver.url && overview.events == ["message.stored"])

            // Dead-lettered, it no longer holds the conversation back.
            receiver.setMode(.accept)
            let second = try await client.sendAccepted(alice, to: conversation.id, body: "second")
            try await waitUntil("the next event is delivered") { receiver.accepted.count == 1 }
            #expect((receiver.accepted[0].data?["message"] as? [String: Any])?["serverId"] as? String == second.serverId)

            let replayed = try await client.request(.POST, "/v1/admin/webhooks/\(letter.id)/replay", headers: admin)
            #expect(replayed.status == 202)
            try await waitUntil("the replay is delivered") { receiver.accepted.count == 2 }
            let again = receiver.accepted[1]
            #expect(again.eventId == letter.id && again.body == Data(letter.body.utf8), "the same event, the same bytes")
            #expect((again.data?["message"] as? [String: Any])?["serverId"] as? String == first.serverId)
            #expect(try await client.request(.GET, "/v1/admin/webhooks/dead", headers: admin).decode(DeadWebhookList.self).deadWebhooks.isEmpty)
            // Bad input changes nothing.
            #expect(try await client.request(.POST, "/v1/admin/webhooks/\(letter.id)/replay", headers: admin).status == 404)
            #expect(try await client.request(.POST, "/v1/admin/webhooks/not-a-uuid/replay", headers: admin).status == 400)
            #expect(try await client.request(.GET, "/v1/admin/webhooks/dead").status == 401)
        }
    }

    /// A conversation whose event the endpoint does not answer delays only that conversation: the others' events
    /// are delivered meanwhile.
    @Test func aSlowConversationDelaysOnlyItself() async throws {
        let receiver = try await WebhookReceiver.start()
        defer { Task { await receiver.stop() } }
        try await withTestServer(configure: { configuration in
            Self.configure(receiver, events: ["message.stored"])(&configuration)
            configuration.appBackend.webhookTimeout = .seconds(30)
        }) { client in
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            let slow = try await client.createConversation(alice, members: ["bob"])
            let fast = try await client.createConversation(alice, members: ["bob"])
            receiver.answer { request in
                (request.data?["message"] as? [String: Any])?["conversationId"] as? String == slow.id ? .hang : nil
            }
            try await client.sendAccepted(alice, to: slow.id, body: "stuck")
            try await client.sendAccepted(alice, to: slow.id, body: "behind it")
            for index in 0..<5 { try await client.sendAccepted(alice, to: fast.id, body: "\(index)") }
            try await waitUntil("the other conversation's events are delivered") { receiver.accepted.count == 5 }
            let slowTries = receiver.received.filter { ($0.data?["message"] as? [String: Any])?["conversationId"] as? String == slow.id }
            #expect(slowTries.count == 1, "only the slow conversation's head is in flight; the one behind it waits")
        }
    }

    /// Without `--webhook` nothing is recorded: the outbox stays empty whatever happens.
    @Test func withoutAWebhookNothingIsRecorded() async throws {
        try await withTestServer(configure: { $0.adminToken = "operator-secret" }) { client in
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            for index in 0..<3 { try await client.sendAccepted(alice, to: conversation.id, body: "\(index)") }
            _ = try await client.waitForCount(alice, conversation.id, 3)
            let overview = try await client.request(.GET, "/v1/admin/webhooks", headers: ["Authorization": "Bearer operator-secret"])
                .decode(WebhookOverview.self)
            #expect(overview.endpoint == nil && overview.events.isEmpty && overview.pending == 0 && overview.dead == 0)
        }
    }
}

/// A JSON number read by `JSONSerialization`, as an Int.
func jsonInt(_ value: Any?) -> Int? {
    (value as? NSNumber)?.intValue
}

/// A thread-safe counter for a receiver's rule.
final class TryCounter: Sendable {
    private let value = NIOLockedValueBox(0)
    func next() -> Int { value.withLockedValue { $0 += 1; return $0 } }
}
