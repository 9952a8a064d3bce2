import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Webhook events survive a SIGKILL of the real `pigeon-server` binary between their commit and their delivery,
/// and several nodes share the delivery without losing an event when one of them dies (API.md 1.2, "Webhooks":
/// at least once, in order per conversation).
@Suite(.serialized) struct WebhookCrashTests {
    static func arguments(_ receiver: WebhookReceiver, timeoutMs: Int = 5_000) -> [String] {
        [
            "--webhook", receiver.url, "--webhook-secret", "crash-test-secret", "--webhook-events", "message.stored",
            "--webhook-timeout-ms", String(timeoutMs), "--webhook-first-retry-ms", "200",
        ]
    }

    /// The `message.stored` events the receiver accepted, as (conversation, seq, serverId).
    static func stored(_ requests: [WebhookReceiver.Request]) -> [(conversationId: String, seq: Int, serverId: String)] {
        requests.compactMap { request in
            guard let message = request.data?["message"] as? [String: Any], let conversationId = message["conversationId"] as? String,
                let seq = (message["seq"] as? NSNumber)?.intValue, let serverId = message["serverId"] as? String
            else { return nil }
            return (conversationId, seq, serverId)
        }
    }

    /// Messages stored while the endpoint hangs: their events are committed, the heads in flight. The node is killed;
    /// after the restart every event is delivered, each conversation's in seq order, the ones in flight with the
    /// ids they had.
    @Test func aNodeKilledBetweenCommitAndDeliveryDeliversEverythingAfterTheRestart() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let receiver = try await WebhookReceiver.start()
        receiver.setMode(.hang)
        let backend = try await TestBackendInstance.make()
        let first = try await ServerProcess(dataDirectory: directory, backend: backend, arguments: Self.arguments(receiver))
        let alice = try await first.client.register("alice")
        _ = try await first.client.register("bob")
        var conversations: [Conversation] = []
        for _ in 0..<3 { conversations.append(try await first.client.createConversation(alice, members: ["bob"])) }
        var sent: [String: [String]] = [:]
        for conversation in conversations {
            for index in 0..<10 {
                sent[conversation.id, default: []].append(try await first.client.sendAccepted(alice, to: conversation.id, body: "\(index)").serverId)
            }
        }
        try await waitUntil("each conversation's head is in flight", timeout: .seconds(30)) {
            Set(Self.stored(receiver.received).map(\.conversationId)).count == conversations.count
        }
        let inFlight = receiver.received
        try await first.stop(signal: SIGKILL)

        receiver.setMode(.accept)
        let second = try await ServerProcess(dataDirectory: directory, backend: backend, arguments: Self.arguments(receiver))
        try await waitUntil("every event is delivered after the restart", timeout: .seconds(60), describe: { "\(receiver.accepted.count)" }) {
            receiver.accepted.count >= 30
        }
        let delivered = Self.stored(receiver.accepted)
        for conversation in conversations {
            let mine = delivered.filter { $0.conversationId == conversation.id }
            #expect(mine.map(\.seq) == Array(1...10), "in seq order, each once")
            #expect(mine.map(\.serverId) == sent[conversation.id], "every accepted message")
        }
        let resent = Set(receiver.accepted.compactMap(\.eventId))
        #expect(Set(inFlight.compactMap(\.eventId)).isSubset(of: resent), "the events in flight at the kill, with their ids")
        try await second.stop(signal: SIGTERM)
        await receiver.stop()
        await backend.tearDown()
    }
}

/// Two nodes on one PostgreSQL and Redis share webhook delivery: every event is delivered once the node that was
/// delivering is killed, in order per conversation (always on the production backends, like ``MultiNodeTests``).
@Suite(.serialized) struct WebhookMultiNodeTests {
    @Test func twoNodesDeliverEveryEventInOrderWhenTheDeliveringNodeIsKilled() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let receiver = try await WebhookReceiver.start()
        receiver.setMode(.hang)
        let backend = try await TestBackendInstance.make(.production, leaseMilliseconds: 2_000)
        func start(_ index: Int) async throws -> ServerProcess {
            let nodeDirectory = directory + "/node\(index)"
            try FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            return try await ServerProcess(
                dataDirectory: nodeDirectory, backend: backend, arguments: WebhookCrashTests.arguments(receiver, timeoutMs: 1_000))
        }
        // Node A alone first: it claims the heads, which hang in its hands.
        let a = try await start(0)
        let alice = try await a.client.register("alice")
        _ = try await a.client.register("bob")
        var conversations: [Conversation] = []
        for _ in 0..<4 { conversations.append(try await a.client.createConversation(alice, members: ["bob"])) }
        var sent: [String: [String]] = [:]
        for conversation in conversations {
            for index in 0..<5 {
                sent[conversation.id, default: []].append(try await a.client.sendAccepted(alice, to: conversation.id, body: "a\(index)").serverId)
            }
        }
        try await waitUntil("node A has every conversation's head in flight", timeout: .seconds(30)) {
            Set(WebhookCrashTests.stored(receiver.received).map(\.conversationId)).count == conversations.count
        }
        let b = try await start(1)
        for conversation in conversations {
            for index in 0..<5 {
                sent[conversation.id, default: []].append(try await b.client.sendAccepted(alice, to: conversation.id, body: "b\(index)").serverId)
            }
        }
        try await a.stop(signal: SIGKILL)
        receiver.setMode(.accept)
        try await waitUntil("node B delivers every event", timeout: .seconds(90), describe: { "\(receiver.accepted.count)" }) {
            receiver.accepted.count >= conversations.count * 10
        }
        try await Task.sleep(for: .seconds(1))
        let delivered = WebhookCrashTests.stored(receiver.accepted)
        for conversation in conversations {
            let mine = delivered.filter { $0.conversationId == conversation.id }
            #expect(mine.map(\.seq) == Array(1...10), "in seq order, each once")
            #expect(Set(mine.map(\.serverId)) == Set(sent[conversation.id] ?? []), "every accepted message, through either node")
        }
        try await b.stop(signal: SIGTERM)
        await receiver.stop()
        await backend.tearDown()
    }
}
