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

    /// A buffer whose first acknowledgement fails (Redis went away for a moment); everything else is the embedded one's.
    final class AcknowledgementFailsOnce: IngestBuffer {
        let base: EmbeddedBuffer
        let acknowledgements = NIOLockedValueBox<[Bool]>([])

        init(base: EmbeddedBuffer) { self.base = base }

        func append(
            _ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void
        ) {
            base.append(message, refusal: refusal, completion: completion)
        }
        func requeue(_ message: BufferedMessage) async throws { try await base.requeue(message) }
        var depth: Int { base.depth }
        func isReady() async -> Bool { await base.isReady() }
        func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry] { try await base.nextBatch(max: max, wait: wait) }
        func recordFailedAttempt(entryId: String, attempts: Int) async throws { try await base.recordFailedAttempt(entryId: entryId, attempts: attempts) }
        func acknowledge(entryIds: [String]) async throws {
            let first = acknowledgements.withLockedValue { $0.append($0.isEmpty); return $0.count == 1 }
            if first { throw PigeonError.overloaded("the buffer is away") }
            try await base.acknowledge(entryIds: entryIds)
        }
        var attempts: Int { acknowledgements.withLockedValue { $0.count } }
    }

    /// A failed acknowledgement (the store has the messages) is tried again after the retry delay on the clock.
    @Test func aFailedAcknowledgementIsRetriedWhenTheRetryDelayHasPassedOnTheClock() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteMessageStore(
            path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
        let buffer = AcknowledgementFailsOnce(base: try EmbeddedBuffer(path: directory + "/buffer.sqlite", durable: false))
        var configuration = ServerConfiguration()
        configuration.retryBaseDelay = .seconds(3600)
        configuration.maxRetryDelay = .seconds(4 * 3600)
        var logger = Logger(label: "processor-clock")
        logger.logLevel = .critical
        let clock = ManualClock()
        let processor = Processor(buffer: buffer, store: store, metrics: PigeonMetrics(), configuration: configuration, logger: logger, clock: clock)
        let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil).id
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await processor.run() }
            defer { group.cancelAll() }
            let now = WallClock.nowMillis()
            _ = try await buffer.append(
                BufferedMessage(
                    serverId: Identifiers.uuidV7(), conversationId: conversation, senderId: "alice", senderDeviceId: "alice-phone",
                    clientMessageId: newId(), type: "text", body: "stored, then acknowledged", clientTimestamp: now, acceptedAt: now))
            try await waitUntil("the first acknowledgement failed") { buffer.attempts == 1 }
            try await clock.waitForSleepers()
            clock.advance(by: .seconds(3599))
            try await clock.waitForSleepers()
            #expect(buffer.attempts == 1, "not tried again before the retry delay passed on the clock")
            clock.advance(by: .seconds(1))
            try await waitUntil("acknowledged at the second attempt") { buffer.attempts == 2 && buffer.depth == 0 }
        }
    }
}
