import ArgumentParser
import Foundation

/// A load shape `pigeon-bench` can run.
enum Scenario: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// Every scenario, in ``runOrder``.
    case all
    /// N idle WebSocket streams: server memory per open stream.
    case idleStreams = "idle-streams"
    /// Pipelined `send` operations over WebSockets: accepted messages per second.
    case wsThroughput = "ws-throughput"
    /// `POST /v1/conversations/{id}/messages` on keep-alive connections: accepted messages per second.
    case httpThroughput = "http-throughput"
    /// Paced sends: send → `message.new` and send → ✓✓ latency.
    case latency
    /// The throughput and latency shapes against mosquitto (MQTT QoS 1), for comparison.
    case mosquitto
    /// The throughput and latency shapes against NATS JetStream (a file-stored stream, durable consumers with
    /// explicit acknowledgements), for comparison.
    case nats
    /// The throughput and latency shapes against Redis Streams on a redis-server with `appendfsync always` (a
    /// consumer group per stream, an XACK per entry), for comparison with a peer that fsyncs before it answers.
    case redis
    /// History reads of a conversation whose every message carries reactions and a quarter of which are replies,
    /// against the same reads of a plain one (p50/p99), and how many reactions per second the server stores.
    case relations
    /// Upload and download MiB/s of 24 MiB attachments, one at a time and eight at once, beside the disk's fsynced write
    /// rate, and the server's resident memory during the parallel uploads.
    case attachments
    /// 1, 2, 4 … production nodes, each confined to the same CPU share: how accepted/s and stored/s grow with the
    /// nodes (see ``ScaleOut``). Not part of `all`: it needs PostgreSQL, Redis and a writable cgroup cpu controller.
    case scaleOut = "scale-out"

    /// The order they run in. Idle streams come first so that their memory is measured against the freshly started
    /// server, before the load scenarios grow its caches.
    static let runOrder: [Scenario] = [.idleStreams, .wsThroughput, .httpThroughput, .latency, .relations, .attachments, .scaleOut, .mosquitto, .nats, .redis]

    /// Whether `all` runs it.
    var isInAll: Bool { self != .scaleOut }

    /// Whether the scenario talks to a Pigeon server (and so needs the server binary, or --url).
    var needsPigeonServer: Bool { ![.mosquitto, .nats, .redis].contains(self) }

    /// Whether it runs against the servers of each of --backends (or --url); scale-out spawns its own.
    var runsOnBackends: Bool { needsPigeonServer && self != .scaleOut }
}

/// A comma-separated list of scenarios, e.g. `ws-throughput,latency`.
struct ScenarioList: ExpressibleByArgument, Sendable {
    var scenarios: [Scenario]

    init(_ scenarios: [Scenario]) {
        self.scenarios = scenarios
    }

    init?(argument: String) {
        var scenarios: [Scenario] = []
        for name in argument.split(separator: ",") {
            guard let scenario = Scenario(rawValue: name.trimmingCharacters(in: .whitespaces)) else { return nil }
            scenarios.append(scenario)
        }
        guard !scenarios.isEmpty else { return nil }
        self.scenarios = scenarios
    }

    var defaultValueDescription: String { scenarios.map(\.rawValue).joined(separator: ",") }

    static var allValueStrings: [String] { Scenario.allCases.map(\.rawValue) }

    /// The scenarios to run, in ``Scenario/runOrder`` and without repeats.
    var selected: [Scenario] {
        Scenario.runOrder.filter { scenarios.contains($0) || (scenarios.contains(.all) && $0.isInAll) }
    }
}

/// A comma-separated list of positive message rates, e.g. `1000,2000`.
struct RateList: ExpressibleByArgument, Sendable {
    var rates: [Int]

    init?(argument: String) {
        var rates: [Int] = []
        for item in argument.split(separator: ",") {
            guard let rate = Int(item.trimmingCharacters(in: .whitespaces)), rate > 0 else { return nil }
            rates.append(rate)
        }
        guard !rates.isEmpty else { return nil }
        self.rates = rates
    }
}

/// A comma-separated list of node counts, e.g. `1,2,4`.
struct NodeCountList: ExpressibleByArgument, Sendable {
    /// The counts in the order given, without repeats.
    var counts: [Int]

    init(_ counts: [Int]) {
        self.counts = counts
    }

    init?(argument: String) {
        var counts: [Int] = []
        for item in argument.split(separator: ",") {
            guard let count = Int(item.trimmingCharacters(in: .whitespaces)), (1...16).contains(count) else { return nil }
            if !counts.contains(count) { counts.append(count) }
        }
        guard !counts.isEmpty else { return nil }
        self.counts = counts
    }

    var defaultValueDescription: String { counts.map(String.init).joined(separator: ",") }
}

/// The load parameters every scenario shares, fixed for one run.
struct BenchSettings: Sendable, Codable {
    /// Sender connections (WebSocket, HTTP or MQTT publisher).
    var connections: Int
    /// Un-acknowledged sends in flight per connection in the throughput scenarios.
    var window: Int
    /// Warm-up before each measured window, in seconds; its results are not counted.
    var warmupSeconds: Int
    /// Length of each measured window, in seconds.
    var durationSeconds: Int
    /// Total paced send rates of the latency scenarios, messages per second.
    var rates: [Int]
    /// Idle streams to open.
    var streams: Int
    /// Devices the idle streams are spread over.
    var streamDevices: Int
    /// Streams being opened at the same time.
    var openConcurrency: Int
    /// Message body size in bytes (the MQTT payload has the same size).
    var bodySize: Int
    /// How long the latency scenarios wait for late messages and receipts after the last send, in seconds.
    var graceSeconds: Int
    /// How long a throughput scenario waits for outstanding work to finish after sending stops, in seconds.
    var drainTimeoutSeconds: Int
    /// Whether each conversation of the Pigeon throughput scenarios has its receiver device consuming its stream
    /// (the brokers' throughput runs always have their consumers).
    var throughputReceivers: Bool
    /// How long a Pigeon throughput receiver gathers `message.new` events before it sends one delivered receipt up
    /// to the highest seq, in milliseconds (PigeonKit's default is 50); 0 sends a receipt per event.
    var receiptDelayMilliseconds: Int
    /// Members per conversation that never connect and have a push registration (each message owes them a push).
    var offlinePushMembers = 0

    var warmup: Duration { .seconds(warmupSeconds) }
    var duration: Duration { .seconds(durationSeconds) }
    var grace: Duration { .seconds(graceSeconds) }
    var drainTimeout: Duration { .seconds(drainTimeoutSeconds) }
    var receiptDelay: Duration { .milliseconds(receiptDelayMilliseconds) }

    /// The message body the Pigeon scenarios send: `bodySize` ASCII characters.
    var messageBody: String { String(repeating: "x", count: bodySize) }
}
