import Histogram

/// Percentiles of one latency measurement, in microseconds.
package struct LatencySummary: Codable, Sendable {
    package var count: Int
    package var p50Microseconds: Double
    package var p99Microseconds: Double
    package var maxMicroseconds: Double
}

/// Latencies of one measurement, recorded in nanoseconds (3 significant digits, up to 60 s).
package struct LatencySample {
    package init() {}

    private var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)

    package mutating func record(_ latency: Duration) {
        let (seconds, attoseconds) = latency.components
        let nanoseconds = max(seconds * 1_000_000_000 + attoseconds / 1_000_000_000, 0)
        _ = histogram.record(min(UInt64(nanoseconds), 60_000_000_000))
    }

    package var summary: LatencySummary {
        LatencySummary(
            count: Int(histogram.totalCount),
            p50Microseconds: Double(histogram.valueAtPercentile(50)) / 1000,
            p99Microseconds: Double(histogram.valueAtPercentile(99)) / 1000,
            maxMicroseconds: Double(histogram.max) / 1000)
    }
}
