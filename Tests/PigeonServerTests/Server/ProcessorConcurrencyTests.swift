import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonRedis
import PigeonRedisBuffer
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// The processor on the production backends (the Redis Streams buffer of the test Redis, the PostgreSQL store of the
/// test PostgreSQL, whatever `PIGEON_TEST_BACKEND` says): partitions are stored concurrently, one batch each.
@Suite struct ProcessorConcurrencyTests {
    static let logger: Logger = {
        var logger = Logger(label: "processor-concurrency-test")
        logger.logLevel = .warning
        return logger
    }()
    static let partitions = 16

    /// Wraps the PostgreSQL store: holds every batch with a message whose body is "hold" until ``release()``, can
    /// make each batch take a little longer, and records which partitions' batches were in flight together.
    final class ObservedStore: MessageStore {
        private struct State {
            var holding = false
            var released = false
            var waiters: [CheckedContinuation<Void, Never>] = []
            var partitionsInFlight: [Int] = []
            var callsInFlight = 0
            var mostInFlight = 0
            var partitionOverlaps: [Int] = []
        }

        let base: PostgresMessageStore
        let delay: Duration
        private let state = NIOLockedValueBox(State())

        init(base: PostgresMessageStore, delay: Duration = .zero) {
            self.base = base
            self.delay = delay
        }

        var epoch: String { base.epoch }
        var eventPartitions: Int { base.eventPartitions }
        var isHolding: Bool { state.withLockedValue { $0.holding } }
        /// The most store calls in flight at once so far.
        var mostInFlight: Int { state.withLockedValue { $0.mostInFlight } }
        /// Partitions that had a second batch in flight while one was (never, if the processor is right).
        var partitionOverlaps: [Int] { state.withLockedValue { $0.partitionOverlaps } }

        func release() {
            let waiters = state.withLockedValue { state in
                state.released = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }

        func process(_ items: [ProcessingItem]) async throws -> [ProcessingResult] {
            let partitions = Set(items.map(\.entry.partition))
            state.withLockedValue { state in
                for partition in partitions where state.partitionsInFlight.contains(partition) { state.partitionOverlaps.append(partition) }
                state.partitionsInFlight += partitions
                state.callsInFlight += 1
                state.mostInFlight = max(state.mostInFlight, state.callsInFlight)
            }
            defer {
                state.withLockedValue { state in
                    state.callsInFlight -= 1
                    for partition in partitions {
                        if let index = state.partitionsInFlight.firstIndex(of: partition) { state.partitionsInFlight.remove(at: index) }
                    }
                }
            }
            if items.contains(where: { $0.entry.message.body == "hold" }) {
                await withCheckedContinuation { continuation in
                    let resumeNow = state.withLockedValue { state -> Bool in
                        state.holding = true
                        if state.released { return true }
                        state.waiters.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
            if delay > .zero { try await Task.sleep(for: delay) }
            return try await base.process(items)
        }

        func registerDevice(userId: String, name: String?, tokenHash: String, rule: DeviceRegistrationRule) async throws -> DeviceIdentity {
            try await base.registerDevice(userId: userId, name: name, tokenHash: tokenHash, rule: rule)
        }
        func device(tokenHash: String) async throws -> DeviceIdentity? { try await base.device(tokenHash: tokenHash) }
        func devices(of userId: String) async throws -> [DeviceRecord] { try await base.devices(of: userId) }
        func revokeDevice(_ device: DeviceIdentity, at revokedAt: Int64) async throws -> DeviceRevocation? {
            try await base.revokeDevice(device, at: revokedAt)
        }
        func recordDevicesSeen(_ seen: [DeviceIdentity: Int64]) async throws { try await base.recordDevicesSeen(seen) }
        func recordJWTDevice(_ device: DeviceIdentity, issuedAt: Int64?, at now: Int64) async throws -> JWTDeviceState {
            try await base.recordJWTDevice(device, issuedAt: issuedAt, at: now)
        }
        func createConversation(creator: String, members: [String], name: String?, admission: MemberAdmission) async throws -> Conversation {
            try await base.createConversation(creator: creator, members: members, name: name, admission: admission)
        }
        func conversations(of userId: String, before: ConversationCursor?, limit: Int, membership: MembershipState) async throws -> ConversationList {
            try await base.conversations(of: userId, before: before, limit: limit, membership: membership)
        }
        func conversation(id: String, for userId: String) async throws -> Conversation? { try await base.conversation(id: id, for: userId) }
        func conversation(id: String) async throws -> Conversation? { try await base.conversation(id: id) }
        func members(of conversationId: String) async throws -> [String]? { try await base.members(of: conversationId) }
        func cachedMembers(of conversationId: String) -> [String]? { base.cachedMembers(of: conversationId) }
        func status(ofMessage serverId: String) async throws -> (status: ServerMessageStatus, seq: Int64?)? {
            try await base.status(ofMessage: serverId)
        }
        func messages(conversationId: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?) async throws
            -> MessagePage
        {
            try await base.messages(conversationId: conversationId, after: after, before: before, limit: limit, visibleFrom: visibleFrom, reader: reader)
        }
        func threadMessages(
            conversationId: String, root: String, after: Int64?, before: Int64?, limit: Int, visibleFrom: Int64, reader: String?
        ) async throws -> ThreadPage? {
            try await base.threadMessages(
                conversationId: conversationId, root: root, after: after, before: before, limit: limit, visibleFrom: visibleFrom, reader: reader)
        }
        func react(conversationId: String, serverId: String, userId: String, key: String, action: ReactionAction, at: Int64) async throws
            -> [Reaction]
        {
            try await base.react(conversationId: conversationId, serverId: serverId, userId: userId, key: key, action: action, at: at)
        }
        func reactionUsers(conversationId: String, serverId: String, reader: String, key: String?, after: String?, limit: Int) async throws
            -> ReactionUsersPage
        {
            try await base.reactionUsers(conversationId: conversationId, serverId: serverId, reader: reader, key: key, after: after, limit: limit)
        }
        func member(_ userId: String, of conversationId: String) async throws -> ConversationMember? {
            try await base.member(userId, of: conversationId)
        }
        func changeMembership(
            conversationId: String, by actor: DeviceIdentity, _ operation: MembershipOperation, maxMembers: Int, admission: MemberAdmission
        ) async throws -> Conversation {
            try await base.changeMembership(conversationId: conversationId, by: actor, operation, maxMembers: maxMembers, admission: admission)
        }
        func messageTarget(conversationId: String, serverId: String) async throws -> MessageTarget? {
            try await base.messageTarget(conversationId: conversationId, serverId: serverId)
        }
        func storedMessage(senderId: String, deviceId: String, clientMessageId: String) async throws -> SendMessageResponse? {
            try await base.storedMessage(senderId: senderId, deviceId: deviceId, clientMessageId: clientMessageId)
        }
        func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome {
            try await base.recordReceipt(conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq)
        }
        func events(for device: DeviceIdentity, after: EventPosition, limit: Int) async throws -> [StoredEvent] {
            try await base.events(for: device, after: after, limit: limit)
        }
        func headPosition() async throws -> EventPosition { try await base.headPosition() }
        func prunedThrough() async throws -> EventPosition { try await base.prunedThrough() }
        func pruneEvents(olderThan cutoff: Int64) async throws -> Int { try await base.pruneEvents(olderThan: cutoff) }
        func deadLetters(limit: Int) async throws -> [DeadLetter] { try await base.deadLetters(limit: limit) }
        func deadLetter(serverId: String) async throws -> BufferedMessage? { try await base.deadLetter(serverId: serverId) }
        func removeDeadLetter(serverId: String) async throws { try await base.removeDeadLetter(serverId: serverId) }
        func deadLetterCount() async throws -> Int { try await base.deadLetterCount() }
        func isReady() async -> Bool { await base.isReady() }
        func block(_ blocked: String, by blocker: String, at: Int64) async throws { try await base.block(blocked, by: blocker, at: at) }
        func unblock(_ blocked: String, by blocker: String) async throws { try await base.unblock(blocked, by: blocker) }
        func blocks(of blocker: String) async throws -> [Block] { try await base.blocks(of: blocker) }
        func blockers(of blocked: String) async throws -> Set<String> { try await base.blockers(of: blocked) }
        func setConsentRules(_ rules: ConsentRules) { base.setConsentRules(rules) }
        func acceptInvitation(conversationId: String, userId: String) async throws -> Conversation {
            try await base.acceptInvitation(conversationId: conversationId, userId: userId)
        }
    }

    /// What a test works with.
    struct Setup: Sendable {
        var buffer: RedisStreamsBuffer
        var client: RedisClient
        var store: ObservedStore
        var keyPrefix: String

        /// A conversation of alice and bob whose buffer partition satisfies `condition`.
        func conversation(where condition: (Int) -> Bool) async throws -> (id: String, partition: Int) {
            for _ in 0..<200 {
                let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
                let partition = RedisStreamsBuffer.partition(ofConversation: conversation.id, partitions: ProcessorConcurrencyTests.partitions)
                if condition(partition) { return (conversation.id, partition) }
            }
            throw TestFailure("no conversation in a matching partition")
        }

        func append(_ conversationId: String, _ body: String, device: String = "alice-phone") async throws {
            let message = BufferedMessage(
                serverId: Identifiers.uuidV7(), conversationId: conversationId, senderId: "alice", senderDeviceId: device,
                clientMessageId: newId(), type: "text", body: body, clientTimestamp: 1, acceptedAt: WallClock.nowMillis())
            #expect(try await buffer.append(message) == .accepted)
        }

        func bodies(_ conversationId: String) async throws -> [String] {
            let page = try await store.messages(conversationId: conversationId, after: 0, before: nil, limit: 500)
            #expect(page.messages.map(\.seq) == page.messages.indices.map { Int64($0 + 1) }, "seq is gapless")
            return page.messages.map(\.body)
        }

        /// Entries left in the partition streams (acknowledged ones are deleted).
        func streamLength() async throws -> Int64 {
            var total: Int64 = 0
            for partition in 0..<ProcessorConcurrencyTests.partitions {
                total += try await client.send(RESPCommand("XLEN", "\(keyPrefix):{\(partition)}:s")).int ?? 0
            }
            return total
        }
    }

    /// Runs `body` with a processor on a fresh key prefix and a fresh schema, and stops everything afterwards.
    static func withProcessor(
        delay: Duration = .zero, faultInjector: ProcessingFaultInjector? = nil, configure: (inout ServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (Setup) async throws -> Void
    ) async throws {
        let suffix = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        let schema = "pigeon_p_\(suffix)"
        let keyPrefix = "tp\(suffix)"
        let client = RedisClient(configuration: try RedisConfiguration(url: try TestBackend.environmentURL("PIGEON_TEST_REDIS_URL")), logger: logger)
        let buffer: RedisStreamsBuffer
        let base: PostgresMessageStore
        do {
            // The store first: its migrations take a while, and the buffer's leases would expire meanwhile.
            base = try await PostgresMessageStore.open(
                url: try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)",
                local: LocalFanout(sink: StoreContractTests.RecordingSink()),
                faultInjector: faultInjector, logger: logger, maxConnections: 12)
            buffer = try await RedisStreamsBuffer(
                client: client, configuration: .init(keyPrefix: keyPrefix, partitions: partitions, nodeId: "node-\(suffix)"), logger: logger)
        } catch {
            await client.shutdown()
            try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
            throw error
        }
        var configuration = ServerConfiguration()
        configuration.batchSize = 10
        configuration.retryBaseDelay = .milliseconds(50)
        configuration.storeTimeout = .seconds(30)
        configure(&configuration)
        let store = ObservedStore(base: base, delay: delay)
        let processor = Processor(buffer: buffer, store: store, metrics: PigeonMetrics(), configuration: configuration, logger: logger)
        let setup = Setup(buffer: buffer, client: client, store: store, keyPrefix: keyPrefix)
        let outcome: Result<Void, any Error> = await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await buffer.run() }
            group.addTask { try? await base.run() }
            group.addTask { try? await processor.run() }
            defer { group.cancelAll() }
            do {
                try await body(setup)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        store.release()
        await buffer.shutdown()
        await client.shutdown()
        try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
        try outcome.get()
    }

    /// A batch held in the store (a slow transaction, a lock wait) holds up its own partition only: the conversation
    /// of another partition is stored meanwhile, and the held conversation's later message waits its turn.
    @Test func aHeldBatchOfOnePartitionDoesNotHoldUpAnother() async throws {
        try await Self.withProcessor { setup in
            let held = try await setup.conversation { _ in true }
            let other = try await setup.conversation { $0 != held.partition }
            try await setup.append(held.id, "hold")
            try await waitUntil("the held batch reaches the store") { setup.store.isHolding }
            try await setup.append(held.id, "after")
            for n in 0..<5 { try await setup.append(other.id, "m\(n)", device: "alice-laptop") }

            try await waitUntil("the other partition's messages are stored while the batch is held") {
                try await setup.bodies(other.id).count == 5
            }
            #expect(try await setup.bodies(other.id) == ["m0", "m1", "m2", "m3", "m4"])
            #expect(try await setup.bodies(held.id).isEmpty, "the held conversation waits for its batch")

            setup.store.release()
            try await waitUntil("the held conversation is stored once released") { try await setup.bodies(held.id).count == 2 }
            #expect(try await setup.bodies(held.id) == ["hold", "after"])
            try await waitUntil("every entry is acknowledged and deleted") { try await setup.streamLength() == 0 }
            #expect(setup.store.partitionOverlaps.isEmpty)
        }
    }

    /// Many conversations over many partitions, sent concurrently, one flaky message among them: every conversation is
    /// stored gapless in its sending order, batches of several partitions were in flight together (never two of one
    /// partition), and everything is acknowledged.
    @Test func everyConversationKeepsItsOrderWhilePartitionsAreStoredConcurrently() async throws {
        let flakyFailures = NIOLockedValueBox(0)
        try await Self.withProcessor(
            delay: .milliseconds(15),
            faultInjector: { message in
                guard message.body == "flaky" else { return }
                try flakyFailures.withLockedValue { failures in
                    guard failures < 2 else { return }
                    failures += 1
                    throw TestFailure("injected")
                }
            }
        ) { setup in
            var conversations: [String] = []
            for _ in 0..<24 { conversations.append(try await setup.conversation { _ in true }.id) }
            #expect(Set(conversations.map { RedisStreamsBuffer.partition(ofConversation: $0, partitions: Self.partitions) }).count > 4)
            let perConversation = 25
            let expected = (0..<perConversation).map { $0 == 7 ? "flaky" : "m\($0)" }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, conversation) in conversations.enumerated() {
                    group.addTask {
                        for body in (index == 3 ? expected : expected.map { $0 == "flaky" ? "m7" : $0 }) {
                            try await setup.append(conversation, body, device: "phone-\(index)")
                        }
                    }
                }
                try await group.waitForAll()
            }
            try await waitUntil("every message is stored", timeout: .seconds(60)) {
                var total = 0
                for conversation in conversations { total += try await setup.bodies(conversation).count }
                return total == conversations.count * perConversation
            }
            for (index, conversation) in conversations.enumerated() {
                let bodies = try await setup.bodies(conversation)
                #expect(bodies == (index == 3 ? expected : expected.map { $0 == "flaky" ? "m7" : $0 }), "conversation \(index)")
            }
            #expect(flakyFailures.withLockedValue { $0 } == 2)
            #expect(setup.store.mostInFlight > 1, "batches of several partitions were stored together")
            #expect(setup.store.mostInFlight <= 8)
            #expect(setup.store.partitionOverlaps.isEmpty, "never two batches of one partition")
            try await waitUntil("every entry is acknowledged and deleted") { try await setup.streamLength() == 0 }
        }
    }
}
