import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Takes one ``StatisticsSample`` a second of this node's counts, buffer depth and open streams, and keeps the last
/// ``capacity`` of them, so the operator's page (`GET /v1/admin/stats`) has its charts as soon as it loads. Its cost
/// is on its own once-a-second tick: the hot paths only add to atomic counters (``MessageCounts``,
/// ``LatencyHistogram``).
final class StatisticsSampler: Service {
    /// Samples kept: five minutes.
    static let capacity = 300
    /// The window of the latency quantiles: the last minute.
    static let latencyWindowSeconds = 60

    private let metrics: PigeonMetrics
    private let buffer: any AcceptPath
    private let hub: StreamHub
    /// Paces the samples and measures the time between two (the rates' denominator).
    private let clock: ElapsedClock
    private let interval: Duration

    private struct HistogramSnapshot {
        var at: Int64
        var acceptToStored: [Int]
        var storedToDelivered: [Int]
    }

    private struct State {
        var samples: [StatisticsSample] = []
        /// One snapshot per tick, the oldest about ``latencyWindowSeconds`` old.
        var histograms: [HistogramSnapshot] = []
        var previousCounts: [Int] = [0, 0, 0, 0]
        var previousTick: ElapsedClock.Instant?
    }

    private let state = NIOLockedValueBox(State())

    init(metrics: PigeonMetrics, buffer: any AcceptPath, hub: StreamHub, clock: any Clock<Duration> = ContinuousClock(), interval: Duration = .seconds(1)) {
        self.metrics = metrics
        self.buffer = buffer
        self.hub = hub
        self.clock = ElapsedClock(clock)
        self.interval = interval
        let empty = [Int](repeating: 0, count: LatencyHistogram.bucketCount)
        state.withLockedValue { $0.histograms = [HistogramSnapshot(at: WallClock.nowMillis(), acceptToStored: empty, storedToDelivered: empty)] }
    }

    func run() async throws {
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await cancelWhenGracefulShutdown { try await self.clock.sleep(for: self.interval) }
            if Task.isShuttingDownGracefully || Task.isCancelled { break }
            sample()
        }
    }

    /// Takes one sample now: the rates since the previous one, the depth and streams now, the latency quantiles of
    /// the window ending now.
    func sample() {
        let now = WallClock.nowMillis()
        let tick = clock.now
        let counts = metrics.counts
        let current = [counts.accepted.value, counts.stored.value, counts.delivered.value, counts.deadLettered.value]
        let snapshot = HistogramSnapshot(
            at: now, acceptToStored: metrics.recentAcceptToStored.snapshot(), storedToDelivered: metrics.recentStoredToDelivered.snapshot())
        let depth = buffer.depth
        let streams = OpenStreams(hub.openStreams)
        state.withLockedValue { state in
            let elapsed = state.previousTick.map { Self.seconds(tick - $0) } ?? Self.seconds(interval)
            let rates = zip(current, state.previousCounts).map { Double($0 - $1) / max(elapsed, 0.001) }
            state.previousCounts = current
            state.previousTick = tick
            state.histograms.append(snapshot)
            let cutoff = now - Int64(Self.latencyWindowSeconds) * 1000
            while state.histograms.count > 2, state.histograms[1].at <= cutoff { state.histograms.removeFirst() }
            let oldest = state.histograms[0]
            state.samples.append(
                StatisticsSample(
                    at: now, accepted: Self.rounded(rates[0]), stored: Self.rounded(rates[1]), delivered: Self.rounded(rates[2]),
                    deadLettered: Self.rounded(rates[3]), bufferDepth: depth, openStreams: streams,
                    acceptToStored: LatencyQuantiles(snapshot.acceptToStored, minus: oldest.acceptToStored),
                    storedToDelivered: LatencyQuantiles(snapshot.storedToDelivered, minus: oldest.storedToDelivered)))
            if state.samples.count > Self.capacity { state.samples.removeFirst(state.samples.count - Self.capacity) }
        }
    }

    /// The samples taken after `since` (milliseconds since the epoch; nil: all kept), oldest first.
    func samples(since: Int64?) -> [StatisticsSample] {
        state.withLockedValue { state in
            guard let since else { return state.samples }
            return Array(state.samples.drop { $0.at <= since })
        }
    }

    /// The latency quantiles of the window from the oldest snapshot kept (about a minute ago) to now, and the
    /// window's length in seconds.
    func recentLatency() -> RecentLatency {
        let now = WallClock.nowMillis()
        let acceptToStored = metrics.recentAcceptToStored.snapshot()
        let storedToDelivered = metrics.recentStoredToDelivered.snapshot()
        let oldest = state.withLockedValue { $0.histograms[0] }
        return RecentLatency(
            windowSeconds: Int((now - oldest.at + 500) / 1000),
            acceptToStored: LatencyQuantiles(acceptToStored, minus: oldest.acceptToStored),
            storedToDelivered: LatencyQuantiles(storedToDelivered, minus: oldest.storedToDelivered))
    }

    private static func seconds(_ duration: Duration) -> Double {
        let components = duration.components
        return Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// A rate to a tenth.
    private static func rounded(_ rate: Double) -> Double { (rate * 10).rounded() / 10 }
}

/// One tick of ``StatisticsSampler``: rates per second since the previous tick, the buffer depth and open streams at
/// the tick, and the latency quantiles of the window ending at it.
struct StatisticsSample: Sendable, Codable, Equatable {
    /// When it was taken (milliseconds since the epoch).
    var at: Int64
    var accepted: Double
    var stored: Double
    var delivered: Double
    var deadLettered: Double
    var bufferDepth: Int
    var openStreams: OpenStreams
    var acceptToStored: LatencyQuantiles
    var storedToDelivered: LatencyQuantiles
}

/// Open event streams on this node, per transport.
struct OpenStreams: Sendable, Codable, Equatable {
    var websocket: Int
    var sse: Int

    /// From ``StreamHub/openStreams`` (keyed `ws` and `sse`).
    init(_ counts: [String: Int]) {
        websocket = counts["ws"] ?? 0
        sse = counts["sse"] ?? 0
    }
}

/// Quantiles of a latency in milliseconds (the upper bound of a ``LatencyHistogram`` bucket: within 12.5 %), over
/// `count` measurements; null when there were none.
struct LatencyQuantiles: Sendable, Codable, Equatable {
    var count: Int
    @NullEncoded var p50: Int64?
    @NullEncoded var p90: Int64?
    @NullEncoded var p99: Int64?

    /// The quantiles of the measurements in `counts` and not in `earlier` (two snapshots of one histogram).
    init(_ counts: [Int], minus earlier: [Int]) {
        let window = zip(counts, earlier).map { max(0, $0 - $1) }
        count = window.reduce(0, +)
        p50 = LatencyHistogram.quantile(0.5, of: window)
        p90 = LatencyHistogram.quantile(0.9, of: window)
        p99 = LatencyHistogram.quantile(0.99, of: window)
    }
}

/// The latency quantiles of the last ``windowSeconds``.
struct RecentLatency: Sendable, Codable {
    var windowSeconds: Int
    var acceptToStored: LatencyQuantiles
    var storedToDelivered: LatencyQuantiles
}
