import NIOConcurrencyHelpers

/// A token bucket per device: `rate` sends per second on average, bursts up to `burst`.
final class RateLimiter: Sendable {
    private struct Bucket: Sendable {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private let rate: Double
    private let burst: Double
    private let buckets = NIOLockedValueBox([String: Bucket]())

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = max(1, burst)
    }

    /// Takes one token for `key`; `nil` if allowed, else the whole seconds to wait.
    func take(_ key: String, now: ContinuousClock.Instant = .now) -> Int? {
        buckets.withLockedValue { buckets in
            if buckets.count > 100_000 { buckets.removeAll(keepingCapacity: true) }
            var bucket = buckets[key] ?? Bucket(tokens: burst, updated: now)
            let elapsed = Double((now - bucket.updated).components.seconds) + Double((now - bucket.updated).components.attoseconds) / 1e18
            bucket.tokens = min(burst, bucket.tokens + elapsed * rate)
            bucket.updated = now
            defer { buckets[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return max(1, Int(((1 - bucket.tokens) / rate).rounded(.up)))
        }
    }
}
