import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PigeonRedis
import PigeonRedisBuffer
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``AcceptPath`` and ``IngestBuffer`` contract, one body run against every implementation (centrifuge's
/// `*_shared_test.go`, GRDB's one test over queue and pool): the embedded default's direct path that writes into the
/// store (``DirectAcceptPath``, no buffer: nothing is ever handed out), the separate SQLite buffer (``EmbeddedBuffer``,
/// `--separate-buffer`) and the Redis Streams buffer (against the test Redis of `PIGEON_TEST_REDIS_URL`, a key prefix
/// per test).
///
/// What every buffer promises, whatever its layout: an answered append is durable and reaches the store exactly
/// once; one caller's appends reach it in their order; a resend is answered with its original (before and after
/// processing, and when refused); an entry not acknowledged is handed out again after a restart, with its attempt
/// count; a requeued message is processed again with a fresh count.
@Suite struct IngestBufferContractTests {
    enum Kind: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case oneWrite = "store-ingest", separate = "embedded", redis
        var testDescription: String { rawValue }
    }

    static let logger: Logger = {
        var logger = Logger(label: "ingest-buffer-contract")
        logger.logLevel = .error
        return logger
    }()

    /// A buffer of one kind over a SQLite store, reopenable on the same data (a restart).
    final class Harness: Sendable {
        let kind: Kind
        let directory: String
        let redisPrefix: String
        private struct Open: Sendable {
            var store: SQLiteMessageStore
            var accept: any AcceptPath
            /// `nil` on the direct path: there is no buffer to hand anything out.
            var buffer: (any IngestBuffer)?
            var redis: (buffer: RedisStreamsBuffer, client: RedisClient, runner: Task<Void, any Error>)?
        }
        private let current = NIOLockedValueBox<Open?>(nil)

        init(_ kind: Kind) async throws {
            self.kind = kind
            directory = makeTemporaryDirectory("pigeon-buffer-contract")
            redisPrefix = "bc" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
            try await open()
        }

        var store: SQLiteMessageStore { current.withLockedValue { $0! }.store }
        /// Where the tests append (and requeue).
        var buffer: any AcceptPath { current.withLockedValue { $0! }.accept }
        /// What the processor reads from; `nil` on the direct path.
        var handOutBuffer: (any IngestBuffer)? { current.withLockedValue { $0! }.buffer }

        private func open() async throws {
            let store = try SQLiteMessageStore(
                path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
            switch kind {
            case .oneWrite:
                current.withLockedValue { $0 = Open(store: store, accept: DirectAcceptPath(store: store), buffer: nil) }
            case .separate:
                let buffer = try EmbeddedBuffer(path: directory + "/buffer.sqlite", durable: false)
                current.withLockedValue { $0 = Open(store: store, accept: buffer, buffer: buffer) }
            case .redis:
                let client = RedisClient(
                    configuration: try RedisConfiguration(url: try TestBackend.environmentURL("PIGEON_TEST_REDIS_URL")), logger: logger)
                let buffer = try await RedisStreamsBuffer(
                    client: client,
                    configuration: RedisStreamsBuffer.Configuration(
                        keyPrefix: redisPrefix, partitions: 4, nodeId: "node-\(Identifiers.randomHex(bytes: 4))", leaseTTL: .seconds(30),
                        heartbeatInterval: .seconds(1)),
                    logger: logger)
                let runner = Task { try await buffer.run() }
                current.withLockedValue { $0 = Open(store: store, accept: buffer, buffer: buffer, redis: (buffer, client, runner)) }
                try await waitUntil("the Redis buffer leases its partitions") { buffer.ownedPartitions.count == 4 }
            }
        }

        /// Stops the buffer (the Redis node shuts down gracefully, releasing its leases) and opens it again on the
        /// same data, without acknowledging anything.
        func restart() async throws {
            await close()
            try await open()
        }

        func close() async {
            guard let open = current.withLockedValue({ $0 }) else { return }
            if let redis = open.redis {
                redis.runner.cancel()
                _ = await redis.runner.result
                await redis.buffer.shutdown()
                await redis.client.shutdown()
            }
            current.withLockedValue { $0 = nil }
        }

        func tearDown() async {
            await close()
            try? FileManager.default.removeItem(atPath: directory)
        }

        /// Entries handed out until `count` came (none are acknowledged); fails after `timeout`.
        func handOut(_ count: Int, timeout: Duration = .seconds(20)) async throws -> [BufferEntry] {
            var entries: [BufferEntry] = []
            let deadline = ContinuousClock.now + timeout
            while entries.count < count {
                guard ContinuousClock.now < deadline else { throw TestFailure("\(kind): \(entries.count) of \(count) entries handed out") }
                guard let buffer = handOutBuffer else { throw TestFailure("\(kind): no buffer hands anything out") }
                entries += try await buffer.nextBatch(max: 100, wait: .milliseconds(100))
            }
            return entries
        }

        /// What the processor does: hands out every waiting entry, stores it and acknowledges it, until `count`
        /// messages of `conversationId` are in the store (the one-write buffer stored them when it answered).
        func process(until count: Int, in conversationId: String, timeout: Duration = .seconds(20)) async throws -> [Message] {
            let deadline = ContinuousClock.now + timeout
            while true {
                let messages = try await store.messages(conversationId: conversationId, after: 0, before: nil, limit: 1000).messages
                if messages.count >= count { return messages }
                guard ContinuousClock.now < deadline else { throw TestFailure("\(kind): \(messages.count) of \(count) messages stored") }
                // The direct path stored them when it answered: nothing to hand out.
                guard let buffer = handOutBuffer else {
                    try await Task.sleep(for: .milliseconds(50))
                    continue
                }
                let entries = try await buffer.nextBatch(max: 100, wait: .milliseconds(50))
                guard !entries.isEmpty else { continue }
                let results = try await store.process(entries.map { ProcessingItem(entry: $0, isFinalAttempt: false) })
                let done = zip(entries, results).filter { _, result in
                    switch result {
                    case .stored, .alreadyStored, .deadLettered: true
                    case .failed, .deferred: false
                    }
                }
                try await buffer.acknowledge(entryIds: done.map(\.0.id))
            }
        }

        /// Stores entries handed out and acknowledges them, as the processor does.
        func store(_ entries: [BufferEntry]) async throws {
            let results = try await store.process(entries.map { ProcessingItem(entry: $0, isFinalAttempt: false) })
            #expect(results.allSatisfy { if case .stored = $0 { true } else { false } })
            try await handOutBuffer?.acknowledge(entryIds: entries.map(\.id))
        }

        /// Nothing more is handed out (waits `wait` for it).
        func handsOutNothing(wait: Duration = .milliseconds(300)) async throws -> Bool {
            guard let buffer = handOutBuffer else { return true }
            return try await buffer.nextBatch(max: 100, wait: wait).isEmpty
        }
    }

    static func withHarness(_ kind: Kind, _ body: (Harness, String) async throws -> Void) async throws {
        let harness = try await Harness(kind)
        do {
            let conversation = try await harness.store.createConversation(creator: "alice", members: ["bob"], name: nil)
            try await body(harness, conversation.id)
        } catch {
            await harness.tearDown()
            throw error
        }
        await harness.tearDown()
    }

    static func message(_ conversationId: String, body: String, clientMessageId: String = newId()) -> BufferedMessage {
        let now = WallClock.nowMillis()
        return BufferedMessage(
            serverId: Identifiers.uuidV7(), conversationId: conversationId, senderId: "alice", senderDeviceId: "alice-phone",
            clientMessageId: clientMessageId, type: "text", body: body, clientTimestamp: now - 5, acceptedAt: now)
    }

    /// Whether an append's outcome is the answer to a new message (durable; stored at once or waiting).
    static func isNew(_ outcome: AppendOutcome) -> Bool {
        switch outcome {
        case .accepted, .stored: true
        case .duplicate: false
        }
    }

    // MARK: The contract

    @Test(arguments: Kind.allCases)
    func anAnsweredAppendReachesTheStoreExactlyOnceAsSent(_ kind: Kind) async throws {
        try await Self.withHarness(kind) { harness, conversation in
            let message = Self.message(conversation, body: "é \"quoted\" 🕊️\nnew line; 3:x")
            let outcome = try await harness.buffer.append(message)
            #expect(Self.isNew(outcome))
            if case .stored(let seq) = outcome { #expect(seq == 1) }
            let stored = try await harness.process(until: 1, in: conversation)
            #expect(stored.map(\.serverId) == [message.serverId])
            #expect(stored.map(\.body) == [message.body])
            #expect(stored.map(\.clientMessageId) == [message.clientMessageId])
            #expect(try await harness.handsOutNothing(), "nothing is handed out twice once acknowledged")
            try await waitUntil("\(kind): depth back to 0") { harness.buffer.depth == 0 }
            #expect(await harness.buffer.isReady())
        }
    }

    /// API.md 1.2: a reply's `replyTo` and `threadRoot` go through the buffer with it and are stored; a message
    /// without them comes out without them.
    @Test(arguments: Kind.allCases)
    func aReplyReachesTheStoreWithItsQuoteAndThread(_ kind: Kind) async throws {
        try await Self.withHarness(kind) { harness, conversation in
            let root = Self.message(conversation, body: "root")
            #expect(Self.isNew(try await harness.buffer.append(root)))
            _ = try await harness.process(until: 1, in: conversation)
            var reply = Self.message(conversation, body: "reply")
            reply.replyTo = root.serverId
            reply.threadRoot = root.serverId
            var quote = Self.message(conversation, body: "quote")
            quote.replyTo = root.serverId
            #expect(Self.isNew(try await harness.buffer.append(reply)))
            #expect(Self.isNew(try await harness.buffer.append(quote)))
            let stored = try await harness.process(until: 3, in: conversation)
            #expect(stored.map(\.serverId) == [root.serverId, reply.serverId, quote.serverId])
            #expect(stored.map(\.replyTo) == [nil, root.serverId, root.serverId])
            #expect(stored.map(\.threadRoot) == [nil, root.serverId, nil])
            #expect(stored[0].thread?.replyCount == 1)
        }
    }

    @Test(arguments: Kind.allCases)
    func aResendIsAnsweredWithItsOriginalBeforeAndAfterProcessingAndWhenRefused(_ kind: Kind) async throws {
        try await Self.withHarness(kind) { harness, conversation in
            let original = Self.message(conversation, body: "once")
            var resend = original
            resend.serverId = Identifiers.uuidV7()
            resend.acceptedAt = original.acceptedAt + 1_000
            #expect(Self.isNew(try await harness.buffer.append(original)))
            let duplicate = AppendOutcome.duplicate(serverId: original.serverId, acceptedAt: original.acceptedAt)
            #expect(try await harness.buffer.append(resend) == duplicate, "while waiting for processing")
            _ = try await harness.process(until: 1, in: conversation)
            #expect(try await harness.buffer.append(resend) == duplicate, "after processing")

            // A refusal (rate limit, full buffer) still answers a resend...
            let refusal = PigeonError(.rateLimited, "slow down", retryAfter: 3)
            #expect(try await harness.buffer.append(resend, refusal: refusal) == duplicate)
            // ...but fails a new message, which leaves no trace: accepted afterwards as new.
            let new = Self.message(conversation, body: "refused first")
            await #expect {
                _ = try await harness.buffer.append(new, refusal: refusal)
            } throws: { error in
                (error as? PigeonError)?.code == .rateLimited && (error as? PigeonError)?.retryAfter == 3
            }
            #expect(try await harness.handsOutNothing())
            #expect(Self.isNew(try await harness.buffer.append(new)))
            let stored = try await harness.process(until: 2, in: conversation)
            #expect(stored.map(\.serverId) == [original.serverId, new.serverId], "the resend was never stored")
        }
    }

    @Test(arguments: Kind.allCases)
    func oneCallersAppendsReachTheStoreInTheirOrder(_ kind: Kind) async throws {
        try await Self.withHarness(kind) { harness, first in
            let second = try await harness.store.createConversation(creator: "alice", members: ["carol"], name: nil).id
            let messages = (0..<400).map { index in Self.message(index % 2 == 0 ? first : second, body: "\(index / 2)") }
            // Every append in flight at once, submitted in order.
            let outcomes = NIOLockedValueBox([Int: Result<AppendOutcome, any Error>]())
            for (index, message) in messages.enumerated() {
                harness.buffer.append(message, refusal: nil) { result in outcomes.withLockedValue { $0[index] = result } }
            }
            try await waitUntil("\(kind): every append answered") { outcomes.withLockedValue { $0.count } == messages.count }
            #expect(outcomes.withLockedValue { $0.values.allSatisfy { (try? $0.get()).map(Self.isNew) ?? false } })
            for conversation in [first, second] {
                let stored = try await harness.process(until: 200, in: conversation)
                #expect(stored.map { Int($0.body)! } == Array(0..<200), "\(conversation == first ? "first" : "second") conversation")
                #expect(stored.map(\.seq) == Array(1...200))
            }
        }
    }

    @Test(arguments: Kind.allCases)
    func whatWasNotAcknowledgedIsHandedOutAgainAfterARestartWithItsAttempts(_ kind: Kind) async throws {
        try await Self.withHarness(kind) { harness, conversation in
            let messages = (0..<3).map { Self.message(conversation, body: "m\($0)") }
            for message in messages { #expect(Self.isNew(try await harness.buffer.append(message))) }
            if kind == .oneWrite {
                // The store is the buffer: answered means stored, so a restart has nothing to hand out.
                try await harness.restart()
                #expect(try await harness.handsOutNothing())
                #expect(try await harness.process(until: 3, in: conversation).map(\.serverId) == messages.map(\.serverId))
                return
            }
            let handedOut = try await harness.handOut(3)
            #expect(handedOut.map(\.message) == messages)
            try await harness.handOutBuffer!.recordFailedAttempt(entryId: handedOut[0].id, attempts: 2)
            try await harness.restart()
            let again = try await harness.handOut(3)
            #expect(again.map(\.message) == messages, "handed out again, in order, after the restart")
            #expect(again.map(\.attempts) == [2, 0, 0], "the failed attempt survived the restart")
            try await harness.handOutBuffer!.acknowledge(entryIds: again.map(\.id))
            try await harness.restart()
            #expect(try await harness.handsOutNothing(), "acknowledged entries are gone for good")
        }
    }

    @Test(arguments: Kind.allCases)
    func aRequeuedMessageIsProcessedAgainWithAFreshAttemptCountAndStaysDeduplicated(_ kind: Kind) async throws {
        try await Self.withHarness(kind) { harness, conversation in
            let message = Self.message(conversation, body: "replayed")
            #expect(Self.isNew(try await harness.buffer.append(message)))
            if kind != .oneWrite {
                // The processor gave up on it: dead-lettered (not stored) and acknowledged.
                let first = try await harness.handOut(1)
                try await harness.handOutBuffer!.recordFailedAttempt(entryId: first[0].id, attempts: 5)
                try await harness.handOutBuffer!.acknowledge(entryIds: first.map(\.id))
                #expect(try await harness.handsOutNothing())
            }
            // An operator replays it.
            try await harness.buffer.requeue(message)
            if kind != .oneWrite {
                let entries = try await harness.handOut(1)
                #expect(entries.map(\.message) == [message])
                #expect(entries[0].attempts == 0, "a fresh attempt count")
                try await harness.store(entries)
            }
            let stored = try await harness.process(until: 1, in: conversation)
            #expect(stored.map(\.serverId) == [message.serverId])
            #expect(
                try await harness.buffer.append(message) == .duplicate(serverId: message.serverId, acceptedAt: message.acceptedAt),
                "the de-duplication record stays")
            #expect(try await harness.handsOutNothing())
        }
    }
}
