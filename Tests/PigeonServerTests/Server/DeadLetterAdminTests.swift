import Foundation
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// Dead-letter inspection and replay through the admin routes.
@Suite struct DeadLetterAdminTests {
    struct InjectedStoreError: Error {}
    struct DeadLetterList: Decodable { var deadLetters: [DeadLetter] }

    @Test func deadLettersAreListedAndReplayedIntoTheConversation() async throws {
        let storeIsBroken = NIOLockedValueBox(true)
        try await withTestServer(configure: { configuration in
            configuration.adminToken = "operator-secret"
            configuration.retryBaseDelay = .milliseconds(10)
            // The processor's retries and dead letters: the separate buffer's path.
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = { message in
                if message.body == "fragile", storeIsBroken.withLockedValue({ $0 }) { throw InjectedStoreError() }
            }
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "fragile")

            // Wait until it is dead-lettered (3 quick attempts), then inspect it.
            var listed: [DeadLetter] = []
            let deadline = ContinuousClock.now + .seconds(10)
            while listed.isEmpty, ContinuousClock.now < deadline {
                let answer = try await client.request(.GET, "/v1/admin/dead-letters", token: "operator-secret")
                #expect(answer.status == 200)
                listed = try answer.decode(DeadLetterList.self).deadLetters
                if listed.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(listed.map(\.message.serverId) == [sent.serverId])
            #expect(listed.first?.message.body == "fragile")

            expectError(try await client.request(.GET, "/v1/admin/dead-letters", token: "wrong"), 401, .unauthorized)
            expectError(try await client.request(.GET, "/v1/admin/dead-letters", token: alice.token), 401, .unauthorized)
            expectError(
                try await client.request(.POST, "/v1/admin/dead-letters/\(newId())/replay", token: "operator-secret"), 404, .notFound)

            // The store is repaired; the operator replays it and it is stored with the next seq.
            storeIsBroken.withLockedValue { $0 = false }
            let replay = try await client.request(.POST, "/v1/admin/dead-letters/\(sent.serverId)/replay", token: "operator-secret")
            #expect(replay.status == 202, "\(replay.text)")
            let messages = try await client.waitForMessages(alice, conversation.id) { $0.count == 1 }
            #expect(messages.map(\.serverId) == [sent.serverId])
            #expect(messages.map(\.seq) == [1])
            let after = try await client.request(.GET, "/v1/admin/dead-letters", token: "operator-secret")
            #expect(try after.decode(DeadLetterList.self).deadLetters.isEmpty)
            let resend = try await client.send(alice, to: conversation.id, body: "fragile", clientMessageId: sent.clientMessageId)
            #expect((try? resend.decode(SendMessageResponse.self))?.status == .stored)
        }
    }

    @Test func withoutAnAdminTokenTheRoutesDoNotExist() async throws {
        try await withTestServer { client in
            expectError(try await client.request(.GET, "/v1/admin/dead-letters", token: "anything"), 404, .notFound)
        }
    }
}
