import Foundation
import PigeonBenchSupport
import Synchronization

/// What one sender connection of a throughput run got back for its sends (refusals are counted by the run's
/// ``ThroughputTally``).
struct ConnectionAnswers: Sendable {
    /// Accept answers (Pigeon `ack`/`202`, MQTT PUBACK) over the whole run, warm-up included.
    var accepted = 0
    /// Sends still waiting for an answer when the connection was ended.
    var unanswered = 0
}

/// Runs `count` sender connections concurrently until each has returned its answers. A sender stops sending when
/// `window` ends and then waits for its outstanding answers; those still waiting at `window.end + answerTimeout` are
/// cancelled, and a cancelled sender returns what it has (its unanswered sends included).
func runSenders(
    count: Int,
    window: MeasurementWindow,
    answerTimeout: Duration,
    _ sender: @escaping @Sendable (Int) async throws -> ConnectionAnswers
) async throws -> [ConnectionAnswers] {
    try await withThrowingTaskGroup(of: (index: Int, answers: ConnectionAnswers)?.self) { group in
        for index in 0..<count {
            group.addTask { (index, try await sender(index)) }
        }
        group.addTask {
            try await Task.sleep(until: window.end + answerTimeout)
            return nil
        }
        var answers = [ConnectionAnswers](repeating: ConnectionAnswers(), count: count)
        var finished = 0
        while finished < count, let next = try await group.next() {
            guard let next else {
                group.cancelAll()
                continue
            }
            answers[next.index] = next.answers
            finished += 1
        }
        group.cancelAll()
        return answers
    }
}

/// Counts the answers to sends across all connections of a throughput run: the accepted ones inside the
/// measured window, and the refused ones by error code.
final class ThroughputTally: Sendable {
    private struct Counts {
        var acceptedInWindow = 0
        var errors: [String: Int] = [:]
    }

    private let window: MeasurementWindow
    private let counts = Mutex(Counts())

    init(window: MeasurementWindow) {
        self.window = window
    }

    /// An accept answer (a Pigeon `ack` or `202`, an MQTT PUBACK) arrived at `instant`.
    func recordAccepted(at instant: ContinuousClock.Instant) {
        guard window.contains(instant) else { return }
        counts.withLock { $0.acceptedInWindow += 1 }
    }

    /// A send was refused with `code` (every refusal counts, inside the window or not).
    func recordError(_ code: String) {
        counts.withLock { $0.errors[code, default: 0] += 1 }
    }

    var acceptedInWindow: Int { counts.withLock { $0.acceptedInWindow } }
    var errors: [String: Int] { counts.withLock { $0.errors } }
    var acceptedPerSecond: Double { Double(acceptedInWindow) / window.seconds }
}

extension ThroughputResult {
    /// A broker's pipelined run (mosquitto, NATS): `settings.connections` publisher/receiver pairs. Every
    /// `receiver(index, ready, ledger)` consumes (recording each message in its ledger) before publishing starts;
    /// every `sender(index, window, tally)` keeps `settings.window` publishes in flight until the window ends. Then
    /// the run waits up to the drain timeout until the receivers have every accepted message. The broker's load is
    /// measured over the window.
    static func brokerThroughput(
        settings: BenchSettings, brokerPid: pid_t,
        receiver: @escaping @Sendable (_ index: Int, _ ready: Counter, _ ledger: ReceivedMessages) async throws -> Void,
        sender: @escaping @Sendable (_ index: Int, _ window: MeasurementWindow, _ tally: ThroughputTally) async throws -> ConnectionAnswers
    ) async throws -> ThroughputResult {
        let pairs = settings.connections
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let tally = ThroughputTally(window: window)
        let ledgers = (0..<pairs).map { _ in ReceivedMessages() }
        let ((answers, drain), load) = try await LoadMonitor.measure(servers: [brokerPid], window: window) {
            try await withConsumingReceivers(
                count: pairs,
                window: window,
                receiver: { index, ready in try await receiver(index, ready, ledgers[index]) }
            ) { failures in
                let answers = try await runSenders(count: pairs, window: window, answerTimeout: settings.drainTimeout) { index in
                    try await sender(index, window, tally)
                }
                let drain = try await waitUntilReceived(ledgers, answers: answers, timeout: settings.drainTimeout, failures: failures)
                return (answers, drain)
            }
        }
        return ThroughputResult(
            pipelined: window, connections: pairs, inFlight: settings.window, tally: tally, answers: answers, ledgers: ledgers,
            drain: drain, load: load)
    }
}
