import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// Faults of the production services, with real processes: Redis killed and restarted (AOF), PostgreSQL
/// crash-restarted, a node started while Redis is down.
@Suite(.serialized) struct ProductionFaultTests {
    /// A schema of the shared test PostgreSQL and a Redis of the test's own (it gets killed).
    static func backend(redis: RedisServerProcess) async throws -> TestBackendInstance {
        var backend = try await TestBackendInstance.make(.postgres)
        backend.buffer = .redis(redis.url + "?prefix=f")
        return backend
    }

    /// A receiver and four senders in one conversation.
    static func participants(_ client: PigeonTestClient) async throws -> (TestDevice, [CrashTests.SenderLog], Conversation) {
        let receiver = try await client.register("receiver")
        var senders: [CrashTests.SenderLog] = []
        for index in 0..<4 { senders.append(CrashTests.SenderLog(device: try await client.register("sender\(index)"))) }
        let conversation = try await client.createConversation(receiver, members: senders.map(\.device.userId))
        return (receiver, senders, conversation)
    }

    /// A storm through one node; `fault` runs once `answeredBeforeFault` sends were answered (whatever the machine's
    /// speed); the senders stop at their first failed send.
    static func storm(
        _ client: PigeonTestClient, senders: [CrashTests.SenderLog], conversationId: String, answeredBeforeFault: Int = 60,
        fault: @escaping @Sendable () async throws -> Void
    ) async throws -> [CrashTests.SenderLog] {
        let stop = NIOLockedValueBox(false)
        let answered = NIOLockedValueBox(0)
        let results = try await withThrowingTaskGroup(of: (Int, CrashTests.SenderLog).self) { group in
            for index in senders.indices {
                group.addTask {
                    (
                        index,
                        await CrashTests.httpSender(
                            client, senders[index], senderIndex: index, conversationId: conversationId, stop: stop, answered: answered)
                    )
                }
            }
            group.addTask {
                let deadline = ContinuousClock.now + .seconds(60)
                while answered.withLockedValue({ $0 }) < answeredBeforeFault, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(5))
                }
                try await fault()
                stop.withLockedValue { $0 = true }
                return (-1, senders[0])
            }
            var results: [Int: CrashTests.SenderLog] = [:]
            for try await (index, log) in group where index >= 0 { results[index] = log }
            return results
        }
        return senders.indices.map { results[$0]! }
    }

    /// Resends every unanswered message, per device in order, until each is answered (the services may still be
    /// coming back), then checks the whole conversation: exactly once, gapless, each device's order.
    static func resendAndVerify(
        _ client: PigeonTestClient, receiver: TestDevice, conversationId: String, logs: [CrashTests.SenderLog]
    ) async throws {
        var logs = logs
        for index in logs.indices {
            for clientId in logs[index].sent where logs[index].answered[clientId] == nil {
                let deadline = ContinuousClock.now + .seconds(60)
                while true {
                    let answer = try await client.send(logs[index].device, to: conversationId, body: "resent", clientMessageId: clientId)
                    if answer.status == 202 || answer.status == 200 {
                        logs[index].answered[clientId] = try answer.decode(SendMessageResponse.self).serverId
                        break
                    }
                    guard ContinuousClock.now < deadline else { throw TestFailure("resend kept failing: \(answer.status) \(answer.text)") }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
        }
        let total = logs.map(\.sent.count).reduce(0, +)
        let messages = try await client.waitForMessages(receiver, conversationId, timeout: .seconds(60)) { $0.count >= total }
        #expect(messages.count == total)
        try CrashTests.verify(messages, logs: logs, requireAll: true)
    }

    @Test func killingRedisDuringASendStormLosesNoAcknowledgedMessage() async throws {
        let redis = try await RedisServerProcess(appendOnly: true)
        let backend = try await Self.backend(redis: redis)
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try await ServerProcess(dataDirectory: directory, backend: backend)
        let client = server.client
        let (receiver, senders, conversation) = try await Self.participants(client)

        let logs = try await Self.storm(client, senders: senders, conversationId: conversation.id) { await redis.kill() }
        #expect(logs.map(\.answered.count).reduce(0, +) > 50)
        // While Redis is down the node is not ready and refuses new messages with 503.
        let readiness = try await client.request(.GET, "/readyz")
        #expect(readiness.status == 503)
        let refused = try await client.send(senders[0].device, to: conversation.id, body: "while down")
        #expect(refused.status == 503 && refused.errorCode == .overloaded, "\(refused.status) \(refused.text)")

        try await redis.restart()
        try await Self.resendAndVerify(client, receiver: receiver, conversationId: conversation.id, logs: logs)
        try await server.stop(signal: SIGTERM)
        await backend.tearDown()
    }

    @Test func restartingPostgresDuringProcessingLosesNothingAndStoresNothingTwice() async throws {
        let postgres = try await PostgresServerProcess()
        let redis = try await RedisServerProcess(appendOnly: true)
        var backend = TestBackendInstance()
        backend.store = .postgres(postgres.url)
        backend.buffer = .redis(redis.url + "?prefix=p")
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try await ServerProcess(dataDirectory: directory, backend: backend)
        let client = server.client
        let (receiver, senders, conversation) = try await Self.participants(client)

        // Accepting goes on while PostgreSQL is down (the buffer is Redis); the processor retries.
        let logs = try await Self.storm(client, senders: senders, conversationId: conversation.id) {
            try await postgres.restart()
            try await Task.sleep(for: .milliseconds(500))
        }
        #expect(logs.map(\.answered.count).reduce(0, +) > 50)
        try await Self.resendAndVerify(client, receiver: receiver, conversationId: conversation.id, logs: logs)
        try await server.stop(signal: SIGTERM)
    }

    @Test func aNodeStartedWhileRedisIsDownIsNotReadyAndRefusesSendsUntilRedisIsBack() async throws {
        let redis = try await RedisServerProcess(appendOnly: true)
        await redis.kill()
        let backend = try await Self.backend(redis: redis)
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try await ServerProcess(dataDirectory: directory, backend: backend, waitUntilReady: false)
        let client = server.client
        #expect(try await client.request(.GET, "/readyz").status == 503)
        let alice = try await client.register("alice")
        let conversation = try await client.createConversation(alice, members: ["bob"])
        let refused = try await client.send(alice, to: conversation.id, body: "too early")
        #expect(refused.status == 503 && refused.errorCode == .overloaded, "\(refused.status) \(refused.text)")
        #expect(refused.headers["retry-after"] != nil)

        try await redis.restart()
        let deadline = ContinuousClock.now + .seconds(30)
        while try await client.request(.GET, "/readyz").status != 200 {
            guard ContinuousClock.now < deadline else { throw TestFailure("the node did not become ready after Redis came back: \(server.log())") }
            try await Task.sleep(for: .milliseconds(100))
        }
        try await client.sendAccepted(alice, to: conversation.id, body: "now")
        let messages = try await client.waitForCount(alice, conversation.id, 1)
        #expect(messages.map(\.body) == ["now"])
        try await server.stop(signal: SIGTERM)
        await backend.tearDown()
    }
}
