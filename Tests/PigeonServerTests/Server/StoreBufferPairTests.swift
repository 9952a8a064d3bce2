import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonRedis
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// Every store × buffer pair the server accepts (`--store embedded|postgres` × `--buffer embedded|redis`, and the
/// separate embedded buffer), through the real HTTP stack: a message is stored once, in order, answered with its
/// original when resent, and stored once even when the buffer no longer remembers it (the Redis buffer forgets after
/// `dedupe_hours`): the stores enforce (sender, device, clientMessageId) themselves.
@Suite struct StoreBufferPairTests {
    struct Pair: Sendable, CustomTestStringConvertible {
        var backend: TestBackend
        var separateBuffer = false
        var testDescription: String { "\(backend)\(separateBuffer ? " (separate buffer)" : "")" }
    }

    static let pairs = [
        Pair(backend: .embedded), Pair(backend: .embedded, separateBuffer: true), Pair(backend: .redisBuffer),
        Pair(backend: .postgres), Pair(backend: .production),
    ]

    @Test(arguments: pairs)
    func aMessageIsStoredOnceInOrderEvenAfterTheBufferForgotIt(_ pair: Pair) async throws {
        let bufferURL = NIOLockedValueBox<String?>(nil)
        try await withTestServer(
            backend: pair.backend,
            configure: { configuration in
                configuration.separateEmbeddedBuffer = pair.separateBuffer
                if case .redis(let url) = configuration.buffer { bufferURL.withLockedValue { $0 = url } }
            }
        ) { server in
            let alice = try await server.register("alice")
            let bob = try await server.register("bob")
            let conversation = try await server.createConversation(alice, members: ["bob"]).id
            let clientMessageId = newId()
            let original = try await server.sendAccepted(alice, to: conversation, body: "one", clientMessageId: clientMessageId)
            let resend = try await server.send(alice, to: conversation, body: "one", clientMessageId: clientMessageId)
            #expect(resend.status == 200, "a resend is answered 200 with its original")
            #expect(try resend.decode(SendMessageResponse.self).serverId == original.serverId)
            _ = try await server.waitForCount(bob, conversation, 1)

            // The Redis buffer forgets it (its record expired after `dedupe_hours`): the store still knows the (sender,
            // device, clientMessageId) and does not store it twice. (The embedded buffers never forget.)
            if let url = bufferURL.withLockedValue({ $0 }) { try await Self.forgetDeduplicationRecords(redisURL: url) }
            let late = try await server.send(alice, to: conversation, body: "one", clientMessageId: clientMessageId)
            #expect([200, 202].contains(late.status), "\(late.status) \(late.text)")
            try await server.sendAccepted(alice, to: conversation, body: "two")
            let messages = try await server.waitForCount(bob, conversation, 2)
            #expect(messages.map(\.body) == ["one", "two"], "stored once, in order")
            #expect(messages.map(\.seq) == [1, 2])
            #expect(messages.first?.serverId == original.serverId)
        }
    }

    /// Deletes the Redis buffer's de-duplication records (the `u:` keys under the server's own key prefix), as their
    /// expiry would.
    static func forgetDeduplicationRecords(redisURL: String) async throws {
        var logger = Logger(label: "pair-test")
        logger.logLevel = .error
        let configuration = try RedisConfiguration(url: redisURL)
        let prefix = try #require(configuration.queryItems["prefix"])
        let client = RedisClient(configuration: configuration, logger: logger)
        try await client.waitUntilConnected()
        let keys = try await client.send(RESPCommand("KEYS", "\(prefix):*}:u:*")).array?.compactMap(\.string) ?? []
        for key in keys { _ = try await client.send(RESPCommand("DEL", key)) }
        await client.shutdown()
        #expect(!keys.isEmpty, "the Redis buffer kept de-duplication records")
    }
}
