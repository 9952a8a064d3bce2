/// Latencies in whole milliseconds counted into fixed buckets: one per millisecond below 16 ms, then eight per
/// doubling (a bucket's upper bound is within 12.5 % of any value in it), up to about 70 minutes (longer ones count in
/// the last bucket). Recording is one relaxed atomic add, no lock. The counts only grow: a recent window is the
/// difference of two ``snapshot()``s (``StatisticsSampler`` keeps one a second).
final class LatencyHistogram: Sendable {
    /// Exact buckets 0–15 ms, then 8 sub-buckets for each power of two from 2⁴ to 2²¹.
    static let bucketCount = 16 + 18 * 8

    private let buckets: [RelaxedCounter]

    init() {
        buckets = (0..<Self.bucketCount).map { _ in RelaxedCounter() }
    }

    func record(milliseconds: Int64) {
        buckets[Self.bucket(of: milliseconds)].add()
    }

    /// The count of each bucket now.
    func snapshot() -> [Int] { buckets.map(\.value) }

    /// The bucket a latency of `milliseconds` counts in (negative ones in the first).
    static func bucket(of milliseconds: Int64) -> Int {
        guard milliseconds >= 16 else { return Int(max(0, milliseconds)) }
        let exponent = 63 - milliseconds.leadingZeroBitCount
        let sub = Int((milliseconds >> (exponent - 3)) & 7)
        return min(bucketCount - 1, 16 + (exponent - 4) * 8 + sub)
    }

    /// The largest latency, in milliseconds, that counts in `bucket`.
    static func upperBound(of bucket: Int) -> Int64 {
        guard bucket >= 16 else { return Int64(bucket) }
        let exponent = 4 + (bucket - 16) / 8
        let sub = Int64((bucket - 16) % 8)
        return ((8 + sub + 1) << (exponent - 3)) - 1
    }

    /// The `quantile` (0 < q ≤ 1) of the latencies `counts` holds (a snapshot, or the difference of two), as the
    /// upper bound of the bucket it falls in; nil when `counts` holds none.
    static func quantile(_ quantile: Double, of counts: [Int]) -> Int64? {
        let total = counts.reduce(0, +)
        guard total > 0 else { return nil }
        let rank = max(1, Int((quantile * Double(total)).rounded(.up)))
        var seen = 0
        for (bucket, count) in counts.enumerated() {
            seen += count
            if seen >= rank { return upperBound(of: bucket) }
        }
        return upperBound(of: counts.count - 1)
    }
}
