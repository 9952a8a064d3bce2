import Foundation
import PigeonBenchSupport

extension ScaleOutRun {
    /// The run's figures, its nodes' CPU and throttling, and the lock waits seen, most frequent first.
    func printLines() {
        let unconfined = confined ? "" : " — nodes UNCONFINED"
        print("  accepted:  \(Format.rate(acceptedPerSecond)) (\(Format.count(acceptedInWindow)) acks in \(Format.seconds(measuredSeconds)))\(unconfined)")
        print(
            "  stored:    \(Format.rate(storedPerSecond)) (\(Format.count(storedInWindow)) rows committed to "
                + "\(namespace).messages in \(Format.seconds(storedSeconds)) of PostgreSQL's clock)\(unconfined)"
        )
        let growth = acceptedInWindow - storedInWindow
        print(
            "  backlog:   \(growth >= 0 ? "+" : "")\(Format.count(growth)) accepted and not yet stored over the window (acks − rows)"
                + (Double(growth) > 0.1 * Double(max(acceptedInWindow, 1)) ? ": the nodes accept faster than they store" : "")
        )
        if storedByNode.count > 1 {
            print("  by node:   stored \(storedByNode.map { $0.map(Format.count) ?? "n/a" }.joined(separator: " + ")) (each node's pigeon_messages_stored_total)")
        }
        print("  refused:   \(Format.errors(errors)); unanswered: \(Format.count(unanswered))")
        let cores = load.servers.map { Format.cores($0.cores) }.joined(separator: " + ")
        if throttling.isEmpty {
            print("  nodes:     CPU cores \(cores); no cgroup, no CPU limit")
        } else {
            let throttled = throttling.map { Self.percent($0?.throttledFraction) }.joined(separator: " + ")
            print("  nodes:     CPU cores \(cores); throttled in \(throttled) of their 100 ms periods")
        }
        print(
            "  others:    CPU cores: PostgreSQL \(Format.cores(load.serviceCores["postgres"])), Redis \(Format.cores(load.serviceCores["redis"])), "
                + "bench \(Format.cores(load.benchCores))"
        )
        lockWaits.printLines(limit: 6)
        let drainThrottled = drain.throttling.isEmpty ? "" : "; nodes throttled in " + drain.throttling.map { Self.percent($0?.throttledFraction) }.joined(separator: " + ")
        print(
            "  draining:  \(Format.rate(drain.storedPerSecond)) stored with no sends (\(Format.count(drain.stored)) rows in "
                + "\(Format.seconds(drain.seconds))); \(Format.count(max(drain.backlogAtEnd, 0))) still to store after it"
                + (drain.hadBacklogThroughout ? "" : " (the backlog ran out: a lower bound)") + drainThrottled
        )
        if drain.storedByNode.count > 1 {
            print("  by node:   stored \(drain.storedByNode.map { $0.map(Format.count) ?? "n/a" }.joined(separator: " + ")) while draining")
        }
        drain.lockWaits.printLines(limit: 3)
    }

    /// `0.953` as `95 %`; `n/a` for `nil`.
    static func percent(_ fraction: Double?) -> String {
        fraction.map { String(format: "%.0f %%", $0 * 100) } ?? "n/a"
    }
}

extension LockWaitSummary {
    /// The sampling's scale, then the `limit` most frequent waits.
    func printLines(limit: Int) {
        print(
            "  lock waits: \(samples) samples of pg_stat_activity, \(intervalMilliseconds) ms apart; the nodes' backends on average: "
                + String(
                    format: "%.1f busy, of which %.1f idle in a transaction (waiting for their node) and %.1f waiting for a lock",
                    meanBusyBackends, meanIdleInTransactionBackends, meanWaitingBackends
                )
                + (otherClientsWaits > 0 ? "; other clients' lock waits (not the nodes'): \(Format.count(otherClientsWaits))" : "")
        )
        Self.printWaits(waits, limit: limit, indent: "    ")
    }

    /// One line per wait: backend-samples, `type:event`, and the statement.
    static func printWaits(_ waits: [Wait], limit: Int, indent: String) {
        guard !waits.isEmpty else {
            print(indent + "(none)")
            return
        }
        let shown = waits.prefix(limit)
        let countWidth = shown.map { Format.count($0.count).count }.max() ?? 0
        let eventWidth = shown.map { "\($0.waitEventType):\($0.waitEvent)".count }.max() ?? 0
        for wait in shown {
            let count = Format.count(wait.count)
            let event = "\(wait.waitEventType):\(wait.waitEvent)"
            print(
                indent + String(repeating: " ", count: countWidth - count.count) + count + "  "
                    + event + String(repeating: " ", count: eventWidth - event.count) + "  " + wait.query
            )
        }
        if waits.count > limit {
            print(indent + "(\(waits.count - limit) more, \(Format.count(waits.dropFirst(limit).reduce(0) { $0 + $1.count })) backend-samples)")
        }
    }
}

extension ScaleOutResults {
    /// The table of medians and rounds per node count, the targets, and the lock waits per node count.
    func printSummary(connections: Int, window: Int, durationSeconds: Int) {
        let base = baseNodes.map { "× \($0) node\($0 == 1 ? "" : "s")" } ?? "×"
        print(
            "\n== scale-out summary: \(connections) WebSockets × \(window) in flight, \(durationSeconds) s windows, \(settings.rounds) rounds, "
                + (confinement.map { "each node confined to \(Format.cores(settings.nodeCores)) core (\($0))" } ?? "nodes UNCONFINED")
                + " =="
        )
        var medians = Table(header: [
            "nodes", "accepted/s", base, "stored/s while sending", base, "stored/s while draining", base, "stored/s sustained", base,
            "CPU cores per node", "PostgreSQL / Redis / bench",
        ])
        var byRound = Table(header: [
            "nodes", "accepted/s by round", base, "stored/s while sending", base, "stored/s while draining", base, "stored/s sustained", base,
        ])
        func list(_ values: [Double?]) -> String {
            values.map { $0.map { Format.count(Int($0.rounded())) } ?? "n/a" }.joined(separator: " / ")
        }
        func ratios(_ values: [Double?]) -> String { values.map { Format.ratio($0, 1) }.joined(separator: " / ") }
        for figure in figures {
            let runs = runs.filter { $0.nodes == figure.nodes }
            let nodeCores = median(runs.compactMap { run in run.load.serverCores.map { $0 / Double(run.nodes) } })
            let services = [
                median(runs.compactMap { $0.load.serviceCores["postgres"] }), median(runs.compactMap { $0.load.serviceCores["redis"] }),
                median(runs.compactMap(\.load.benchCores)),
            ]
            medians.add([
                "\(figure.nodes)",
                Format.rate(figure.medianAcceptedPerSecond),
                Format.ratio(figure.acceptedRatio, 1),
                Format.rate(figure.medianStoredPerSecond),
                Format.ratio(figure.storedRatio, 1),
                Format.rate(figure.medianDrainStoredPerSecond),
                Format.ratio(figure.drainStoredRatio, 1),
                Format.rate(figure.medianSustainedStoredPerSecond),
                Format.ratio(figure.sustainedStoredRatio, 1),
                Format.cores(nodeCores),
                services.map(Format.cores).joined(separator: " / "),
            ])
            let drainRatios = runs.map { run in
                Format.ratio(run.drain.storedPerSecond, self.runs.first { $0.round == run.round && $0.nodes == baseNodes }?.drain.storedPerSecond)
            }
            byRound.add([
                "\(figure.nodes)",
                list(figure.acceptedPerSecond),
                ratios(figure.acceptedRatioByRound),
                list(figure.storedPerSecond),
                ratios(figure.storedRatioByRound),
                list(figure.drainStoredPerSecond),
                drainRatios.joined(separator: " / "),
                list(figure.sustainedStoredPerSecond),
                runs.map { run in
                    Format.ratio(
                        run.sustainedStoredPerSecond,
                        self.runs.first { $0.round == run.round && $0.nodes == baseNodes }?.sustainedStoredPerSecond)
                }.joined(separator: " / "),
            ])
        }
        print("medians over the rounds:")
        medians.print()
        print("each round (\(base): against the same round's figure):")
        byRound.print()
        print(
            """
            accepted/s: acks received in the sending window. stored/s: \(storedMeasure); while sending, and in the \
            \(settings.drainSeconds) s drain window after it, when the nodes only store the backlog; sustained: from the sending \
            window's start until every accepted message was stored (polled every 100 ms), the rate at which the deployment \
            turned the offered load into stored messages whether or not it kept up while sending. CPU: medians over the \
            sending windows.
            """
        )
        let growing = runs.filter { $0.acceptedInWindow - $0.storedInWindow > $0.acceptedInWindow / 10 }
        if !growing.isEmpty {
            print(
                """
                note: in \(growing.count) of \(runs.count) sending windows the nodes accepted more than 10 % faster than they \
                stored, so stored/s while sending is what each node's processor got beside accepting (with fewer nodes each \
                accepts for more connections and stores less), not what the nodes can store; the sustained figure counts the \
                backlog too.
                """
            )
        }
        if let unconfinedReason {
            print("WARNING: the nodes ran UNCONFINED (\(unconfinedReason)); the ratios do not show scale-out")
        }
        for target in targets {
            let verdict = target.met.map { $0 ? "PASS" : "FAIL" } ?? "not checked (\(target.notCheckedBecause ?? "no figures"))"
            print(
                "target stored/s at \(target.nodes) nodes ≥ \(String(format: "%.1f", target.requiredRatio))× one node's (sustained): "
                    + "\(verdict) — \(Format.ratio(target.ratio, 1))×"
            )
        }
        for (phase, summary) in [("sending", \ScaleOutRun.lockWaits), ("draining", \ScaleOutRun.drain.lockWaits)] {
            for nodes in settings.nodeCounts {
                let summaries = runs.filter { $0.nodes == nodes }.map { $0[keyPath: summary] }
                func mean(_ value: KeyPath<LockWaitSummary, Double>) -> Double {
                    summaries.isEmpty ? 0 : summaries.map { $0[keyPath: value] }.reduce(0, +) / Double(summaries.count)
                }
                print(
                    "lock waits while \(phase), \(nodes) node\(nodes == 1 ? "" : "s") (\(summaries.reduce(0) { $0 + $1.samples }) samples "
                        + "over the rounds; the nodes' backends on average: "
                        + String(
                            format: "%.1f busy, %.1f idle in a transaction, %.1f waiting for a lock",
                            mean(\.meanBusyBackends), mean(\.meanIdleInTransactionBackends), mean(\.meanWaitingBackends)
                        ) + "):"
                )
                LockWaitSummary.printWaits(LockWaitSummary.combinedWaits(summaries), limit: 5, indent: "  ")
            }
        }
    }
}
