import Foundation
import Logging
import PigeonBenchSupport
import PigeonKit
import Synchronization

/// The receiving device's part of the benchmark, for a device whose database already holds a stream cursor and
/// whose conversation received `messages` messages on the server while it was offline. Run in a process of its own
/// (`pigeonkit-device`, which links PigeonKit and nothing of the server), so that its memory is the client's alone, or in
/// the benchmark's process (`--in-process`).
package struct DeviceJob: Codable, Sendable {
    package var serverURL: String
    package var databasePath: String
    package var userId: String
    package var deviceId: String
    package var token: String
    package var conversationId: String
    package var messages: Int
    package var loads: Int
    package var pageSize: Int
    package var flushEveryWrite: Bool

    package init(
        serverURL: String, databasePath: String, userId: String, deviceId: String, token: String, conversationId: String, messages: Int,
        loads: Int, pageSize: Int, flushEveryWrite: Bool
    ) {
        self.serverURL = serverURL
        self.databasePath = databasePath
        self.userId = userId
        self.deviceId = deviceId
        self.token = token
        self.conversationId = conversationId
        self.messages = messages
        self.loads = loads
        self.pageSize = pageSize
        self.flushEveryWrite = flushEveryWrite
    }
}

/// What the receiving device measured.
package struct DeviceReport: Codable, Sendable {
    /// Before the client was created.
    package var memoryAtStartup: MemorySnapshot?
    /// The client created (database opened, outbox loaded), not started.
    package var memoryAfterOpen: MemorySnapshot?
    package var openSeconds: Double
    /// Measurement 4: from `start()` until the last missed message was announced (`messageReceived`), which
    /// PigeonKit does after the message is persisted.
    package var catchUpSeconds: Double
    /// CPU time the device's process used during the catch-up (all its threads).
    package var catchUpCPUSeconds: Double
    package var received: Int
    package var contiguousSeq: Int64
    package var memoryAfterCatchUp: MemorySnapshot?
    /// Measurement 2: the newest page loaded right after the catch-up, then the measured loads.
    package var firstNewestPageMicroseconds: Double
    package var newestPage: LatencySummary
    package var olderPages: LatencySummary
    /// Distinct `before:` pages the scrolled-back loads cycled through.
    package var olderPagesDistinct: Int
    /// Measurement 3: after the catch-up and the page loads, the client still running.
    package var memoryAfterLoads: MemorySnapshot?
    /// Where the file-backed part of ``memoryAfterLoads`` comes from.
    package var fileBackedAfterLoads: FileBackedMemory?
}

package enum DevicePhases {
    /// How long the client runs on its own after the catch-up before the measured loads: its delivered receipt
    /// goes out and its echo comes back, so the loads measure reading rather than that moment's traffic.
    package static let settle = Duration.seconds(1)

    package static func run(_ job: DeviceJob, memoryAtStartup: MemorySnapshot?) async throws -> DeviceReport {
        let clock = ContinuousClock()
        var logger = Logger(label: "PigeonKit")
        logger.logLevel = .warning
        var configuration = PigeonClient.Configuration(
            serverURL: URL(string: job.serverURL)!, databasePath: job.databasePath,
            credentials: .init(userId: job.userId, deviceId: job.deviceId, token: job.token))
        configuration.logger = logger
        configuration.flushEveryWrite = job.flushEveryWrite
        let openStart = clock.now
        let client = try PigeonClient(configuration: configuration)
        let openSeconds = (clock.now - openStart).seconds
        let memoryAfterOpen = MemorySnapshot.now

        let counter = ReceivedCounter(target: job.messages)
        client.addListener(counter)
        let cpuAtStart = ProcessStats.cpuSecondsOfThisProcess
        let start = clock.now
        client.start()
        let deadline = start + .seconds(120)
        while counter.finishedAt == nil {
            guard clock.now < deadline else {
                await client.stop()
                throw BenchError("catch-up: \(counter.count) of \(job.messages) messages after 120 s")
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        let catchUpSeconds = (counter.finishedAt! - start).seconds
        let catchUpCPUSeconds = counter.cpuSecondsAtFinish! - cpuAtStart
        client.removeListener(counter)
        guard let conversation = try client.conversation(id: job.conversationId), conversation.contiguousSeq == job.messages else {
            throw BenchError("catch-up: the conversation's contiguous seq is not \(job.messages) after the last message")
        }
        let memoryAfterCatchUp = MemorySnapshot.now

        let firstStart = clock.now
        let firstPage = try client.messages(in: job.conversationId, limit: job.pageSize)
        let first = (clock.now - firstStart).seconds * 1e6
        guard firstPage.messages.count == job.pageSize, let newestFirstSeq = firstPage.messages.first?.seq else {
            throw BenchError("the newest page has \(firstPage.messages.count) messages, not \(job.pageSize)")
        }
        try await Task.sleep(for: settle)
        let pages = try loadPages(client, job: job, newestFirstSeq: newestFirstSeq, clock: clock)
        let memoryAfterLoads = MemorySnapshot.now
        let fileBackedAfterLoads = FileBackedMemory.now
        await client.stop()
        return DeviceReport(
            memoryAtStartup: memoryAtStartup, memoryAfterOpen: memoryAfterOpen, openSeconds: openSeconds,
            catchUpSeconds: catchUpSeconds, catchUpCPUSeconds: catchUpCPUSeconds, received: counter.count,
            contiguousSeq: conversation.contiguousSeq, memoryAfterCatchUp: memoryAfterCatchUp, firstNewestPageMicroseconds: first, newestPage: pages.newest,
            olderPages: pages.older, olderPagesDistinct: pages.distinctOlder, memoryAfterLoads: memoryAfterLoads,
            fileBackedAfterLoads: fileBackedAfterLoads)
    }

    /// Measurement 2: `loads` times the newest page, then `loads` pages scrolled back with `before:`, walking from
    /// the newest page to the oldest full page and starting over, so every part of the conversation is read.
    private static func loadPages(
        _ client: PigeonClient, job: DeviceJob, newestFirstSeq: Int64, clock: ContinuousClock
    ) throws -> (newest: LatencySummary, older: LatencySummary, distinctOlder: Int) {
        var newest = LatencySample()
        for _ in 0..<job.loads {
            let start = clock.now
            let page = try client.messages(in: job.conversationId, limit: job.pageSize)
            newest.record(clock.now - start)
            guard page.messages.count == job.pageSize else { throw BenchError("a newest page had \(page.messages.count) messages") }
        }
        var older = LatencySample()
        var before = newestFirstSeq
        var distinct: Set<Int64> = []
        for _ in 0..<job.loads {
            if before - Int64(job.pageSize) < 1 { before = newestFirstSeq }
            let start = clock.now
            let page = try client.messages(in: job.conversationId, before: before, limit: job.pageSize)
            older.record(clock.now - start)
            guard page.messages.count == job.pageSize, page.messages.last?.seq == before - 1, let firstSeq = page.messages.first?.seq else {
                throw BenchError("the page before \(before) had \(page.messages.count) messages, ending at \(page.messages.last?.seq ?? 0)")
            }
            distinct.insert(before)
            before = firstSeq
        }
        return (newest.summary, older.summary, distinct.count)
    }
}

/// Counts `messageReceived` and notes the instant the `target`-th arrives, with the process's CPU time then
/// (listeners are called synchronously, right after the write, so the instant is the moment the last message was
/// persisted and announced).
final class ReceivedCounter: PigeonListener {
    private struct State {
        var count = 0
        var finishedAt: ContinuousClock.Instant?
        var cpuSecondsAtFinish: Double?
    }

    private let target: Int
    private let state = Mutex(State())

    init(target: Int) {
        self.target = target
    }

    var count: Int { state.withLock { $0.count } }
    var finishedAt: ContinuousClock.Instant? { state.withLock { $0.finishedAt } }
    var cpuSecondsAtFinish: Double? { state.withLock { $0.cpuSecondsAtFinish } }

    func onMessageReceived(_ message: PigeonMessage) {
        let now = ContinuousClock.now
        state.withLock { state in
            state.count += 1
            if state.count == target {
                state.finishedAt = now
                state.cpuSecondsAtFinish = ProcessStats.cpuSecondsOfThisProcess
            }
        }
    }
}
