import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The PostgreSQL store's two ways of storing a batch: in one statement planned on the last seqs the node cached from
/// its own batches, and under the conversations' locks when it has none or the database disagrees (always on
/// PostgreSQL, whatever `PIGEON_TEST_BACKEND` says).
@Suite struct PostgresBatchTests {
    typealias Contract = StoreContractTests

    /// Counts the batches that took the locking path (they time a `read` stage; the one-statement path has none).
    final class StageCounter: Sendable {
        private let counts = NIOLockedValueBox([ProcessingStage: Int]())
        var timer: ProcessingStageTimer { ProcessingStageTimer { [counts] stage, _ in counts.withLockedValue { $0[stage, default: 0] += 1 } } }
        func count(_ stage: ProcessingStage) -> Int { counts.withLockedValue { $0[stage, default: 0] } }
    }

    @Test func aNodesCachedLastSeqIsTrustedOnlyAsFarAsTheDatabaseAgrees() async throws {
        let schema = EventPartitionTests.newSchema()
        defer { Task { try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE") } }
        var logger = Logger(label: "postgres-batch")
        logger.logLevel = .critical
        let url = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)"
        let (countsA, countsB) = (StageCounter(), StageCounter())
        let (sinkA, sinkB) = (Contract.RecordingSink(), Contract.RecordingSink())
        let a = try await PostgresMessageStore.open(
            url: url, local: LocalFanout(sink: sinkA), logger: logger, maxConnections: 4, nodeId: "node-a", stageTimer: countsA.timer)
        let b = try await PostgresMessageStore.open(
            url: url, local: LocalFanout(sink: sinkB), logger: logger, maxConnections: 4, nodeId: "node-b", stageTimer: countsB.timer)
        try await Contract.whileRunning([a, b]) {
            let conversation = try await a.createConversation(creator: "alice", members: ["bob"], name: nil)
            let items = (0..<6).map { Contract.item(conversation: conversation.id, body: "m\($0)") }
            // First batch: nothing cached, the locking path.
            #expect(Contract.seqs(try await a.process([items[0]])) == [1])
            #expect(countsA.count(.read) == 1)
            // Then one statement on the cached last seq.
            #expect(Contract.seqs(try await a.process([items[1], items[2]])) == [2, 3])
            #expect(countsA.count(.read) == 1)
            // Another node stores in the conversation (a partition moved): A's cached 3 is stale, its statement is
            // refused and the batch goes through the locks, with the right seq.
            #expect(Contract.seqs(try await b.process([items[3]])) == [4])
            #expect(Contract.seqs(try await a.process([items[4]])) == [5])
            #expect(countsA.count(.read) == 2)
            // A message stored before, handed out again with a new one: the unique indexes refuse the statement, the
            // locking path recognises it and stores only the new one.
            #expect(Contract.seqs(try await a.process([items[2], items[5]])) == [-3, 6])
            #expect(countsA.count(.read) == 3)
            let page = try await a.messages(conversationId: conversation.id, after: 0, before: nil, limit: 10)
            #expect(page.messages.map(\.seq) == [1, 2, 3, 4, 5, 6])
            #expect(page.messages.map(\.serverId) == items.map(\.entry.message.serverId))
            #expect(try await a.conversation(id: conversation.id, for: "bob")?.lastSeq == 6)
            // Nothing of the refused statements was written: every partition's offsets are gapless and each message
            // has one message.new per member.
            let head = try await a.headPosition()
            let events = try await sinkB.wait { Contract.position(after: $0, partitions: head.offsets.count) == head }
            Contract.expectGaplessPartitions(events)
            #expect(events.filter { $0.type == "message.new" }.count == 12)
        }.get()
    }

    /// Receipt groups: in one statement on the watermarks the node cached, checked by the database; a stale cache, a
    /// receipt beyond the conversation's last seq or one that moves nothing goes under the members' locks.
    @Test func aNodesCachedWatermarksAreTrustedOnlyAsFarAsTheDatabaseAgrees() async throws {
        let schema = EventPartitionTests.newSchema()
        defer { Task { try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE") } }
        var logger = Logger(label: "postgres-batch")
        logger.logLevel = .critical
        let url = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)"
        let (sinkA, sinkB) = (Contract.RecordingSink(), Contract.RecordingSink())
        let a = try await PostgresMessageStore.open(url: url, local: LocalFanout(sink: sinkA), logger: logger, maxConnections: 4, nodeId: "node-a")
        let b = try await PostgresMessageStore.open(url: url, local: LocalFanout(sink: sinkB), logger: logger, maxConnections: 4, nodeId: "node-b")
        try await Contract.whileRunning([a, b]) {
            let conversation = try await a.createConversation(creator: "alice", members: ["bob"], name: nil)
            let id = conversation.id
            _ = try await a.process((0..<3).map { Contract.item(conversation: id, body: "m\($0)") })
            func receipt(_ store: PostgresMessageStore, _ kind: ReceiptKind, _ seq: Int64) async throws -> [Int64] {
                let outcome = try await store.recordReceipt(conversationId: id, userId: "bob", kind: kind, upToSeq: seq)
                return [outcome.watermarks.deliveredSeq, outcome.watermarks.readSeq]
            }
            let bob = PostgresMessageStore.WatermarkKey(conversationId: id, userId: "bob")
            func cached(_ store: PostgresMessageStore) -> [Int64]? { store.watermarkCache.withLockedValue { $0[bob].map { [$0.delivered, $0.read] } } }

            #expect(try await receipt(a, .delivered, 1) == [1, 0])
            #expect(cached(a) == [1, 0])
            #expect(try await receipt(a, .delivered, 2) == [2, 0])
            #expect(cached(a) == [2, 0])
            // Another node moves bob's watermarks; A's cache is stale.
            #expect(try await receipt(b, .read, 3) == [3, 3])
            // Moves nothing by A's cache: answered from the stored watermarks, not the cached ones.
            #expect(try await receipt(a, .delivered, 2) == [3, 3])
            #expect(cached(a) == [3, 3])
            _ = try await a.process([Contract.item(conversation: id, body: "m3")])
            #expect(try await receipt(b, .delivered, 4) == [4, 3])
            // A's cached [3, 3] no longer holds: its statement is refused, the locks give the right outcome.
            #expect(try await receipt(a, .read, 4) == [4, 4])
            #expect(cached(a) == [4, 4])
            // Beyond the last seq (4): not trusted unclamped; clamped under the locks, which moves nothing.
            #expect(try await receipt(a, .read, 99) == [4, 4])

            // Each move once, in order, and nothing of a refused statement.
            let head = try await a.headPosition()
            let events = try await sinkB.wait { Contract.position(after: $0, partitions: head.offsets.count) == head }
            Contract.expectGaplessPartitions(events)
            let receipts = events.filter { $0.type == "receipt" && $0.userId == "alice" }.map { event -> String in
                let kind = event.payload.contains("\"kind\":\"read\"") ? "read" : "delivered"
                let seq = event.payload.components(separatedBy: "\"upToSeq\":").last?.prefix { $0.isNumber } ?? ""
                return "\(kind) \(seq)"
            }
            #expect(receipts == ["delivered 1", "delivered 2", "delivered 3", "read 3", "delivered 4", "read 4"])
        }.get()
    }
}
