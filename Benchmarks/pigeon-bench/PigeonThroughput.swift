/// The Pigeon throughput scenarios: one sender device per conversation pair sends as fast as its transport allows
/// for the measured window, then the run waits until the server has stored every accepted message. The transports
/// are in `PigeonThroughput+WebSocket.swift` and `PigeonThroughput+HTTP.swift`.
struct PigeonThroughput {
    let api: PigeonAPI
    let server: PigeonServer
    let settings: BenchSettings
    /// Prefix of the user ids the run registers (unique per run, so that runs against one server do not collide).
    let namePrefix: String

    /// Runs `sender` for each of `settings.connections` fresh conversation pairs. `inFlightWindow` is the number of
    /// sends a sender keeps in flight, for the report.
    func measure(
        inFlightWindow: Int?,
        sender: @escaping @Sendable (ConversationPair, MeasurementWindow, ThroughputTally) async throws -> ConnectionAnswers
    ) async throws -> ThroughputResult {
        let pairs = try await api.makePairs(count: settings.connections, prefix: namePrefix)
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let tally = ThroughputTally(window: window)
        let (answers, load) = try await LoadMonitor.measure(serverPID: server.pid, window: window) {
            try await runSenders(count: pairs.count, window: window, answerTimeout: settings.drainTimeout) { index in
                try await sender(pairs[index], window, tally)
            }
        }
        let storedAfter = try await api.waitUntilStored(
            zip(pairs, answers).map { (pair: $0, messages: $1.accepted) },
            timeout: settings.drainTimeout
        )
        return ThroughputResult(
            connections: settings.connections,
            window: inFlightWindow,
            measuredSeconds: window.seconds,
            acceptedInWindow: tally.acceptedInWindow,
            acceptedPerSecond: tally.acceptedPerSecond,
            acceptedTotal: answers.reduce(0) { $0 + $1.accepted },
            errors: tally.errors,
            unanswered: answers.reduce(0) { $0 + $1.unanswered },
            drainSeconds: storedAfter?.seconds,
            load: load
        )
    }
}
