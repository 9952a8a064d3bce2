import Foundation

/// The result of one throughput run (Pigeon over WebSocket or HTTP, MQTT QoS 1, or NATS JetStream).
struct ThroughputResult: Codable, Sendable {
    var connections: Int
    /// Sends in flight per connection; `nil` for HTTP, which has one request in flight per connection.
    var window: Int?
    var measuredSeconds: Double
    /// Accept answers that arrived inside the measured window.
    var acceptedInWindow: Int
    var acceptedPerSecond: Double
    /// Accept answers over the whole run, warm-up and tail included.
    var acceptedTotal: Int
    /// Refused sends by error code.
    var errors: [String: Int]
    /// Sends that had no answer when the run gave up waiting.
    var unanswered: Int
    /// Seconds from the last answer until every accepted message was stored (Pigeon) or had reached its subscriber
    /// or consumer (MQTT, NATS); `nil` if that did not happen within the drain timeout.
    var drainSeconds: Double?
    /// The server's memory and CPU, and the benchmark's CPU.
    var load: LoadSample
    /// Pigeon: every accepted message of the run divided by the time from the first send until all were stored, the
    /// rate the server sustains from accept to store (a processor that falls behind the accepts shows here); `nil`
    /// for MQTT, or if the drain timed out.
    var storedPerSecond: Double? = nil
    /// What the consuming receivers got, when the run had a receiver per sender; `nil` without receivers.
    var receivers: ReceiverCounts? = nil

    /// The server's CPU time (all nodes) in the measured window per message accepted in it, in microseconds.
    var serverCPUMicrosecondsPerAccepted: Double? {
        perAccepted(load.serverCores)
    }

    /// The server's context switches (all nodes, all threads) in the measured window per message accepted in it.
    var serverContextSwitchesPerAccepted: Double? {
        load.serverContextSwitches(per: acceptedInWindow)
    }

    /// The backing services' CPU time (PostgreSQL and Redis with their children) in the measured window per
    /// message accepted in it, in microseconds; `nil` without backing services.
    var serviceCPUMicrosecondsPerAccepted: Double? {
        load.serviceCores.isEmpty ? nil : perAccepted(load.serviceCores.values.reduce(0, +))
    }

    /// The benchmark's own CPU time in the measured window per message accepted in it, in microseconds.
    var benchCPUMicrosecondsPerAccepted: Double? {
        perAccepted(load.benchCores)
    }

    private func perAccepted(_ cores: Double?) -> Double? {
        guard let cores, acceptedInWindow > 0 else { return nil }
        return cores * measuredSeconds / Double(acceptedInWindow) * 1_000_000
    }
}

/// The result of one paced latency run at one rate.
struct LatencyResult: Codable, Sendable {
    /// The intended total send rate, messages per second.
    var rate: Int
    /// Messages sent in the measured window (and not refused).
    var sent: Int
    /// The rate actually achieved in the measured window.
    var sentPerSecond: Double
    /// Send → arrival at the receiver (`message.new`, or the subscriber's PUBLISH).
    var toReceiver: LatencySummary
    /// Send → ✓✓ at the sender (Pigeon only).
    var toDelivered: LatencySummary?
    /// Measured messages that had not arrived at the receiver at the end of the grace period.
    var missingAtReceiver: Int
    /// Measured messages without ✓✓ at the end of the grace period (Pigeon only).
    var missingDelivered: Int?
    /// Refused or failed sends by error code.
    var errors: [String: Int]
    /// The server's memory and CPU, and the benchmark's CPU.
    var load: LoadSample

    /// The server's CPU time (all nodes) in the measured window per message sent in it (and not refused: for Pigeon
    /// the messages accepted), in microseconds.
    var serverCPUMicrosecondsPerMessage: Double? {
        load.serverCPUMicroseconds(per: sent)
    }

    /// The server's context switches (all nodes, all threads) in the measured window per message sent in it (and not
    /// refused).
    var serverContextSwitchesPerMessage: Double? {
        load.serverContextSwitches(per: sent)
    }

    init(
        rate: Int,
        measuredSeconds: Double,
        progress: DeliveryTracker.Progress,
        toReceiver: LatencySummary,
        toDelivered: LatencySummary?,
        load: LoadSample
    ) {
        self.rate = rate
        sent = progress.sent
        sentPerSecond = Double(progress.sent) / measuredSeconds
        self.toReceiver = toReceiver
        self.toDelivered = toDelivered
        missingAtReceiver = progress.missingAtReceiver
        missingDelivered = toDelivered == nil ? nil : progress.missingDelivered
        errors = progress.refusals
        self.load = load
    }
}

/// The result of the idle-streams run.
struct IdleStreamsResult: Codable, Sendable {
    var streams: Int
    var devices: Int
    var opened: Int
    var failed: Int
    /// Streams the server ended before the scenario closed them.
    var closedByServer: Int
    var firstError: String?
    /// Seconds until every stream was open (or had failed).
    var openSeconds: Double
    var residentBytesAtStartup: UInt64?
    /// Just before opening the streams (differs from start-up when other scenarios ran first).
    var residentBytesBefore: UInt64?
    var residentBytesWithStreams: UInt64?
    /// (RSS with the streams − RSS at start-up) / open streams.
    var bytesPerStreamSinceStartup: Double?
    /// (RSS with the streams − RSS just before opening them) / open streams.
    var bytesPerStreamSinceBefore: Double?

    init(
        streams: Int,
        devices: Int,
        opened: Int,
        failed: Int,
        closedByServer: Int,
        firstError: String?,
        openSeconds: Double,
        residentBytesAtStartup: UInt64?,
        residentBytesBefore: UInt64?,
        residentBytesWithStreams: UInt64?
    ) {
        self.streams = streams
        self.devices = devices
        self.opened = opened
        self.failed = failed
        self.closedByServer = closedByServer
        self.firstError = firstError
        self.openSeconds = openSeconds
        self.residentBytesAtStartup = residentBytesAtStartup
        self.residentBytesBefore = residentBytesBefore
        self.residentBytesWithStreams = residentBytesWithStreams
        let open = opened - closedByServer
        func perStream(since baseline: UInt64?) -> Double? {
            guard let baseline, let residentBytesWithStreams, open > 0 else { return nil }
            return (Double(residentBytesWithStreams) - Double(baseline)) / Double(open)
        }
        bytesPerStreamSinceStartup = perStream(since: residentBytesAtStartup)
        bytesPerStreamSinceBefore = perStream(since: residentBytesBefore)
    }
}

/// One Pigeon deployment's results.
struct PigeonResults: Codable, Sendable {
    /// The ``Backend`` measured (`embedded`, `production`, `production-2`), or `url` for a server given with --url.
    var deployment: String
    /// Each node's resident set size just after start-up, in node order.
    var residentBytesAtStartup: [UInt64?]
    var idleStreams: IdleStreamsResult?
    var wsThroughput: ThroughputResult?
    var httpThroughput: ThroughputResult?
    var latency: [LatencyResult] = []
    var relations: RelationsResult?
    var attachments: AttachmentsResult?

    /// The nodes' highest resident set sizes over the load scenarios, in node order.
    var peakResidentBytes: [UInt64?] {
        let loads = [wsThroughput?.load, httpThroughput?.load].compactMap { $0 } + latency.map(\.load)
        return residentBytesAtStartup.indices.map { node in
            loads.compactMap { $0.servers.indices.contains(node) ? $0.servers[node].peakResidentBytes : nil }.max()
        }
    }
}

/// A reference broker's results (mosquitto, NATS JetStream, Redis Streams), for comparison.
struct BrokerResults: Codable, Sendable {
    var version: String?
    var residentBytesIdle: UInt64?
    var throughput: ThroughputResult?
    var latency: [LatencyResult] = []
}

/// Everything one run measured; printed as a summary table and written by `--json`.
struct BenchReport: Codable, Sendable {
    var settings: BenchSettings
    /// One entry per deployment measured, in the order they ran.
    var pigeon: [PigeonResults] = []
    var mosquitto: BrokerResults?
    var nats: BrokerResults?
    var redis: BrokerResults?
    /// The scale-out scenario's runs and figures, when it ran.
    var scaleOut: ScaleOutResults?
    /// The production mode's targets, where this run measured what they need (see ``ProductionTarget``).
    var targets: [TargetCheck] = []

    func writeJSON(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
    }
}
