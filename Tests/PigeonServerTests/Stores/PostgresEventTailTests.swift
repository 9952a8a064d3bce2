import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonServer
import PostgresNIO
import Testing

/// A node's event tail reads the partitions another node's notification names, not the whole log, and every partition
/// when nothing woke it for a second (the poll that covers a lost notification) or when the listener reconnected.
@Suite struct PostgresEventTailTests {
    @Test func aWokenTailReadsOnlyTheNamedPartitionsAndThePollReadsThemAll() async throws {
        let reads = NIOLockedValueBox<[[Int]]>([])
        // Never connected: the tail under test only reads through `readEvents`.
        let client = PostgresClient(
            configuration: .init(host: "127.0.0.1", port: 1, username: "unused", password: nil, database: nil, tls: .disable))
        let logger = Logger(label: "tail-test")
        let tail = PostgresEventTail(
            local: LocalFanout(hub: StreamHub()), head: Array(repeating: 0, count: 16),
            readEvents: { after, partitions, _, _ in
                reads.withLockedValue { $0.append(partitions) }
                return ([], after)
            },
            notifications: PostgresNotifications(client: client, epoch: "tail-test", logger: logger), nodeId: "node-a",
            stageTimer: .none, clock: ElapsedClock(ContinuousClock()), logger: logger)
        let running = Task { await tail.tail() }
        defer { running.cancel() }

        tail.wake(PartitionMask(partitionsOf: [3, 11]))
        try await waitUntil { reads.withLockedValue(\.count) >= 1 }
        #expect(reads.withLockedValue(\.first) == [3, 11])

        // Nothing names a partition for a second: the poll reads every one.
        try await waitUntil { reads.withLockedValue(\.count) >= 2 }
        #expect(reads.withLockedValue { $0[1] } == Array(0..<16))

        tail.wake()
        try await waitUntil { reads.withLockedValue(\.count) >= 3 }
        #expect(reads.withLockedValue { $0[2] } == Array(0..<16), "a reconnected listener's wake-up reads every partition")
    }

    private func waitUntil(_ condition: @Sendable () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw CancellationError() }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
