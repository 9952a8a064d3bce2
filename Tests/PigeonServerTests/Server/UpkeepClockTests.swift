import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The server's upkeep waits on its injected clock: pruning every prune interval, and ``DeviceActivity``'s second of
/// coalescing between two writes of `lastSeenAt`. With a ``ManualClock`` "not before" is a fact of the clock.
@Suite struct UpkeepClockTests {
    /// An event log that only counts its prunes.
    final class PruneCounter: EventLog {
        let prunes = NIOLockedValueBox(0)
        var epoch: String { "test" }
        var eventPartitions: Int { 1 }
        func events(for device: DeviceIdentity, after: EventPosition, limit: Int) async throws -> [StoredEvent] { [] }
        func headPosition() async throws -> EventPosition { .start(partitions: 1) }
        func prunedThrough() async throws -> EventPosition { .start(partitions: 1) }
        func pruneEvents(olderThan cutoff: Int64) async throws -> Int {
            prunes.withLockedValue { $0 += 1 }
            return 0
        }
        var count: Int { prunes.withLockedValue { $0 } }
    }

    @Test func housekeepingPrunesAtStartAndThenEveryPruneIntervalOfTheClock() async throws {
        let clock = ManualClock()
        let log = PruneCounter()
        var configuration = ServerConfiguration()
        configuration.pruneInterval = .seconds(3600)
        var logger = Logger(label: "housekeeping-clock")
        logger.logLevel = .error
        let housekeeping = Housekeeping(store: log, configuration: configuration, logger: logger, clock: clock)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await housekeeping.run() }
            defer { group.cancelAll() }
            try await clock.waitForSleepers()
            #expect(log.count == 1, "pruned once at the start")
            for hour in 1...3 {
                clock.advance(by: .seconds(3599))
                try await clock.waitForSleepers()
                #expect(log.count == hour, "not before the interval")
                clock.advance(by: .seconds(1))
                try await waitUntil("the prune of hour \(hour)") { log.count == hour + 1 }
                try await clock.waitForSleepers()
            }
        }
    }

    /// A device seen while the last write's coalescing second runs is written when that second has passed on the
    /// clock, not before; the times written are the requests' (the wall clock's).
    @Test func deviceActivityCoalescesWritesForASecondOfTheClock() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteMessageStore(path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
        let alice = try await store.registerDevice(userId: "alice", name: nil, tokenHash: "h", rule: StoreContractTests.openRule)
        let bob = try await store.registerDevice(userId: "bob", name: nil, tokenHash: "h2", rule: StoreContractTests.openRule)
        let start = try #require(try await store.devices(of: "bob").first).createdAt + 1_000
        @Sendable func lastSeen(_ user: String) async throws -> Int64 { try #require(try await store.devices(of: user).first).lastSeenAt }
        let clock = ManualClock()
        let activity = DeviceActivity(store: store, interval: .seconds(60), logger: .init(label: "test"), clock: clock)

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await activity.run() }
            defer { group.cancelAll() }
            // Parked on its wake-up (or the interval).
            try await clock.waitForSleepers()
            activity.seen(alice, at: start)
            try await waitUntil("alice's first request is written at once") { try await lastSeen("alice") == start }
            // Now in its coalescing second: bob's first request waits for it.
            try await clock.waitForSleepers()
            activity.seen(bob, at: start + 10)
            clock.advance(by: .milliseconds(999))
            try await clock.waitForSleepers()
            #expect(try await lastSeen("bob") != start + 10, "not written within the coalescing second")
            clock.advance(by: .milliseconds(1))
            try await waitUntil("bob is written when the second is over") { try await lastSeen("bob") == start + 10 }
        }
    }

    /// The operator page's rates divide by the time between two samples on the clock, not on the machine's.
    @Test func statisticsRatesAreCountsPerSecondOfTheClock() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = ManualClock()
        let metrics = PigeonMetrics()
        let sampler = StatisticsSampler(
            metrics: metrics, buffer: try EmbeddedBuffer(path: directory + "/buffer.sqlite", durable: false), hub: StreamHub(), clock: clock)
        sampler.sample()
        metrics.counts.accepted.add(10)
        clock.advance(by: .seconds(2))
        sampler.sample()
        #expect(sampler.samples(since: nil).last?.accepted == 5, "10 accepted over 2 s of the clock: \(sampler.samples(since: nil))")
    }

    /// A token naming an unknown key refetches the JWKS at most once per minimum refresh interval of the clock.
    @Test func theJWKSMinimumRefreshIntervalRunsOnTheClock() async throws {
        let path = try writeTemporaryFile(TestSigningKey.jwks([try await TestSigningKey.es256(kid: "k")]), name: "jwks.json")
        var configuration = AuthConfiguration()
        configuration.jwtJWKSMinimumRefreshInterval = .seconds(30)
        var logger = Logger(label: "jwks-clock")
        logger.logLevel = .critical
        let clock = ManualClock()
        let source = JWKSKeySource(location: .file(path), configuration: configuration, logger: logger, clock: clock)
        try await source.loadFile()
        #expect(await source.refreshForUnknownKid() == false, "fetched at the start, within the interval")
        clock.advance(by: .seconds(29))
        #expect(await source.refreshForUnknownKid() == false, "29 s of the clock: not yet")
        clock.advance(by: .seconds(1))
        #expect(await source.refreshForUnknownKid() == true, "30 s of the clock: fetched again")
    }
}
