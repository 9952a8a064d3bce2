import Histogram
import Synchronization

/// Percentiles of one latency measurement, in milliseconds.
struct LatencySummary: Codable, Sendable {
    var count: Int
    var p50Ms: Double
    var p99Ms: Double
    var maxMs: Double

    init(_ histogram: Histogram<UInt64>) {
        count = Int(histogram.totalCount)
        p50Ms = Double(histogram.valueAtPercentile(50)) / 1000
        p99Ms = Double(histogram.valueAtPercentile(99)) / 1000
        maxMs = Double(histogram.max) / 1000
    }
}

/// A latency histogram shared by many connections: microsecond resolution, 3 significant digits, up to 60 s.
final class LatencyRecorder: Sendable {
    private let histogram = Mutex(Histogram<UInt64>(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three))

    func record(_ latency: Duration) {
        let microseconds = min(latency.microseconds, 60_000_000)
        _ = histogram.withLock { $0.record(microseconds) }
    }

    var summary: LatencySummary { histogram.withLock { LatencySummary($0) } }
}
