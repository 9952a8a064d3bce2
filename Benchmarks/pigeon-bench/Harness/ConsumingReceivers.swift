import PigeonBenchSupport
import Synchronization

/// What one consuming receiver of a throughput run got, keyed by a number unique among its sender's messages (the
/// Pigeon seq, the JetStream stream sequence, the counter in an MQTT payload).
final class ReceivedMessages: Sendable {
    private struct State {
        var keys = Set<Int64>()
        var duplicates = 0
    }

    private let state = Mutex(State())

    /// The receiver got message `key` (again, if it already had it).
    func record(_ key: Int64) {
        state.withLock { state in
            if !state.keys.insert(key).inserted { state.duplicates += 1 }
        }
    }

    /// Different messages received.
    var distinct: Int { state.withLock { $0.keys.count } }
    /// Receptions of a message already received.
    var duplicates: Int { state.withLock { $0.duplicates } }
}

/// What the consuming receivers of a throughput run got, checked against what their senders had accepted.
struct ReceiverCounts: Codable, Sendable {
    /// Different messages the receivers got.
    var received: Int
    /// Receptions of a message the receiver already had (a redelivery).
    var duplicates: Int
    /// Accepted messages the receivers did not get within the drain timeout: per receiver, its sender's accepted
    /// count minus the different messages it got, where that is positive.
    var missing: Int
    /// Seconds from the senders' end until every receiver had all of its sender's accepted messages; `nil` if that
    /// did not happen within the drain timeout.
    var allReceivedSeconds: Double?

    init(_ ledgers: [ReceivedMessages], answers: [ConnectionAnswers], allReceivedAfter: Duration?) {
        received = ledgers.reduce(0) { $0 + $1.distinct }
        duplicates = ledgers.reduce(0) { $0 + $1.duplicates }
        missing = zip(ledgers, answers).reduce(0) { $0 + max(0, $1.1.accepted - $1.0.distinct) }
        allReceivedSeconds = allReceivedAfter?.seconds
    }
}

/// Runs `receiver(index, ready)` for each of `count` receivers as child tasks (each increments `ready` once it
/// consumes), waits until all are ready (failing if that has not happened by the end of the warm-up), runs `body`
/// with the log that the receivers' failures go to, and then cancels the receivers.
func withConsumingReceivers<T: Sendable>(
    count: Int,
    window: MeasurementWindow,
    receiver: @escaping @Sendable (_ index: Int, _ ready: Counter) async throws -> Void,
    _ body: (FailureLog) async throws -> T
) async throws -> T {
    let failures = FailureLog()
    let ready = Counter()
    return try await withThrowingTaskGroup(of: Void.self) { group in
        for index in 0..<count {
            group.addTask { await failures.capture("receiver \(index)") { try await receiver(index, ready) } }
        }
        defer { group.cancelAll() }
        guard try await waitUntil(window.start, failures: failures, { ready.count == count }) else {
            throw BenchError.timedOut("only \(ready.count) of \(count) receivers were ready by the end of the warm-up")
        }
        return try await body(failures)
    }
}

/// Waits until each receiver's ledger holds at least its sender's accepted count; returns how long that took, or
/// `nil` if `timeout` passed first. Throws when a receiver failed.
func waitUntilReceived(
    _ ledgers: [ReceivedMessages],
    answers: [ConnectionAnswers],
    timeout: Duration,
    failures: FailureLog
) async throws -> Duration? {
    let start = ContinuousClock.now
    let done = try await waitUntil(start + timeout, failures: failures) {
        zip(ledgers, answers).allSatisfy { $0.distinct >= $1.accepted }
    }
    return done ? .now - start : nil
}

extension ThroughputResult {
    /// A broker's pipelined run (mosquitto, NATS): `connections` publishers with `inFlight` each, their answers, what
    /// their consuming receivers got, and how long after the last answer the receivers had everything (`nil`: not
    /// within the drain timeout).
    init(
        pipelined window: MeasurementWindow, connections: Int, inFlight: Int, tally: ThroughputTally, answers: [ConnectionAnswers],
        ledgers: [ReceivedMessages], drain: Duration?, load: LoadSample
    ) {
        self.init(
            connections: connections,
            window: inFlight,
            measuredSeconds: window.seconds,
            acceptedInWindow: tally.acceptedInWindow,
            acceptedPerSecond: tally.acceptedPerSecond,
            acceptedTotal: answers.reduce(0) { $0 + $1.accepted },
            errors: tally.errors,
            unanswered: answers.reduce(0) { $0 + $1.unanswered },
            drainSeconds: drain?.seconds,
            load: load,
            receivers: ReceiverCounts(ledgers, answers: answers, allReceivedAfter: drain)
        )
    }
}
