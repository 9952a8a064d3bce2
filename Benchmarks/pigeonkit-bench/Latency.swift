import Histogram

/// Percentiles of one latency measurement, in microseconds.
struct LatencySummary: Codable, Sendable {
    var count: Int
    var p50Microseconds: Double
    var p99Microseconds: Double
    var maxMicroseconds: Double
}

/// Latencies of one measurement, recorded in nanoseconds (3 significant digits, up to 60 s).
struct LatencySample {
    private var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)

    mutating func record(_ latency: Duration) {
        let (seconds, attoseconds) = latency.components
        let nanoseconds = max(seconds * 1_000_000_000 + attoseconds / 1_000_000_000, 0)
        _ = histogram.record(min(UInt64(nanoseconds), 60_000_000_000))
    }

    var summary: LatencySummary {
        LatencySummary(
            count: Int(histogram.totalCount),
            p50Microseconds: Double(histogram.valueAtPercentile(50)) / 1000,
            p99Microseconds: Double(histogram.valueAtPercentile(99)) / 1000,
            maxMicroseconds: Double(histogram.max) / 1000)
    }
}
