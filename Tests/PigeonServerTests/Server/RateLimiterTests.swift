@testable import PigeonServer
import Testing

/// The token buckets' table at its cap (docs/SECURITY.md, "Limits and their defaults"): a new key takes the place of
/// the least recently used bucket that has refilled, never of one still limiting, and is refused when every bucket it
/// may look at still limits. (Before, the whole table was cleared at the cap: keys spread over many addresses reset
/// every limit.)
@Suite struct RateLimiterTests {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int64(seconds * 1000)) }

    @Test func aFullTableOfLimitingBucketsRefusesNewKeysAndForgetsNoLimit() {
        let limiter = RateLimiter(rate: 1, burst: 2, maxKeys: 3)
        for key in ["a", "b", "c"] {
            #expect(limiter.take(key, cost: 2, now: at(0)) == nil)
            #expect(limiter.take(key, now: at(0)) != nil, "\(key) is limited")
        }
        // A fourth key: every bucket still limits, so it is refused (the Retry-After: until the oldest has refilled).
        #expect(limiter.take("d", now: at(0.5)) == 2)
        #expect(limiter.check("d", now: at(0.5)) != nil)
        limiter.charge("d", cost: 1, now: at(0.5))
        #expect(limiter.keyCount == 3)
        for key in ["a", "b", "c"] { #expect(limiter.take(key, now: at(0.5)) != nil, "\(key) is still limited") }
    }

    @Test func aNewKeyTakesThePlaceOfTheLeastRecentlyUsedRefilledBucket() {
        let limiter = RateLimiter(rate: 1, burst: 2, maxKeys: 3)
        #expect(limiter.take("a", cost: 2, now: at(0)) == nil)
        #expect(limiter.take("b", cost: 1, now: at(0.2)) == nil)
        #expect(limiter.take("c", cost: 2, now: at(1.5)) == nil)
        // At 2.5 s a and b have refilled, c has not; a is the least recently used: d takes its place.
        #expect(limiter.take("d", cost: 2, now: at(2.5)) == nil)
        #expect(limiter.keyCount == 3)
        #expect(limiter.take("c", cost: 2, now: at(2.5)) != nil, "c kept its state")
        // b is the only refilled bucket now: e takes its place; then nothing is left to give up.
        #expect(limiter.take("e", cost: 2, now: at(2.5)) == nil)
        #expect(limiter.take("f", now: at(2.5)) != nil)
        #expect(limiter.take("d", now: at(2.5)) != nil, "d kept its state")
    }

    @Test func aRecentlyUsedBucketIsKeptOverAnOlderRefilledOne() {
        let limiter = RateLimiter(rate: 1, burst: 2, maxKeys: 2)
        #expect(limiter.take("a", now: at(0)) == nil)
        #expect(limiter.take("b", now: at(0)) == nil)
        // Both have refilled by 2 s; a is used again (one token left), so b is the one to give up its place.
        #expect(limiter.take("a", now: at(2)) == nil)
        #expect(limiter.take("c", now: at(2)) == nil)
        #expect(limiter.take("a", now: at(2)) == nil)
        #expect(limiter.take("a", now: at(2)) != nil, "a kept its state: its second take at 2 s emptied it")
    }

    /// A bucket in debt at the old end does not hide a refilled one just behind it.
    @Test func aBucketInDebtIsSkippedForARefilledOneBehindIt() {
        let limiter = RateLimiter(rate: 1, burst: 2, maxKeys: 2)
        limiter.charge("debtor", cost: 10, now: at(0))
        #expect(limiter.take("b", now: at(0.5)) == nil)
        #expect(limiter.take("c", now: at(2)) == nil, "b has refilled: c takes its place")
        #expect(limiter.check("debtor", now: at(2)) != nil, "the debt is remembered")
    }

    /// Every operation looks at a fixed number of buckets, whatever the table holds: a full table of 100,000 limiting
    /// buckets answers 200,000 new keys (each refused) as fast as a small one.
    @Test func aFullTableAnswersInConstantTime() {
        let limiter = RateLimiter(rate: 1, burst: 1)
        for index in 0..<100_000 { _ = limiter.take("key-\(index)", now: at(0)) }
        #expect(limiter.keyCount == 100_000)
        let clock = ContinuousClock()
        var refused = 0
        let elapsed = clock.measure {
            for index in 0..<200_000 where limiter.take("new-\(index)", now: at(0.5)) != nil { refused += 1 }
        }
        #expect(refused == 200_000)
        #expect(limiter.keyCount == 100_000)
        #expect(elapsed < .seconds(20), "\(elapsed)")
    }
}
