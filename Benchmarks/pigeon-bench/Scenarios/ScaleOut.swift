import AsyncHTTPClient
import Foundation
import PigeonBenchSupport

/// The scale-out scenario: how accepted/s and stored/s grow with the number of nodes when every node gets the same
/// small CPU share, as if each ran on a machine of its own and PostgreSQL, Redis and the load generator were not the
/// limit.
///
/// For each node count of each round, interleaved (1, 2, 4, 1, 2, 4, …, so that the machine's drift hits every count
/// alike), it spawns that many nodes in a fresh namespace (PostgreSQL schema and Redis key prefix) on one PostgreSQL
/// and one Redis, moves each node into a cgroup of its own limited to ``ScaleOutSettings/nodeCores`` right after it
/// starts, and runs the pipelined WebSocket load of ws-throughput with the sender connections spread over the nodes
/// in turn. Over the measured window it counts acks, counts the rows committed to the namespace's `messages` table,
/// samples PostgreSQL's lock waits, and reads the nodes' CPU use and throttling. The nodes accept faster than they
/// store, so a backlog builds up; once sending has stopped, a drain window of ``ScaleOutSettings/drainSeconds``
/// measures the same while the nodes do nothing but store it: their storing capacity, without the accept path
/// taking its share of their CPU. Then it lifts the limits, stops the nodes, and removes the cgroups, the schema and
/// the Redis keys, also after a failure. Without a usable cgroup cpu controller the nodes run unconfined, and the
/// output and the results say so on every figure.
struct ScaleOut: Sendable {
    let settings: BenchSettings
    let scaleOut: ScaleOutSettings
    let production: ProductionServices
    /// PostgreSQL's and Redis's processes, for their CPU figures.
    let services: [ObservedService]
    let serverBinary: String
    /// Extra pigeon-server options (--server-arg).
    let serverArguments: [String]
    let workDirectory: String
    let http: HTTPClient

    /// Runs every round and returns the figures.
    func run() async throws -> ScaleOutResults {
        let controller: CgroupCPUController?
        var results = ScaleOutResults(settings: scaleOut)
        switch await CgroupCPUController.locate() {
        case .success(let found):
            controller = found
            results.confined = true
            results.confinement = "\(found.version.rawValue) at \(found.mountPoint)"
        case .failure(let unavailable):
            controller = nil
            results.unconfinedReason = unavailable.reason
        }
        print(
            "\n######## scale-out: nodes \(scaleOut.nodeCounts.map(String.init).joined(separator: ", ")) × \(scaleOut.rounds) rounds, "
                + "\(settings.connections) WebSockets × \(settings.window) sends in flight spread over the nodes, "
                + "\(settings.warmupSeconds) s warm-up + \(settings.durationSeconds) s + \(scaleOut.drainSeconds) s drain per run"
        )
        if let controller {
            print("each node confined to \(Format.cores(scaleOut.nodeCores)) core through a cgroup of its own (\(controller.version.rawValue), \(controller.mountPoint))")
        } else {
            print("WARNING: the nodes run UNCONFINED (no CPU limit), so these are not scale-out figures: \(results.unconfinedReason ?? "")")
        }
        for round in 1...scaleOut.rounds {
            for nodes in scaleOut.nodeCounts {
                print("\n== scale-out round \(round) of \(scaleOut.rounds): \(nodes) node\(nodes == 1 ? "" : "s") ==")
                results.runs.append(try await measure(nodes: nodes, round: round, controller: controller))
            }
        }
        results.summarise()
        return results
    }

    /// One run: `nodes` fresh nodes in a fresh namespace, each in its own cgroup when there is a `controller`; prints
    /// its figures before the nodes stop.
    private func measure(nodes: Int, round: Int, controller: CgroupCPUController?) async throws -> ScaleOutRun {
        let namespace = ProductionServices.makeNamespace()
        var groups: [CPUCgroup] = []
        let outcome: Result<ScaleOutRun, any Error>
        do {
            if let controller {
                for node in 1...nodes {
                    groups.append(try controller.makeGroup(name: "pigeon-bench-\(namespace)-node\(node)", cores: scaleOut.nodeCores))
                }
            }
            let confining = groups
            outcome = .success(
                try await PigeonDeployment.withSpawned(
                    label: "scale-out-r\(round)-n\(nodes)",
                    nodes: nodes,
                    binary: serverBinary,
                    arguments: production.serverArguments(namespace: namespace) + serverArguments,
                    workDirectory: workDirectory,
                    http: http,
                    services: services,
                    // Start-up (migrations included) runs inside the CPU share.
                    startupTimeout: .seconds(120),
                    prepare: { node, pid in
                        if !confining.isEmpty { try confining[node].add(pid) }
                    }
                ) { deployment in
                    let run = try await measureWindow(on: deployment, groups: confining, namespace: namespace, round: round)
                    run.printLines()
                    // Stopping is not measured: without the limit the nodes stop at their own pace.
                    for group in confining { try group.lift() }
                    return run
                }
            )
        } catch {
            outcome = .failure(error)
        }
        for group in groups {
            if let leftover = await group.remove(within: .seconds(5)) { print("warning: could not remove \(leftover)") }
        }
        let leftovers = await production.removeNamespace(namespace)
        if leftovers.isEmpty {
            print("removed \(groups.isEmpty ? "" : "the cgroups, ")the PostgreSQL schema and the Redis keys of \(namespace)")
        } else {
            for leftover in leftovers { print("warning: could not remove \(leftover)") }
        }
        return try outcome.get()
    }

    /// The load and the measurements of one window on a running deployment.
    private func measureWindow(on deployment: PigeonDeployment, groups: [CPUCgroup], namespace: String, round: Int) async throws -> ScaleOutRun {
        let namePrefix = "bench-" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let pairs = try await deployment.setupAPI.makePairs(count: settings.connections, prefix: namePrefix)
        for (group, node) in zip(groups, deployment.nodes) {
            guard let pid = node.pid, group.containsAllThreads(of: pid) else {
                throw BenchError.commandFailed("a thread of \(node.baseURL) (pid \(node.pid.map { "\($0)" } ?? "?")) is not in \(group.path)")
            }
        }
        let window = MeasurementWindow(warmup: settings.warmup, duration: settings.duration)
        let tally = ThroughputTally(window: window)
        let sender = PigeonThroughput.pipelinedWebSocketSender(depth: settings.window, body: settings.messageBody)
        async let lockSamples = PostgresWaitSampler(postgresURL: production.postgresURL).sample(window: window)
        async let atStart = readEdge(at: window.start, deployment: deployment, groups: groups, namespace: namespace)
        async let atEnd = readEdge(at: window.end, deployment: deployment, groups: groups, namespace: namespace)
        let (answers, load) = try await LoadMonitor.measure(servers: deployment.pids, services: deployment.services, window: window) {
            try await runSenders(count: pairs.count, window: window, answerTimeout: settings.drainTimeout) { index in
                try await sender(pairs[index], deployment.api(deployment.node(forConnection: index)), window, tally)
            }
        }
        let start = try await atStart
        let end = try await atEnd
        let samples = try await lockSamples
        // Sending has stopped and the senders have their answers (or gave up waiting): the nodes only store the backlog now.
        let acceptedTotal = answers.reduce(0) { $0 + $1.accepted }
        async let allStored = Self.waitUntilStored(acceptedTotal, postgresURL: production.postgresURL, namespace: namespace)
        let drainWindow = MeasurementWindow(warmup: .milliseconds(200), duration: .seconds(scaleOut.drainSeconds))
        async let drainSamples = PostgresWaitSampler(postgresURL: production.postgresURL).sample(window: drainWindow)
        async let atDrainStart = readEdge(at: drainWindow.start, deployment: deployment, groups: groups, namespace: namespace)
        async let atDrainEnd = readEdge(at: drainWindow.end, deployment: deployment, groups: groups, namespace: namespace)
        let drainStart = try await atDrainStart
        let drainEnd = try await atDrainEnd
        let drain = ScaleOutRun.Drain(
            seconds: drainEnd.stored.at - drainStart.stored.at,
            stored: drainEnd.stored.messages - drainStart.stored.messages,
            storedPerSecond: drainEnd.stored.rate(since: drainStart.stored),
            backlogAtEnd: acceptedTotal - drainEnd.stored.messages,
            storedByNode: Self.storedByNode(from: drainStart, to: drainEnd),
            throttling: Self.throttling(from: drainStart, to: drainEnd),
            lockWaits: LockWaitSummary(
                samples: try await drainSamples,
                nodePorts: drainStart.postgresPorts.union(drainEnd.postgresPorts)
            )
        )
        // Sustained: from the window's start until every accepted message is stored (the first count that saw it,
        // within one 100 ms poll of the moment it happened).
        var sustained: Double?
        var allStoredAfter: Double?
        if let done = try await allStored {
            sustained = done.rate(since: start.stored)
            allStoredAfter = max(0, done.at - end.stored.at)
        }
        return ScaleOutRun(
            round: round,
            nodes: deployment.nodes.count,
            namespace: namespace,
            confined: !groups.isEmpty,
            measuredSeconds: window.seconds,
            acceptedInWindow: tally.acceptedInWindow,
            acceptedPerSecond: tally.acceptedPerSecond,
            storedInWindow: end.stored.messages - start.stored.messages,
            storedSeconds: end.stored.at - start.stored.at,
            storedPerSecond: end.stored.rate(since: start.stored),
            storedByNode: Self.storedByNode(from: start, to: end),
            acceptedTotal: acceptedTotal,
            errors: tally.errors,
            unanswered: answers.reduce(0) { $0 + $1.unanswered },
            load: load,
            throttling: Self.throttling(from: start, to: end),
            lockWaits: LockWaitSummary(samples: samples, nodePorts: start.postgresPorts.union(end.postgresPorts)),
            drain: drain,
            sustainedStoredPerSecond: sustained,
            allStoredAfterSeconds: allStoredAfter
        )
    }

    /// Polls the namespace's stored count every 100 ms until it reaches `total` (up to 120 s): the first count that
    /// did, or `nil`.
    private static func waitUntilStored(_ total: Int, postgresURL: String, namespace: String) async throws -> StoredMessageCount? {
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            let count = try await StoredMessageCount.read(postgresURL: postgresURL, namespace: namespace)
            if count.messages >= total { return count }
            try await Task.sleep(for: .milliseconds(100))
        }
        return nil
    }

    /// What each node's processor stored between two edges, by its own counter.
    private static func storedByNode(from start: WindowEdge, to end: WindowEdge) -> [Int?] {
        zip(start.nodeStored, end.nodeStored).map { before, after in
            guard let before, let after else { return nil }
            return after - before
        }
    }

    /// Each node's cgroup counters between two edges.
    private static func throttling(from start: WindowEdge, to end: WindowEdge) -> [CPUThrottling?] {
        zip(start.throttling, end.throttling).map { before, after in
            guard let before, let after else { return nil }
            return after.since(before)
        }
    }

    /// What is read at one edge of the window.
    private struct WindowEdge: Sendable {
        var throttling: [CPUThrottling?]
        /// The client ports of the nodes' PostgreSQL connections, to tell their backends from other clients'.
        var postgresPorts: Set<Int>
        /// Each node's `pigeon_messages_stored_total`.
        var nodeStored: [Int?]
        var stored: StoredMessageCount
    }

    /// Waits until `instant`, then reads the cgroups' counters and the nodes' PostgreSQL ports (both at once), the
    /// nodes' stored counters (an HTTP request each) and counts the stored messages (a `psql` start later; the count
    /// carries its own time).
    private func readEdge(
        at instant: ContinuousClock.Instant,
        deployment: PigeonDeployment,
        groups: [CPUCgroup],
        namespace: String
    ) async throws -> WindowEdge {
        try await Task.sleep(until: instant)
        let throttling = groups.map { $0.throttling() }
        var ports: Set<Int> = []
        for pid in deployment.pids.compactMap({ $0 }) {
            ports.formUnion(TCPConnections.localPorts(of: pid, remotePort: production.postgresPort))
        }
        var nodeStored: [Int?] = []
        for node in deployment.nodes {
            nodeStored.append(await deployment.api(node).storedTotal())
        }
        let stored = try await StoredMessageCount.read(postgresURL: production.postgresURL, namespace: namespace)
        return WindowEdge(throttling: throttling, postgresPorts: ports, nodeStored: nodeStored, stored: stored)
    }
}

/// The scale-out scenario's own options.
struct ScaleOutSettings: Codable, Sendable {
    /// The node counts, in the order each round runs them.
    var nodeCounts: [Int]
    /// The CPU share of each node, in cores.
    var nodeCores: Double
    var rounds: Int
    /// The length of the drain window after the sending one, in seconds.
    var drainSeconds = 5
}
