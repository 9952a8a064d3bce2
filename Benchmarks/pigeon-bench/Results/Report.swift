import PigeonBenchSupport

extension ThroughputResult {
    /// `accepted` names the answer counted ("acks", "202s", "PUBACKs"); `drained` what the drain waited for.
    func printLines(accepted: String, drained: String) {
        print(
            "  accepted:  \(Format.rate(acceptedPerSecond)) "
                + "(\(Format.count(acceptedInWindow)) \(accepted) in \(Format.seconds(measuredSeconds)))"
        )
        print("  refused:   \(Format.errors(errors)); unanswered: \(Format.count(unanswered))")
        if let drainSeconds {
            print(
                "  drained:   \(drained) \(Format.seconds(drainSeconds)) after the last answer "
                    + "(\(Format.count(acceptedTotal)) accepted in all"
                    + (storedPerSecond.map { ": \(Format.rate($0)) from the first send until all were stored)" } ?? ")")
            )
        } else {
            print("  drained:   NOT all \(Format.count(acceptedTotal)) accepted messages \(drained) within the drain timeout")
        }
        if let receivers {
            print(
                "  receivers: \(Format.count(receivers.received)) different messages got; "
                    + "\(Format.count(receivers.missing)) accepted ones missing, \(Format.count(receivers.duplicates)) duplicates; "
                    + (receivers.allReceivedSeconds.map { "all there \(Format.seconds($0)) after the sends" }
                        ?? "NOT all there within the drain timeout")
            )
        }
        print("  load:      \(Format.load(load))")
        print(
            "  CPU per accepted message in the window: server \(Format.microseconds(serverCPUMicrosecondsPerAccepted))"
                + (serviceCPUMicrosecondsPerAccepted.map { ", PostgreSQL + Redis \(Format.microseconds($0))" } ?? "")
                + ", bench \(Format.microseconds(benchCPUMicrosecondsPerAccepted))"
        )
        print(
            "  context switches per accepted message in the window: server \(Format.switches(serverContextSwitchesPerAccepted))"
                + Format.exitedThreads(load)
        )
    }
}

extension LatencyResult {
    /// `receiverLabel` names the measured path ("send → message.new", "publish → subscriber").
    func printLines(receiverLabel: String) {
        print("  sent:      \(Format.count(sent)) measured messages (\(Format.rate(sentPerSecond)) achieved)")
        print("  \(receiverLabel): \(Format.latency(toReceiver)); missing after grace: \(Format.count(missingAtReceiver))")
        if let toDelivered, let missingDelivered {
            print("  send → ✓✓: \(Format.latency(toDelivered)); missing after grace: \(Format.count(missingDelivered))")
        }
        print("  refused:   \(Format.errors(errors))")
        print("  load:      \(Format.load(load))")
        print(
            "  server per message sent in the window: CPU \(Format.microseconds(serverCPUMicrosecondsPerMessage)), "
                + "context switches \(Format.switches(serverContextSwitchesPerMessage))" + Format.exitedThreads(load)
        )
    }
}

extension IdleStreamsResult {
    /// Prints the stream counts and the server's memory with them open.
    func printLines() {
        print(
            "  opened:    \(Format.count(opened)) of \(Format.count(streams)) streams in \(Format.seconds(openSeconds)) "
                + "(\(Format.count(failed)) failed, \(Format.count(closedByServer)) closed by the server)"
        )
        if let firstError { print("  first failure: \(firstError)") }
        if closedByServer > 0 {
            print("  warning:   the server closed \(Format.count(closedByServer)) streams (more per device than it allows? raise --stream-devices): the memory figure is not for \(Format.count(streams)) open streams")
        }
        print(
            "  RSS:       \(Format.mebibytes(residentBytesAtStartup)) at start-up, "
                + "\(Format.mebibytes(residentBytesBefore)) before opening, "
                + "\(Format.mebibytes(residentBytesWithStreams)) with the streams open"
        )
        print(
            "  per stream: \(Format.bytes(bytesPerStreamSinceStartup)) since start-up, "
                + "\(Format.bytes(bytesPerStreamSinceBefore)) since just before opening"
        )
    }
}

extension BenchReport {
    /// The reference brokers that ran, each with its column title and its short name in the ratio column's title.
    fileprivate var brokerColumns: [SummaryColumns.Broker] {
        [
            mosquitto.map { SummaryColumns.Broker(title: "mosquitto (QoS 1)", shortName: "mosquitto", acceptAnswer: "MQTT: PUBACKs", results: $0) },
            nats.map { SummaryColumns.Broker(title: "NATS JetStream (file)", shortName: "NATS", acceptAnswer: "NATS: PubAcks", results: $0) },
            redis.map {
                SummaryColumns.Broker(title: "Redis Streams (AOF always)", shortName: "Redis", acceptAnswer: "Redis: XADD replies", results: $0)
            },
        ]
        .compactMap { $0 }
    }

    /// The comparison table at the end of a run: each deployment's figures, their ratio to the embedded mode, the
    /// reference brokers with the ratio of the reference deployment to each, then the production targets.
    func printSummary() {
        let brokers = brokerColumns
        let columns = SummaryColumns(runs: pigeon, brokers: brokers)
        var table = Table(header: columns.header)
        let brokerThroughput = brokers.contains { $0.results.throughput != nil }
        if pigeon.contains(where: { $0.wsThroughput != nil }) || brokerThroughput {
            table.add(
                columns.figure(
                    (brokers.isEmpty
                        ? "accepted/s, WebSocket" : "accepted/s, WebSocket (\(brokers.map(\.acceptAnswer).joined(separator: ", ")))")
                        + ", window \(settings.window)",
                    { $0.wsThroughput?.acceptedPerSecond }, Format.rate, broker: { $0.throughput?.acceptedPerSecond }
                )
            )
        }
        if pigeon.contains(where: { $0.wsThroughput?.receivers != nil }) || brokerThroughput {
            table.add(
                columns.text(
                    "receivers, WebSocket run: got / missing / duplicates", { Self.receiverCounts($0.wsThroughput?.receivers) },
                    broker: { Self.receiverCounts($0.throughput?.receivers) }
                )
            )
        }
        if pigeon.contains(where: { $0.wsThroughput != nil }) || brokerThroughput {
            table.add(
                columns.figure(
                    "server CPU per msg, at saturation (WebSocket run)", { $0.wsThroughput?.serverCPUMicrosecondsPerAccepted },
                    Format.microseconds, broker: { $0.throughput?.serverCPUMicrosecondsPerAccepted }
                )
            )
            table.add(
                columns.figure(
                    "server context switches per msg, at saturation (WebSocket run)", { $0.wsThroughput?.serverContextSwitchesPerAccepted },
                    Format.switches, broker: { $0.throughput?.serverContextSwitchesPerAccepted }
                )
            )
            if pigeon.contains(where: { $0.wsThroughput?.serviceCPUMicrosecondsPerAccepted != nil }) {
                table.add(
                    columns.figure(
                        "PostgreSQL + Redis CPU per accepted msg, WebSocket run", { $0.wsThroughput?.serviceCPUMicrosecondsPerAccepted },
                        Format.microseconds
                    )
                )
            }
            table.add(
                columns.text(
                    "bench CPU per accepted msg, WebSocket run", { Format.microseconds($0.wsThroughput?.benchCPUMicrosecondsPerAccepted) },
                    broker: { $0.throughput.map { Format.microseconds($0.benchCPUMicrosecondsPerAccepted) } }
                )
            )
        }
        if pigeon.contains(where: { $0.wsThroughput?.storedPerSecond != nil }) {
            table.add(columns.figure("stored/s, WebSocket run, first send → all stored", { $0.wsThroughput?.storedPerSecond }, Format.rate))
        }
        if pigeon.contains(where: { $0.httpThroughput != nil }) {
            table.add(columns.figure("accepted/s, HTTP", { $0.httpThroughput?.acceptedPerSecond }, Format.rate))
            table.add(
                columns.figure(
                    "server CPU per accepted msg, HTTP run", { $0.httpThroughput?.serverCPUMicrosecondsPerAccepted }, Format.microseconds
                )
            )
        }
        for rate in settings.rates {
            func run(_ results: PigeonResults) -> LatencyResult? { results.latency.first { $0.rate == rate } }
            func brokerRun(_ results: BrokerResults) -> LatencyResult? { results.latency.first { $0.rate == rate } }
            guard pigeon.contains(where: { run($0) != nil }) || brokers.contains(where: { brokerRun($0.results) != nil }) else { continue }
            for (name, percentile) in [("p50", \LatencySummary.p50Ms), ("p99", \LatencySummary.p99Ms)] {
                table.add(
                    columns.figure(
                        "@\(rate)/s send → message.new \(name)", { run($0)?.toReceiver[keyPath: percentile] }, Self.milliseconds,
                        broker: { brokerRun($0)?.toReceiver[keyPath: percentile] }
                    )
                )
            }
            for (name, percentile) in [("p50", \LatencySummary.p50Ms), ("p99", \LatencySummary.p99Ms)]
            where pigeon.contains(where: { run($0)?.toDelivered != nil }) {
                table.add(
                    columns.figure("@\(rate)/s send → ✓✓ \(name)", { run($0)?.toDelivered?[keyPath: percentile] }, Self.milliseconds)
                )
            }
            table.add(
                columns.figure(
                    "@\(rate)/s server CPU per msg, paced", { run($0)?.serverCPUMicrosecondsPerMessage }, Format.microseconds,
                    broker: { brokerRun($0)?.serverCPUMicrosecondsPerMessage }
                )
            )
            table.add(
                columns.figure(
                    "@\(rate)/s server context switches per msg, paced", { run($0)?.serverContextSwitchesPerMessage }, Format.switches,
                    broker: { brokerRun($0)?.serverContextSwitchesPerMessage }
                )
            )
        }
        table.add(
            columns.text(
                "RSS at start-up (per node)", { Self.perNode($0.residentBytesAtStartup, Format.mebibytes) },
                broker: { Format.mebibytes($0.residentBytesIdle) }
            )
        )
        if pigeon.contains(where: { !$0.peakResidentBytes.allSatisfy { $0 == nil } }) || brokers.contains(where: { $0.results.peakResidentBytes != nil }) {
            table.add(
                columns.text(
                    "RSS peak under load (per node)", { Self.perNode($0.peakResidentBytes, Format.mebibytes) },
                    broker: { Format.mebibytes($0.peakResidentBytes) }
                )
            )
        }
        if pigeon.contains(where: { $0.idleStreams != nil }) {
            table.add(
                columns.text(
                    "RSS with \(Format.count(settings.streams)) idle streams open",
                    { results in
                        results.idleStreams.map {
                            "\(Format.mebibytes($0.residentBytesWithStreams)), \(Format.bytes($0.bytesPerStreamSinceStartup))/stream"
                        } ?? ""
                    }
                )
            )
        }
        let throughputLoads: [(scenario: String, load: (PigeonResults) -> LoadSample?)] = [
            ("ws-throughput", { $0.wsThroughput?.load }), ("http-throughput", { $0.httpThroughput?.load }),
        ]
        for (scenario, load) in throughputLoads {
            let isWebSocket = scenario == "ws-throughput"
            guard pigeon.contains(where: { load($0) != nil }) || (isWebSocket && brokerThroughput) else { continue }
            func brokerLoad(_ results: BrokerResults) -> LoadSample? { isWebSocket ? results.throughput?.load : nil }
            table.add(
                columns.text(
                    "CPU cores in \(scenario): server (per node)",
                    { load($0).map { Self.perNode($0.servers.map(\.cores), Format.cores) } ?? "" },
                    broker: { brokerLoad($0).map { Self.perNode($0.servers.map(\.cores), Format.cores) } }
                )
            )
            if pigeon.contains(where: { load($0)?.serviceCores.isEmpty == false }) {
                table.add(
                    columns.text(
                        "CPU cores in \(scenario): PostgreSQL / Redis",
                        { results in
                            guard let sample = load(results), !sample.serviceCores.isEmpty else { return "" }
                            return "\(Format.cores(sample.serviceCores["postgres"])) / \(Format.cores(sample.serviceCores["redis"]))"
                        }
                    )
                )
            }
            table.add(
                columns.text(
                    "CPU cores in \(scenario): bench", { load($0).map { Format.cores($0.benchCores) } ?? "" },
                    broker: { brokerLoad($0).map { Format.cores($0.benchCores) } }
                )
            )
        }
        print("\n== summary ==")
        table.print()
        if columns.baseline != nil, pigeon.count > 1 {
            print("× embedded: the figure divided by the embedded one (above 1: more accepted/s, or a longer latency)")
        }
        if pigeon.contains(where: { $0.deployment == Backend.production2.rawValue }) {
            print("\(Backend.production2.rawValue): \(Backend.production2.summary)")
        }
        print(
            "server CPU / context switches per msg: the server process's CPU time (user + system) and context switches "
                + "(voluntary + involuntary, per thread from /proc/PID/task/*/status; a thread that exits inside the window "
                + "is missed) in the measured window, divided at saturation by the messages accepted in it (with their delivery "
                + "to the receivers), paced by the messages sent in it."
        )
        if mosquitto != nil {
            print(
                """
                note: mosquitto's PUBACK means the broker holds the message in memory (its persistence is a periodic \
                snapshot), Pigeon's accept means it is durable on disk. The MQTT runs include delivery to a consuming \
                subscriber per topic.
                """
            )
        }
        if nats != nil {
            print(
                """
                note: a JetStream PubAck means the message is written to the stream's files through the OS page cache; \
                nats-server fsyncs them periodically (every 2 minutes by default), not per message. Its runs include \
                the duplicate check of a Nats-Msg-Id per message and delivery to a durable push consumer per subject \
                with an explicit ack per message.
                """
            )
        }
        if redis != nil {
            print(
                """
                note: redis-server runs with appendonly yes, appendfsync always, save "" (and no automatic AOF \
                rewrite): an XADD is answered after the AOF write holding it is fsynced, like a Pigeon accept; one \
                fsync covers every command of an event-loop pass. Each consumer reads its stream with XREADGROUP in \
                a consumer group and sends an XACK per entry, a second fsynced write per message.
                """
            )
        }
        if !brokers.isEmpty, pigeon.contains(where: { $0.wsThroughput != nil }) {
            print(
                settings.throughputReceivers
                    ? "The Pigeon throughput runs include delivery to the receiver device of every conversation, which "
                        + "sends delivered receipts (gathered over \(settings.receiptDelayMilliseconds) ms; 0: one per message)."
                    : "The Pigeon throughput runs had no receiver connected (--no-throughput-receivers)."
            )
        }
        for check in targets {
            print(check.line)
        }
    }

    /// "got / missing / duplicates" of a throughput run's receivers, or "no receivers".
    private static func receiverCounts(_ counts: ReceiverCounts?) -> String {
        guard let counts else { return "no receivers" }
        return "\(Format.count(counts.received)) / \(Format.count(counts.missing)) / \(Format.count(counts.duplicates))"
    }

    private static func milliseconds(_ value: Double?) -> String {
        value.map(Format.milliseconds) ?? "n/a"
    }

    /// Per-node values joined by " + " (they add up to the service's total).
    private static func perNode<Value>(_ values: [Value?], _ format: (Value?) -> String) -> String {
        values.map(format).joined(separator: " + ")
    }
}

extension BrokerResults {
    /// The broker's highest resident set size over its load scenarios.
    var peakResidentBytes: UInt64? {
        ([throughput?.load.peakResidentBytes] + latency.map(\.load.peakResidentBytes)).compactMap { $0 }.max()
    }
}

/// The columns of the summary table: one per deployment, a ratio to the embedded mode after each other deployment,
/// and each reference broker with the ratio of the reference deployment (the embedded one if it ran) to it.
private struct SummaryColumns {
    /// A reference broker's column.
    struct Broker {
        let title: String
        /// Its name in the ratio column's title.
        let shortName: String
        /// What its accepted/s count, e.g. "MQTT: PUBACKs".
        let acceptAnswer: String
        let results: BrokerResults
    }

    let runs: [PigeonResults]
    let brokers: [Broker]
    /// The embedded mode's results, which the ratios divide by.
    let baseline: PigeonResults?
    /// The deployment compared with the brokers.
    let reference: PigeonResults?

    init(runs: [PigeonResults], brokers: [Broker]) {
        self.runs = runs
        self.brokers = brokers
        baseline = runs.first { $0.deployment == Backend.embedded.rawValue }
        reference = baseline ?? runs.first
    }

    private func hasRatio(_ results: PigeonResults) -> Bool {
        baseline != nil && results.deployment != Backend.embedded.rawValue
    }

    var header: [String] {
        var header = ["metric"]
        for results in runs {
            header.append(results.deployment == PigeonDeployment.givenServerLabel ? "pigeon (--url)" : results.deployment)
            if hasRatio(results) { header.append("× embedded") }
        }
        for broker in brokers {
            header += [broker.title, "\(reference?.deployment ?? "pigeon") / \(broker.shortName)"]
        }
        return header
    }

    /// A row of a number each deployment (and, where `broker` gives one, each broker) measured, with ratios.
    func figure(
        _ metric: String,
        _ value: (PigeonResults) -> Double?,
        _ format: (Double?) -> String,
        broker: (BrokerResults) -> Double? = { _ in nil }
    ) -> [String] {
        var row = [metric]
        for results in runs {
            row.append(format(value(results)))
            if hasRatio(results) { row.append(Format.ratio(value(results), baseline.flatMap(value))) }
        }
        for column in brokers {
            let brokerValue = broker(column.results)
            row += brokerValue == nil ? ["", ""] : [format(brokerValue), Format.ratio(reference.flatMap(value), brokerValue)]
        }
        return row
    }

    /// A row of text without ratios.
    func text(_ metric: String, _ cell: (PigeonResults) -> String, broker: (BrokerResults) -> String? = { _ in nil }) -> [String] {
        var row = [metric]
        for results in runs {
            row.append(cell(results))
            if hasRatio(results) { row.append("") }
        }
        for column in brokers {
            row += [broker(column.results) ?? "", ""]
        }
        return row
    }
}
