import PigeonBenchSupport

/// The Pigeon throughput scenarios: one sender device per conversation pair sends as fast as its transport allows
/// for the measured window, then the run waits until the server has stored every accepted message. With several
/// nodes the senders alternate between them. The transports are in `PigeonThroughput+WebSocket.swift` and
/// `PigeonThroughput+HTTP.swift`, the consuming receivers in `PigeonThroughput+Receivers.swift`.
struct PigeonThroughput {
    let deployment: PigeonDeployment
    let settings: BenchSettings
    /// Prefix of the user ids the run registers (unique per run, so that runs against one server do not collide).
    let namePrefix: String

    /// Runs `sender` for each of `settings.connections` fresh conversation pairs, with the API of the node that
    /// sender uses; with `settings.throughputReceivers` each conversation's receiver device consumes its stream on
    /// the partner node (see ``consume(_:baseURL:ledger:receiptDelay:tally:ready:)``) from before the first send.
    /// `inFlightWindow` is the number of sends a sender keeps in flight, for the report. After the sends it waits
    /// until every accepted message is stored and, with receivers, has reached its receiver.
    func measure(
        inFlightWindow: Int?,
        sender: @escaping @Sendable (ConversationPair, PigeonAPI, MeasurementWindow, ThroughputTally) async throws -> ConnectionAnswers
    ) async throws -> ThroughputResult {
        let pairs = try await deployment.setupAPI.makePairs(count: settings.connections, prefix: namePrefix, offlinePushMembers: settings.offlinePushMembers)
        let started = ContinuousClock.now
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let tally = ThroughputTally(window: window)
        let deployment = deployment
        let settings = settings
        let ledgers = settings.throughputReceivers ? pairs.map { _ in ReceivedMessages() } : []
        let (drain, load) = try await LoadMonitor.measure(servers: deployment.pids, services: deployment.services, window: window) {
            try await withConsumingReceivers(
                count: ledgers.count,
                window: window,
                receiver: { index, ready in
                    try await Self.consume(
                        pairs[index],
                        baseURL: deployment.partnerNode(forConnection: index).baseURL,
                        ledger: ledgers[index],
                        receiptDelay: settings.receiptDelay,
                        tally: tally,
                        ready: ready
                    )
                }
            ) { failures in
                let answers = try await runSenders(count: pairs.count, window: window, answerTimeout: settings.drainTimeout) { index in
                    try await sender(pairs[index], deployment.api(deployment.node(forConnection: index)), window, tally)
                }
                return try await Self.drain(pairs: pairs, answers: answers, ledgers: ledgers, api: deployment.setupAPI, settings: settings, failures: failures)
            }
        }
        let acceptedTotal = drain.answers.reduce(0) { $0 + $1.accepted }
        return ThroughputResult(
            connections: settings.connections,
            window: inFlightWindow,
            measuredSeconds: window.seconds,
            acceptedInWindow: tally.acceptedInWindow,
            acceptedPerSecond: tally.acceptedPerSecond,
            acceptedTotal: acceptedTotal,
            errors: tally.errors,
            unanswered: drain.answers.reduce(0) { $0 + $1.unanswered },
            drainSeconds: drain.storedAt.map { ($0 - drain.start).seconds },
            load: load,
            storedPerSecond: drain.storedAt.map { Double(acceptedTotal) / ($0 - started).seconds },
            receivers: ledgers.isEmpty ? nil : ReceiverCounts(ledgers, answers: drain.answers, allReceivedAfter: drain.receivedAfter)
        )
    }

    /// When the accepted messages of a run were all stored and all received, from the end of the sends.
    private struct Drain: Sendable {
        let answers: [ConnectionAnswers]
        let start: ContinuousClock.Instant
        /// `nil` if they were not all stored within the drain timeout.
        let storedAt: ContinuousClock.Instant?
        /// `nil` without receivers, or if they did not all arrive within the drain timeout.
        let receivedAfter: Duration?
    }

    /// Waits until every accepted message is stored, then (with receivers) until each receiver has them all, both
    /// within the drain timeout from now.
    private static func drain(
        pairs: [ConversationPair],
        answers: [ConnectionAnswers],
        ledgers: [ReceivedMessages],
        api: PigeonAPI,
        settings: BenchSettings,
        failures: FailureLog
    ) async throws -> Drain {
        let start = ContinuousClock.now
        let stored = try await api.waitUntilStored(zip(pairs, answers).map { (pair: $0, messages: $1.accepted) }, timeout: settings.drainTimeout)
        let storedAt = stored.map { start + $0 }
        var receivedAfter: Duration?
        if !ledgers.isEmpty {
            let remaining = start + settings.drainTimeout - .now
            receivedAfter = try await waitUntilReceived(ledgers, answers: answers, timeout: max(remaining, .zero), failures: failures)
                .map { _ in ContinuousClock.now - start }
        }
        return Drain(answers: answers, start: start, storedAt: storedAt, receivedAfter: receivedAfter)
    }
}
