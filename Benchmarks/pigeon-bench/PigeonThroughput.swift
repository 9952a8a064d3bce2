/// The Pigeon throughput scenarios: one sender device per conversation pair sends as fast as its transport allows
/// for the measured window, then the run waits until the server has stored every accepted message. With several
/// nodes the senders alternate between them. The transports are in `PigeonThroughput+WebSocket.swift` and
/// `PigeonThroughput+HTTP.swift`.
struct PigeonThroughput {
    let deployment: PigeonDeployment
    let settings: BenchSettings
    /// Prefix of the user ids the run registers (unique per run, so that runs against one server do not collide).
    let namePrefix: String

    /// Runs `sender` for each of `settings.connections` fresh conversation pairs, with the API of the node that
    /// sender uses. `inFlightWindow` is the number of sends a sender keeps in flight, for the report.
    func measure(
        inFlightWindow: Int?,
        sender: @escaping @Sendable (ConversationPair, PigeonAPI, MeasurementWindow, ThroughputTally) async throws -> ConnectionAnswers
    ) async throws -> ThroughputResult {
        let pairs = try await deployment.setupAPI.makePairs(count: settings.connections, prefix: namePrefix)
        let started = ContinuousClock.now
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let tally = ThroughputTally(window: window)
        let deployment = deployment
        let (answers, load) = try await LoadMonitor.measure(servers: deployment.pids, services: deployment.services, window: window) {
            try await runSenders(count: pairs.count, window: window, answerTimeout: settings.drainTimeout) { index in
                try await sender(pairs[index], deployment.api(deployment.node(forConnection: index)), window, tally)
            }
        }
        let storedAfter = try await deployment.setupAPI.waitUntilStored(
            zip(pairs, answers).map { (pair: $0, messages: $1.accepted) },
            timeout: settings.drainTimeout
        )
        let acceptedTotal = answers.reduce(0) { $0 + $1.accepted }
        return ThroughputResult(
            connections: settings.connections,
            window: inFlightWindow,
            measuredSeconds: window.seconds,
            acceptedInWindow: tally.acceptedInWindow,
            acceptedPerSecond: tally.acceptedPerSecond,
            acceptedTotal: acceptedTotal,
            errors: tally.errors,
            unanswered: answers.reduce(0) { $0 + $1.unanswered },
            drainSeconds: storedAfter?.seconds,
            load: load,
            storedPerSecond: storedAfter.map { _ in Double(acceptedTotal) / (ContinuousClock.now - started).seconds }
        )
    }
}
