import NIOConcurrencyHelpers

/// A token bucket per key: `rate` tokens per second on average, bursts up to `burst`.
///
/// Memory is bounded: past `maxKeys` keys, buckets that have refilled (the same as no bucket) are forgotten, and
/// if that is not enough, all are (a key then starts with a full burst again, never with less).
final class RateLimiter: Sendable {
    private struct Bucket: Sendable {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private let rate: Double
    private let burst: Double
    private let maxKeys: Int
    private let buckets = NIOLockedValueBox([String: Bucket]())

    init(rate: Double, burst: Double, maxKeys: Int = 100_000) {
        self.rate = rate
        self.burst = max(1, burst)
        self.maxKeys = maxKeys
    }

    /// Takes `cost` tokens for `key`; `nil` if allowed, else the whole seconds to wait (nothing is taken then).
    func take(_ key: String, cost: Double = 1, now: ContinuousClock.Instant = .now) -> Int? {
        update(key, now: now) { bucket in
            if bucket.tokens >= cost {
                bucket.tokens -= cost
                return nil
            }
            return waitSeconds(missing: cost - bucket.tokens)
        }
    }

    /// Whether `key` has any tokens left (`nil`), else the whole seconds until it has: for costs known only after
    /// the work, paired with ``charge(_:cost:now:)``.
    func check(_ key: String, now: ContinuousClock.Instant = .now) -> Int? {
        update(key, now: now) { bucket in
            bucket.tokens > 0 ? nil : waitSeconds(missing: -bucket.tokens + 1)
        }
    }

    /// Takes `cost` tokens for `key` unconditionally (the bucket may go into debt, which later checks wait out).
    func charge(_ key: String, cost: Double, now: ContinuousClock.Instant = .now) {
        update(key, now: now) { bucket in bucket.tokens -= cost }
    }

    private func waitSeconds(missing: Double) -> Int {
        max(1, Int((missing / rate).rounded(.up)))
    }

    private func update<T>(_ key: String, now: ContinuousClock.Instant, _ body: (inout Bucket) -> T) -> T {
        buckets.withLockedValue { buckets in
            if buckets.count >= maxKeys, buckets[key] == nil { prune(&buckets, now: now) }
            var bucket = buckets[key] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = refilled(bucket, now: now)
            bucket.updated = now
            let result = body(&bucket)
            buckets[key] = bucket
            return result
        }
    }

    private func refilled(_ bucket: Bucket, now: ContinuousClock.Instant) -> Double {
        let elapsed = now - bucket.updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return min(burst, bucket.tokens + max(0, seconds) * rate)
    }

    private func prune(_ buckets: inout [String: Bucket], now: ContinuousClock.Instant) {
        buckets = buckets.filter { refilled($0.value, now: now) < burst }
        if buckets.count >= maxKeys { buckets.removeAll(keepingCapacity: true) }
    }
}
