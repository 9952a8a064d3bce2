import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// Store errors injected into processing: retried with backoff, dead-lettered after the last attempt with
/// `message.failed` to the sender, and never blocking other conversations.
@Suite struct ProcessorFailureTests {
    struct InjectedStoreError: Error {}

    @Test func transientStoreErrorIsRetriedAndOrderKept() async throws {
        let failuresLeft = NIOLockedValueBox(2)
        try await withTestServer(configure: { configuration in
            configuration.retryBaseDelay = .milliseconds(50)
            // The processor's retries and dead letters: the separate buffer's path.
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = { message in
                if message.body == "flaky" {
                    try failuresLeft.withLockedValue { left in
                        if left > 0 {
                            left -= 1
                            throw InjectedStoreError()
                        }
                    }
                }
            }
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            #expect(try await client.send(alice, to: conversation.id, body: "flaky").status == 202)
            #expect(try await client.send(alice, to: conversation.id, body: "after").status == 202)
            let messages = try await client.waitForMessages(alice, conversation.id) { $0.count == 2 }
            #expect(messages.map(\.body) == ["flaky", "after"], "the retried message keeps its place")
            #expect(messages.map(\.seq) == [1, 2])
            #expect(failuresLeft.withLockedValue { $0 } == 0)
            let metrics = try await client.request(.GET, "/metrics").text
            #expect(metrics.contains("pigeon_messages_retried_total 2"))
            #expect(metrics.contains("pigeon_messages_failed_total 0"))
        }
    }

    @Test func persistentFailureIsDeadLetteredWhileOthersFlow() async throws {
        let poisonAttempts = NIOLockedValueBox(0)
        try await withTestServer(configure: { configuration in
            configuration.retryBaseDelay = .seconds(1)
            // The processor's retries and dead letters: the separate buffer's path.
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = { message in
                if message.body == "poison" {
                    poisonAttempts.withLockedValue { $0 += 1 }
                    throw InjectedStoreError()
                }
            }
        }) { client in
            let alice = try await client.register("alice")
            let carol = try await client.register("carol")
            let poisoned = try await client.createConversation(alice, members: ["bob"])
            let other = try await client.createConversation(carol, members: ["dave"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let poisonId = UUID().uuidString.lowercased()
            let poison = try await client.send(alice, to: poisoned.id, body: "poison", clientMessageId: poisonId)
            #expect(poison.status == 202)
            let poisonServerId = try poison.decode(SendMessageResponse.self).serverId
            #expect(try await client.send(alice, to: poisoned.id, body: "behind").status == 202)

            // Another conversation flows while the poison message waits for its retries (≥ 1 + 2 s).
            #expect(try await client.send(carol, to: other.id, body: "unaffected").status == 202)
            let flowing = try await client.waitForMessages(carol, other.id, timeout: .seconds(5)) { $0.count == 1 }
            #expect(flowing.map(\.body) == ["unaffected"])
            #expect(try await client.allMessages(alice, poisoned.id).isEmpty, "the message behind the failing one waits for it")

            let frames = await socket.frames(timeout: .seconds(10)) { if case .event(.messageFailed) = $0 { true } else { false } }
            guard case .event(.messageFailed(_, let failed)) = frames.last else {
                Issue.record("no message.failed: \(frames)")
                return
            }
            #expect(failed.serverId == poisonServerId)
            #expect(failed.clientMessageId == poisonId)
            #expect(failed.conversationId == poisoned.id)
            #expect(failed.error.code == .internalError)
            #expect(poisonAttempts.withLockedValue { $0 } == 3)

            // The one behind it is stored next, and the poison message took no seq.
            let stored = try await client.waitForMessages(alice, poisoned.id) { $0.count == 1 }
            #expect(stored.map(\.body) == ["behind"])
            #expect(stored.map(\.seq) == [1])

            // A resend of the dead-lettered message answers with the original and its failed status.
            let resend = try await client.send(alice, to: poisoned.id, body: "poison", clientMessageId: poisonId)
            #expect(resend.status == 200)
            let response = try resend.decode(SendMessageResponse.self)
            #expect(response.serverId == poisonServerId)
            #expect(response.status == .failed)

            let metrics = try await client.request(.GET, "/metrics").text
            #expect(metrics.contains("pigeon_messages_failed_total 1"))
            #expect(metrics.contains("pigeon_dead_letters 1"))
            await socket.close()
        }
    }
}
