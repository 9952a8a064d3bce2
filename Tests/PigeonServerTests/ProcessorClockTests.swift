import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The processor's waits are on its injected clock: with a ``ManualClock`` a retry backoff of an hour is tested
/// without waiting an hour, and "not before the backoff" is a fact of the clock, not a fixed wait that hopes.
@Suite struct ProcessorClockTests {
    @Test func aFailedMessageIsTriedAgainExactlyWhenItsBackoffHasPassedOnTheClock() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let failures = NIOLockedValueBox(0)
        // "flaky" fails its first two attempts (a store error, retried), then is stored.
        let store = try SQLiteMessageStore(
            path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()),
            faultInjector: { message in
                guard message.body == "flaky" else { return }
                if failures.withLockedValue({ $0 += 1; return $0 }) <= 2 { throw PigeonError.overloaded("not yet") }
            })
        let buffer = try EmbeddedBuffer(path: directory + "/buffer.sqlite", durable: false)
        var configuration = ServerConfiguration()
        configuration.maxAttempts = 5
        configuration.retryBaseDelay = .seconds(3600)
        configuration.maxRetryDelay = .seconds(4 * 3600)
        var logger = Logger(label: "processor-clock")
        logger.logLevel = .error
        let clock = ManualClock()
        let processor = Processor(buffer: buffer, store: store, metrics: PigeonMetrics(), configuration: configuration, logger: logger, clock: clock)
        let flakyConversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil).id
        let otherConversation = try await store.createConversation(creator: "alice", members: ["carol"], name: nil).id
        @Sendable func bodies(_ conversationId: String) async throws -> [String] {
            try await store.messages(conversationId: conversationId, after: 0, before: nil, limit: 100).messages.map(\.body)
        }
        @Sendable func append(_ conversationId: String, _ body: String) async throws {
            let now = WallClock.nowMillis()
            _ = try await buffer.append(
                BufferedMessage(
                    serverId: Identifiers.uuidV7(), conversationId: conversationId, senderId: "alice", senderDeviceId: "alice-phone",
                    clientMessageId: newId(), type: "text", body: body, clientTimestamp: now, acceptedAt: now))
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await processor.run() }
            defer { group.cancelAll() }
            try await append(flakyConversation, "flaky")
            try await append(flakyConversation, "after")
            try await append(otherConversation, "other")

            try await waitUntil("the first attempt failed and the other conversation flowed on") {
                let other = try await bodies(otherConversation)
                return failures.withLockedValue { $0 } == 1 && other == ["other"]
            }
            try await clock.waitForSleepers()
            #expect(try await bodies(flakyConversation).isEmpty, "the failed message and the one behind it wait")

            // 59 minutes of the hour's backoff: nothing is tried.
            clock.advance(by: .seconds(59 * 60))
            try await clock.waitForSleepers()
            #expect(failures.withLockedValue { $0 } == 1, "not tried before its backoff passed")
            #expect(try await bodies(flakyConversation).isEmpty)

            // The hour is over: the second attempt (fails again; the backoff doubles to two hours).
            clock.advance(by: .seconds(60))
            try await waitUntil("the second attempt, at the hour") { failures.withLockedValue { $0 } == 2 }
            try await clock.waitForSleepers()
            clock.advance(by: .seconds(2 * 3600 - 1))
            try await clock.waitForSleepers()
            #expect(failures.withLockedValue { $0 } == 2, "the doubled backoff holds too")

            clock.advance(by: .seconds(1))
            try await waitUntil("stored at the third attempt, in order") { try await bodies(flakyConversation) == ["flaky", "after"] }
            #expect(failures.withLockedValue { $0 } == 3)
        }
    }
}
