import ArgumentParser
import AsyncHTTPClient
import Foundation
import PigeonBenchSupport

/// `pigeon-bench`: the load generator that measures a Pigeon server's accepted messages per second, send → ✓✓
/// latency and memory per open stream against its performance targets (docs/ARCHITECTURE.md, section "Targets"; the
/// ones it checks itself are stated in ``ProductionTarget`` and ``ScaleOutTarget``), with mosquitto, NATS JetStream
/// and Redis Streams (fsynced) under the same load shapes as reference points.
@main
struct PigeonBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pigeon-bench",
        abstract: "Measure a Pigeon server's throughput, latency and memory, with mosquitto, NATS JetStream and Redis Streams as baselines.",
        discussion: """
            By default it spawns the server binary on a fresh data directory and a free loopback port, waits for \
            GET /readyz, runs the scenarios and stops the server with SIGTERM. With --url it measures a server that \
            is already running (add --server-pid for its memory and CPU). It only connects to 127.0.0.1.

            Backends (--backends), each on freshly spawned servers in turn: embedded (the default), production (one \
            node on PostgreSQL + Redis: --store and --buffer URLs with a fresh schema and key prefix, dropped and \
            deleted afterwards) and production-2 (two nodes on one schema and prefix; connections alternate between \
            the nodes, and each latency receiver is on the other node than its sender). The summary gives every \
            figure per backend with its ratio to the embedded one, and checks the production targets.

            Scenarios, in the order `all` runs them: idle-streams (memory per open WebSocket stream), ws-throughput \
            (pipelined WebSocket sends), http-throughput (POST …/messages on keep-alive connections), latency (paced \
            sends: send → message.new and send → ✓✓), mosquitto (the throughput and latency shapes over MQTT QoS 1), \
            nats (the same shapes over NATS JetStream: a file-stored stream, PubAcks, durable push consumers with \
            explicit acks), redis (the same shapes over Redis Streams on a redis-server the run starts with \
            --appendonly yes --appendfsync always, so that an XADD is answered once it is fsynced as a Pigeon accept \
            is: pipelined XADDs, a consumer group per stream read with XREADGROUP, an XACK per entry; \
            apt-get install -y redis-server, or --redis-binary). In the throughput runs of these scenarios each \
            sender's receiver consumes and acknowledges what it gets (Pigeon: delivered receipts; \
            --no-throughput-receivers leaves Pigeon's receivers out), and the run checks that the receivers got every \
            accepted message. For every system the summary gives the server's CPU time and context switches (summed \
            over its threads from /proc) per message, at saturation (the throughput run: per message accepted in the \
            window) and paced (the latency run: per message sent in the window).

            scale-out (not in `all`) spawns its own production nodes: for each count of --nodes in each of --rounds \
            (interleaved: 1,2,4,1,2,4,…) that many nodes in a fresh schema and key prefix, each confined to \
            --node-cpu cores by a cgroup of its own (cgroup v2 cpu.max or v1 cpu.cfs_quota_us; needs root), with the \
            ws-throughput load spread over them; it reports accepted/s, stored/s (rows committed to the messages \
            table in the window, and in a 5 s drain window after the sends, when the nodes only store their \
            backlog), their ratios to one node, and PostgreSQL's lock waits (pg_stat_activity every 100 ms). \
            Without a writable cgroup cpu controller the nodes run unconfined and every figure says so.
            """
    )

    @Option(help: "Comma-separated scenarios to run.")
    var scenario = ScenarioList([.all])

    @Option(help: "Comma-separated server backends to measure: embedded, production, production-2 (default: embedded).")
    var backends: BackendList?

    @Option(name: .customLong("postgres-url"), help: "PostgreSQL of the production backends (default: $PIGEON_POSTGRES_URL).")
    var postgresURL: String?

    @Option(name: .customLong("redis-url"), help: "Redis of the production backends (default: $PIGEON_REDIS_URL).")
    var redisURL: String?

    @Option(help: "The pigeon-server executable to spawn.")
    var serverBinary = ".build/release/pigeon-server"

    @Option(name: .customLong("server-arg"), parsing: .unconditionalSingleValue, help: "An argument for the spawned pigeon-server (repeatable), e.g. --server-arg=--no-fsync.")
    var serverArguments: [String] = []

    @Option(help: "Measure the server already running at this loopback URL instead (e.g. http://127.0.0.1:8080).")
    var url: String?

    @Option(help: "With --url: the server's process id, for its memory and CPU figures.")
    var serverPid: Int32?

    @Option(help: "Sender connections (each with its own conversation, or MQTT topic).")
    var connections = 16

    @Option(help: "Sends in flight per WebSocket or MQTT connection in the throughput runs.")
    var window = 64

    @Option(help: "Measured seconds per run.")
    var duration = 10

    @Option(help: "Warm-up seconds before each measured window.")
    var warmup = 2

    @Option(help: "Total paced send rate of the latency runs, messages/s.")
    var rate = 1000

    @Option(help: "Several latency rates, comma-separated (e.g. 1000,2000); replaces --rate.")
    var rates: RateList?

    @Option(help: "Idle streams to open.")
    var streams = 10_000

    @Option(help: "Devices the idle streams are spread over (the server keeps at most 8 open streams per device by default, so at least streams ÷ 8).")
    var streamDevices = 2_000

    @Option(help: "Idle streams being opened at the same time.")
    var openConcurrency = 200

    @Option(help: "Message body (and MQTT payload) size in bytes.")
    var bodySize = 100

    @Option(help: "Seconds a latency run waits for late messages and receipts.")
    var grace = 5

    @Option(help: "Seconds a throughput run waits for outstanding answers, then for every accepted message to be stored.")
    var drainTimeout = 60

    @Option(help: "The mosquitto executable (default: mosquitto on PATH or in /usr/sbin).")
    var mosquittoBinary: String?

    @Option(help: "The nats-server executable (default: nats-server on PATH or in /usr/sbin).")
    var natsBinary: String?

    @Option(help: "The redis-server executable of the redis scenario (default: redis-server on PATH or in /usr/bin).")
    var redisBinary: String?

    @Flag(
        inversion: .prefixedNo,
        help: "Whether each conversation of the Pigeon throughput runs has its receiver consuming its stream and sending delivered receipts."
    )
    var throughputReceivers = true

    @Option(help: "Milliseconds a throughput receiver gathers message.new events before one delivered receipt (0: a receipt per event).")
    var receiptDelay = 50

    @Option(help: "scale-out: comma-separated node counts, each run in every round.")
    var nodes = NodeCountList([1, 2, 4])

    @Option(name: .customLong("node-cpu"), help: "scale-out: the CPU share of each node, in cores (a cgroup limit).")
    var nodeCPU = 0.1

    @Option(help: "scale-out: rounds; each runs every node count once, and the summary gives the medians.")
    var rounds = 3

    @Option(name: .customLong("offline-push-members"), help: "Members per conversation that never connect and have a push registration: every message owes each a push (0: none).")
    var offlinePushMembers = 0

    @Flag(name: .customLong("hanging-push-gateway"), help: "Point the spawned servers at a push gateway that never answers (with --offline-push-members: what a dead gateway costs accept and delivery).")
    var hangingPushGateway = false

    @Flag(name: .customLong("webhook-receiver"), help: "Point the spawned servers at a webhook endpoint on loopback that answers at once, every event type on (what recording and sending webhook events costs accept and delivery).")
    var webhookReceiver = false

    @Flag(name: .customLong("allowing-hook"), help: "Give the spawned servers a before-send hook that allows every message at once (run with and without: what asking the app's backend costs a send).")
    var allowingHook = false

    @Option(help: "Also write the results as JSON to this file.")
    var json: String?

    func validate() throws {
        for (name, value, minimum) in [
            ("connections", connections, 1), ("window", window, 1), ("duration", duration, 1), ("warmup", warmup, 1),
            ("rate", rate, 1), ("streams", streams, 0), ("stream-devices", streamDevices, 1), ("open-concurrency", openConcurrency, 1),
            ("body-size", bodySize, 0), ("offline-push-members", offlinePushMembers, 0), ("grace", grace, 0), ("drain-timeout", drainTimeout, 1), ("rounds", rounds, 1),
            ("receipt-delay", receiptDelay, 0),
        ] where value < minimum {
            throw ValidationError("--\(name) must be at least \(minimum)")
        }
        guard bodySize <= 65_536 else { throw ValidationError("--body-size must be at most 65536 (the server's default limit)") }
        guard nodeCPU >= 0.01, nodeCPU <= 64 else { throw ValidationError("--node-cpu must be between 0.01 and 64 cores") }
        guard rounds <= 20 else { throw ValidationError("--rounds must be at most 20") }
        if let url {
            guard let components = URLComponents(string: url), components.scheme == "http",
                components.host == "127.0.0.1", components.port != nil,
                components.path.isEmpty || components.path == "/"
            else {
                throw ValidationError("--url must be a loopback base URL such as http://127.0.0.1:8080")
            }
            if backends != nil { throw ValidationError("--backends spawns servers; it does not go with --url") }
            if scenario.selected.contains(.scaleOut) { throw ValidationError("scale-out spawns its own nodes; it does not go with --url") }
        } else if serverPid != nil {
            throw ValidationError("--server-pid goes with --url")
        }
    }

    /// `--server-arg`s, and the hanging push gateway's, the webhook receiver's and the allowing hook's when asked for.
    private func spawnedServerArguments() throws -> [String] {
        serverArguments + (hangingPushGateway ? try HangingPushGateway.shared.get().serverArguments : [])
            + (webhookReceiver ? try InstantWebhookReceiver.shared.get().serverArguments : [])
            + (allowingHook ? try AllowingHook.shared.get().serverArguments : [])
    }

    private var settings: BenchSettings {
        BenchSettings(
            connections: connections,
            window: window,
            warmupSeconds: warmup,
            durationSeconds: duration,
            rates: rates?.rates ?? [rate],
            streams: streams,
            streamDevices: streamDevices,
            openConcurrency: openConcurrency,
            bodySize: bodySize,
            graceSeconds: grace,
            drainTimeoutSeconds: drainTimeout,
            throughputReceivers: throughputReceivers,
            receiptDelayMilliseconds: receiptDelay,
            offlinePushMembers: offlinePushMembers
        )
    }

    func run() async throws {
        let openFileLimit = try ProcessStats.raiseOpenFileLimit()
        let settings = settings
        let scenarios = scenario.selected
        if url == nil, scenarios.contains(where: \.needsPigeonServer), !FileManager.default.isExecutableFile(atPath: serverBinary) {
            throw BenchError.missingExecutable(
                "no pigeon-server at \(serverBinary): "
                    + "build it with `swift build -c release --product pigeon-server` or pass --server-binary"
            )
        }
        let mosquitto = try scenarios.contains(.mosquitto) ? locateMosquitto() : nil
        let nats = try scenarios.contains(.nats) ? locateNATSServer() : nil
        let redis = try scenarios.contains(.redis) ? locateRedisServer() : nil
        let backends = backends?.backends ?? [.embedded]
        let runsOnBackends = scenarios.contains(where: \.runsOnBackends)
        let production =
            try url == nil && (backends.contains(where: \.isProduction) && runsOnBackends || scenarios.contains(.scaleOut))
            ? ProductionServices(postgresURL: postgresURL, redisURL: redisURL, environment: ProcessInfo.processInfo.environment)
            : nil
        print(
            "pigeon-bench: \(scenarios.map(\.rawValue).joined(separator: ", ")); \(connections) connections, window \(window), "
                + "\(bodySize)-byte bodies, \(warmup) s warm-up + \(duration) s per run; open-file limit \(openFileLimit)"
        )
        if url == nil, runsOnBackends {
            print("backends: \(backends.map(\.rawValue).joined(separator: ", "))")
        }

        let workDirectory = try LocalEnvironment.makeTemporaryDirectory(prefix: "pigeon-bench")
        var httpConfiguration = HTTPClient.Configuration()
        httpConfiguration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(connections, 8))
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration)
        var report = BenchReport(settings: settings)
        do {
            let services = await production?.observedProcesses() ?? []
            if runsOnBackends {
                if let url {
                    report.pigeon.append(try await measureGivenServer(url: url, scenarios: scenarios, http: http, settings: settings))
                } else {
                    for backend in backends {
                        report.pigeon.append(
                            try await measure(
                                backend, scenarios: scenarios, production: production, services: services, http: http,
                                workDirectory: workDirectory, settings: settings
                            )
                        )
                    }
                }
            }
            if scenarios.contains(.scaleOut), let production {
                report.scaleOut = try await ScaleOut(
                    settings: settings,
                    scaleOut: ScaleOutSettings(nodeCounts: nodes.counts, nodeCores: nodeCPU, rounds: rounds),
                    production: production,
                    services: services,
                    serverBinary: serverBinary,
                    serverArguments: try spawnedServerArguments(),
                    workDirectory: workDirectory,
                    http: http
                )
                .run()
            }
            if let mosquitto {
                report.mosquitto = try await runBroker(MosquittoBroker.self, binary: mosquitto, workDirectory: workDirectory, settings: settings)
            }
            if let nats {
                report.nats = try await runBroker(NATSBroker.self, binary: nats, workDirectory: workDirectory, settings: settings)
            }
            if let redis {
                report.redis = try await runBroker(RedisStreamsBroker.self, binary: redis, workDirectory: workDirectory, settings: settings)
            }
        } catch {
            try? await http.shutdown()
            print("logs kept in \(workDirectory)")
            throw error
        }
        try await http.shutdown()
        try? FileManager.default.removeItem(atPath: workDirectory)

        report.targets = ProductionTarget.allCases.compactMap { $0.check(report.pigeon) }
        if !report.pigeon.isEmpty || report.mosquitto != nil || report.nats != nil || report.redis != nil {
            report.printSummary()
        }
        report.scaleOut?.printSummary(connections: connections, window: window, durationSeconds: duration)
        if let json {
            try report.writeJSON(to: json)
            print("results written to \(json)")
        }
    }

    private func locateMosquitto() throws -> String {
        if let mosquittoBinary {
            guard FileManager.default.isExecutableFile(atPath: mosquittoBinary) else {
                throw BenchError.missingExecutable("--mosquitto-binary \(mosquittoBinary) is not an executable file")
            }
            return mosquittoBinary
        }
        guard let path = LocalEnvironment.findExecutable("mosquitto") else {
            throw BenchError.missingExecutable(
                "mosquitto not found: install it (apt-get install -y mosquitto, as scripts/bench.sh does) or pass --mosquitto-binary"
            )
        }
        return path
    }

    private func locateNATSServer() throws -> String {
        if let natsBinary {
            guard FileManager.default.isExecutableFile(atPath: natsBinary) else {
                throw BenchError.missingExecutable("--nats-binary \(natsBinary) is not an executable file")
            }
            return natsBinary
        }
        guard let path = LocalEnvironment.findExecutable("nats-server") else {
            throw BenchError.missingExecutable(
                "nats-server not found: install it (apt-get install -y nats-server, as scripts/bench.sh does) or pass --nats-binary"
            )
        }
        return path
    }

    /// `--redis-binary`, else redis-server on PATH, in the system directories or in /usr/bin (where Debian puts it).
    private func locateRedisServer() throws -> String {
        if let redisBinary {
            guard FileManager.default.isExecutableFile(atPath: redisBinary) else {
                throw BenchError.missingExecutable("--redis-binary \(redisBinary) is not an executable file")
            }
            return redisBinary
        }
        if let path = LocalEnvironment.findExecutable("redis-server") { return path }
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/redis-server") { return "/usr/bin/redis-server" }
        throw BenchError.missingExecutable(
            "redis-server not found: install it (apt-get install -y redis-server, as scripts/bench.sh does) or pass --redis-binary"
        )
    }

    /// Spawns `backend`'s nodes (for a production backend in a fresh namespace, removed afterwards), and runs the
    /// Pigeon scenarios against them.
    private func measure(
        _ backend: Backend,
        scenarios: [Scenario],
        production: ProductionServices?,
        services: [ObservedService],
        http: HTTPClient,
        workDirectory: String,
        settings: BenchSettings
    ) async throws -> PigeonResults {
        var arguments: [String] = []
        var namespace: String?
        if backend.isProduction, let production {
            let name = ProductionServices.makeNamespace()
            namespace = name
            arguments = production.serverArguments(namespace: name)
        }
        print("\n######## \(backend.rawValue): \(backend.summary)")
        if namespace != nil { print("server options: \(arguments.joined(separator: " "))") }
        let outcome: Result<PigeonResults, any Error>
        do {
            outcome = .success(
                try await PigeonDeployment.withSpawned(
                    label: backend.rawValue,
                    nodes: backend.nodes,
                    binary: serverBinary,
                    arguments: arguments + (try spawnedServerArguments()),
                    workDirectory: workDirectory,
                    http: http,
                    services: backend.isProduction ? services : [],
                    startupTimeout: .seconds(60)
                ) { deployment in
                    try await runPigeon(scenarios, on: deployment, settings: settings)
                }
            )
        } catch {
            outcome = .failure(error)
        }
        if let namespace, let production {
            let leftovers = await production.removeNamespace(namespace)
            if leftovers.isEmpty {
                print("removed the PostgreSQL schema and the Redis keys of \(namespace)")
            } else {
                for leftover in leftovers { print("warning: could not remove \(leftover)") }
            }
        }
        return try outcome.get()
    }

    /// Runs the Pigeon scenarios against the server at `url`.
    private func measureGivenServer(url: String, scenarios: [Scenario], http: HTTPClient, settings: BenchSettings) async throws -> PigeonResults {
        let server = PigeonServer(baseURL: url.hasSuffix("/") ? String(url.dropLast()) : url, pid: serverPid)
        try await server.waitUntilReady(http: http, timeout: .seconds(10))
        let deployment = PigeonDeployment(label: PigeonDeployment.givenServerLabel, nodes: [server], http: http, services: [])
        return try await runPigeon(scenarios, on: deployment, settings: settings)
    }

    private func runPigeon(_ scenarios: [Scenario], on deployment: PigeonDeployment, settings: BenchSettings) async throws -> PigeonResults {
        // User ids unique to this run, so that runs against one long-lived server do not collide.
        let namePrefix = "bench-" + String(UInt32.random(in: 0...UInt32.max), radix: 36)
        var results = PigeonResults(
            deployment: deployment.label,
            residentBytesAtStartup: deployment.nodes.map { $0.pid.flatMap(ProcessStats.residentBytes) }
        )
        for (index, node) in deployment.nodes.enumerated() {
            print(
                "pigeon-server\(deployment.nodes.count == 1 ? "" : " node \(index + 1)") at \(node.baseURL), "
                    + "pid \(node.pid.map { "\($0)" } ?? "unknown"), RSS \(Format.mebibytes(results.residentBytesAtStartup[index])) at start"
            )
        }
        let throughput = { (suffix: String) in
            PigeonThroughput(deployment: deployment, settings: settings, namePrefix: namePrefix + suffix)
        }
        for scenario in scenarios {
            switch scenario {
            case .idleStreams:
                guard deployment.nodes.count == 1 else {
                    print("\n== idle-streams: skipped on \(deployment.nodes.count) nodes (memory per stream is a one-node figure) ==")
                    continue
                }
                print(
                    "\n== idle-streams: \(streams) WebSocket streams over \(streamDevices) devices, \(openConcurrency) opening at a time =="
                )
                let result = try await IdleStreams(
                    api: deployment.setupAPI,
                    server: deployment.nodes[0],
                    settings: settings,
                    namePrefix: namePrefix + "-i"
                )
                .measure(residentBytesAtStartup: results.residentBytesAtStartup[0])
                result.printLines()
                results.idleStreams = result
            case .wsThroughput:
                print("\n== ws-throughput: \(connections) WebSockets × \(window) sends in flight ==")
                let result = try await throughput("-w").overWebSocket()
                result.printLines(accepted: "acks", drained: "all stored")
                results.wsThroughput = result
            case .httpThroughput:
                print("\n== http-throughput: \(connections) keep-alive connections × 1 request in flight ==")
                let result = try await throughput("-h").overHTTP()
                result.printLines(accepted: "202s", drained: "all stored")
                results.httpThroughput = result
            case .latency:
                for rate in settings.rates {
                    print("\n== latency at \(rate) msg/s: \(connections) senders, each with its receiver connected ==")
                    let result = try await PigeonLatency(deployment: deployment, settings: settings, namePrefix: namePrefix + "-l")
                        .measure(rate: rate)
                    result.printLines(receiverLabel: "send → message.new")
                    results.latency.append(result)
                }
            case .relations:
                print("\n== relations: history reads of \(Relations.messages) messages with reactions and replies vs without ==")
                let result = try await Relations(api: deployment.setupAPI, namePrefix: namePrefix + "-r").measure()
                result.printLines()
                results.relations = result
            case .attachments:
                print("\n== attachments: \(AttachmentsBench.files) × \(AttachmentsBench.fileBytes >> 20) MiB up and down, one at a time and all at once ==")
                let result = try await AttachmentsBench(api: deployment.setupAPI, server: deployment.nodes[0], namePrefix: namePrefix + "-a").measure()
                result.printLines()
                results.attachments = result
            case .all, .mosquitto, .nats, .redis, .scaleOut:
                continue
            }
        }
        return results
    }

    private func runBroker<B: Broker>(_: B.Type, binary: String, workDirectory: String, settings: BenchSettings) async throws -> BrokerResults {
        let labels = B.labels
        return try await B.withBroker(binary: binary, workDirectory: workDirectory) { broker in
            var results = BrokerResults(version: broker.version, residentBytesIdle: ProcessStats.residentBytes(of: broker.pid))
            print(
                "\n\(labels.executable) \(broker.version ?? "(unknown version)") at 127.0.0.1:\(broker.port), pid \(broker.pid), "
                    + "RSS \(Format.mebibytes(results.residentBytesIdle)) \(labels.residentWhen)"
            )
            let load = broker.load(settings: settings)
            print(
                "\n== \(labels.name) throughput: \(connections) publishers × \(window) \(labels.inFlight) in flight, "
                    + "\(labels.throughputReceivers) =="
            )
            let throughput = try await load.throughput()
            throughput.printLines(accepted: labels.acks, drained: "all at their \(labels.receiver)s")
            results.throughput = throughput
            for rate in settings.rates {
                print("\n== \(labels.name) latency at \(rate) msg/s: \(connections) publishers, each with its \(labels.receiver) ==")
                let result = try await load.latency(rate: rate)
                result.printLines(receiverLabel: "publish → \(labels.receiver)")
                results.latency.append(result)
            }
            return results
        }
    }
}
