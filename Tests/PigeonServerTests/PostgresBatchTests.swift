import Foundation
import Logging
import NIOConcurrencyHelpers
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
}
