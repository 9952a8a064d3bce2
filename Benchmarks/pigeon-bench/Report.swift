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
        print("  load:      \(Format.load(load))")
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
    /// The comparison table at the end of a run: each deployment's figures, their ratio to the embedded mode, the
    /// mosquitto reference, then the production targets.
    func printSummary() {
        let columns = SummaryColumns(runs: pigeon, mosquitto: mosquitto)
        var table = Table(header: columns.header)
        if pigeon.contains(where: { $0.wsThroughput != nil }) || mosquitto?.throughput != nil {
            table.add(
                columns.figure(
                    mosquitto == nil ? "accepted/s, WebSocket" : "accepted/s, WebSocket (MQTT: PUBACKs)",
                    { $0.wsThroughput?.acceptedPerSecond }, Format.rate,
                    mosquitto: mosquitto?.throughput?.acceptedPerSecond
                )
            )
        }
        if pigeon.contains(where: { $0.wsThroughput?.storedPerSecond != nil }) {
            table.add(
                columns.figure(
                    "stored/s, WebSocket run, first send → all stored", { $0.wsThroughput?.storedPerSecond }, Format.rate, mosquitto: nil
                )
            )
        }
        if pigeon.contains(where: { $0.httpThroughput != nil }) {
            table.add(columns.figure("accepted/s, HTTP", { $0.httpThroughput?.acceptedPerSecond }, Format.rate, mosquitto: nil))
        }
        for rate in settings.rates {
            func run(_ results: PigeonResults) -> LatencyResult? { results.latency.first { $0.rate == rate } }
            let mqttRun = mosquitto?.latency.first { $0.rate == rate }
            guard pigeon.contains(where: { run($0) != nil }) || mqttRun != nil else { continue }
            for (name, percentile) in [("p50", \LatencySummary.p50Ms), ("p99", \LatencySummary.p99Ms)] {
                table.add(
                    columns.figure(
                        "@\(rate)/s send → message.new \(name)", { run($0)?.toReceiver[keyPath: percentile] }, Self.milliseconds,
                        mosquitto: mqttRun?.toReceiver[keyPath: percentile]
                    )
                )
            }
            for (name, percentile) in [("p50", \LatencySummary.p50Ms), ("p99", \LatencySummary.p99Ms)] {
                table.add(
                    columns.figure(
                        "@\(rate)/s send → ✓✓ \(name)", { run($0)?.toDelivered?[keyPath: percentile] }, Self.milliseconds, mosquitto: nil
                    )
                )
            }
        }
        table.add(
            columns.text(
                "RSS at start-up (per node)", { Self.perNode($0.residentBytesAtStartup, Format.mebibytes) },
                mosquitto: mosquitto.map { Format.mebibytes($0.residentBytesIdle) }
            )
        )
        if pigeon.contains(where: { !$0.peakResidentBytes.allSatisfy { $0 == nil } }) || mosquittoPeak != nil {
            table.add(
                columns.text(
                    "RSS peak under load (per node)", { Self.perNode($0.peakResidentBytes, Format.mebibytes) },
                    mosquitto: mosquitto.map { _ in Format.mebibytes(mosquittoPeak) }
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
                    },
                    mosquitto: nil
                )
            )
        }
        let throughputLoads: [(scenario: String, load: (PigeonResults) -> LoadSample?)] = [
            ("ws-throughput", { $0.wsThroughput?.load }), ("http-throughput", { $0.httpThroughput?.load }),
        ]
        for (scenario, load) in throughputLoads {
            guard pigeon.contains(where: { load($0) != nil }) else { continue }
            let mqttLoad = scenario == "ws-throughput" ? mosquitto?.throughput?.load : nil
            table.add(
                columns.text(
                    "CPU cores in \(scenario): server (per node)",
                    { load($0).map { Self.perNode($0.servers.map(\.cores), Format.cores) } ?? "" },
                    mosquitto: mqttLoad.map { Self.perNode($0.servers.map(\.cores), Format.cores) }
                )
            )
            if pigeon.contains(where: { load($0)?.serviceCores.isEmpty == false }) {
                table.add(
                    columns.text(
                        "CPU cores in \(scenario): PostgreSQL / Redis",
                        { results in
                            guard let sample = load(results), !sample.serviceCores.isEmpty else { return "" }
                            return "\(Format.cores(sample.serviceCores["postgres"])) / \(Format.cores(sample.serviceCores["redis"]))"
                        },
                        mosquitto: nil
                    )
                )
            }
            table.add(
                columns.text(
                    "CPU cores in \(scenario): bench", { load($0).map { Format.cores($0.benchCores) } ?? "" },
                    mosquitto: mqttLoad.map { Format.cores($0.benchCores) }
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
        if mosquitto != nil {
            print(
                """
                note: mosquitto's PUBACK means the broker holds the message in memory (its persistence is a periodic \
                snapshot), Pigeon's accept means it is durable on disk. The MQTT runs include delivery to a consuming \
                subscriber per topic; the Pigeon throughput runs have no receiver connected.
                """
            )
        }
        for check in targets {
            print(check.line)
        }
    }

    private var mosquittoPeak: UInt64? {
        guard let mosquitto else { return nil }
        return ([mosquitto.throughput?.load.peakResidentBytes] + mosquitto.latency.map(\.load.peakResidentBytes)).compactMap { $0 }.max()
    }

    private static func milliseconds(_ value: Double?) -> String {
        value.map(Format.milliseconds) ?? "n/a"
    }

    /// Per-node values joined by " + " (they add up to the service's total).
    private static func perNode<Value>(_ values: [Value?], _ format: (Value?) -> String) -> String {
        values.map(format).joined(separator: " + ")
    }
}

/// The columns of the summary table: one per deployment, a ratio to the embedded mode after each other deployment,
/// and mosquitto with the ratio of the reference deployment (the embedded one if it ran) to it.
private struct SummaryColumns {
    let runs: [PigeonResults]
    let mosquitto: MosquittoResults?
    /// The embedded mode's results, which the ratios divide by.
    let baseline: PigeonResults?
    /// The deployment compared with mosquitto.
    let reference: PigeonResults?

    init(runs: [PigeonResults], mosquitto: MosquittoResults?) {
        self.runs = runs
        self.mosquitto = mosquitto
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
        if mosquitto != nil {
            header += ["mosquitto (QoS 1)", "\(reference?.deployment ?? "pigeon") / mosquitto"]
        }
        return header
    }

    /// A row of a number each deployment measured, with ratios.
    func figure(_ metric: String, _ value: (PigeonResults) -> Double?, _ format: (Double?) -> String, mosquitto mqtt: Double?) -> [String] {
        var row = [metric]
        for results in runs {
            row.append(format(value(results)))
            if hasRatio(results) { row.append(Format.ratio(value(results), baseline.flatMap(value))) }
        }
        if mosquitto != nil {
            row += mqtt == nil ? ["", ""] : [format(mqtt), Format.ratio(reference.flatMap(value), mqtt)]
        }
        return row
    }

    /// A row of text without ratios.
    func text(_ metric: String, _ cell: (PigeonResults) -> String, mosquitto mqtt: String?) -> [String] {
        var row = [metric]
        for results in runs {
            row.append(cell(results))
            if hasRatio(results) { row.append("") }
        }
        if mosquitto != nil {
            row += [mqtt ?? "", ""]
        }
        return row
    }
}
