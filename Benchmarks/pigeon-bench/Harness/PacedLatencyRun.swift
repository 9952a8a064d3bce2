import Foundation
import PigeonBenchSupport

/// One paced latency measurement, the same for Pigeon and for MQTT: receivers connect first, then every sender sends on
/// its ``PacedSchedule`` through the warm-up and the measured window; afterwards the run waits up to `grace` for the
/// measured messages to arrive (and to be delivered) before it ends every connection.
struct PacedLatencyRun {
    let rate: Int
    let window: MeasurementWindow
    let grace: Duration
    /// One tracker per sender/receiver pair.
    let trackers: [DeliveryTracker]

    /// Runs `receiver(index, ready)` for every pair, where each receiver increments `ready` once it receives; when
    /// all are ready, runs `sender(index, schedule)`. Both run until the run cancels them. Returns where the measured
    /// messages stand at the end.
    func run(
        receiver: @escaping @Sendable (_ index: Int, _ ready: Counter) async throws -> Void,
        sender: @escaping @Sendable (_ index: Int, _ schedule: PacedSchedule) async throws -> Void
    ) async throws -> DeliveryTracker.Progress {
        let pairs = trackers.count
        let failures = FailureLog()
        let ready = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<pairs {
                group.addTask { await failures.capture("receiver \(index)") { try await receiver(index, ready) } }
            }
            guard try await waitUntil(window.start, failures: failures, { ready.count == pairs }) else {
                throw BenchError.timedOut("only \(ready.count) of \(pairs) receivers were ready by the end of the warm-up")
            }
            let start = ContinuousClock.now
            for index in 0..<pairs {
                let schedule = PacedSchedule(rate: rate, connections: pairs, index: index, start: start, end: window.end)
                group.addTask { await failures.capture("sender \(index)") { try await sender(index, schedule) } }
            }
            try await waitUntil(window.end, failures: failures) { false }
            try await waitUntil(window.end + grace, failures: failures) { trackers.allSatisfy(\.progress.isSettled) }
            group.cancelAll()
        }
        return trackers.map(\.progress).reduce(DeliveryTracker.Progress(), +)
    }
}

extension PacedLatencyRun {
    /// A broker's paced run (mosquitto, NATS): `settings.connections` publisher/receiver pairs, measured publish →
    /// receive only (brokers have no delivered receipt), with the broker's load over the window.
    static func brokerLatency(
        rate: Int, settings: BenchSettings, brokerPid: pid_t,
        receiver: @escaping @Sendable (_ index: Int, _ ready: Counter, _ tracker: DeliveryTracker) async throws -> Void,
        sender: @escaping @Sendable (_ index: Int, _ schedule: PacedSchedule, _ window: MeasurementWindow, _ tracker: DeliveryTracker) async throws
            -> Void
    ) async throws -> LatencyResult {
        let toReceiver = LatencyRecorder()
        let trackers = (0..<settings.connections).map { _ in DeliveryTracker(toReceiver: toReceiver, toDelivered: nil) }
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let run = PacedLatencyRun(rate: rate, window: window, grace: settings.grace, trackers: trackers)
        let (progress, load) = try await LoadMonitor.measure(servers: [brokerPid], window: window) {
            try await run.run(
                receiver: { index, ready in try await receiver(index, ready, trackers[index]) },
                sender: { index, schedule in try await sender(index, schedule, window, trackers[index]) }
            )
        }
        return LatencyResult(
            rate: rate, measuredSeconds: window.seconds, progress: progress, toReceiver: toReceiver.summary, toDelivered: nil, load: load)
    }
}

/// The send instants of one connection's paced sends: `rate` messages per second in total over `connections`
/// senders, each sender offset so that the sends of all of them interleave evenly.
struct PacedSchedule: Sequence, Sendable {
    let first: ContinuousClock.Instant
    let interval: Duration
    let end: ContinuousClock.Instant

    /// The schedule of sender `index` of `connections`, from `start` until (not including) `end`.
    init(rate: Int, connections: Int, index: Int, start: ContinuousClock.Instant, end: ContinuousClock.Instant) {
        let overall = Duration.seconds(1) / rate
        interval = overall * connections
        first = start + overall * index
        self.end = end
    }

    struct Iterator: IteratorProtocol {
        var upcoming: ContinuousClock.Instant
        let interval: Duration
        let end: ContinuousClock.Instant

        mutating func next() -> ContinuousClock.Instant? {
            guard upcoming < end else { return nil }
            defer { upcoming += interval }
            return upcoming
        }
    }

    func makeIterator() -> Iterator {
        Iterator(upcoming: first, interval: interval, end: end)
    }
}
