import NIOConcurrencyHelpers

/// A token bucket per key: `rate` tokens per second on average, bursts up to `burst`.
///
/// Memory is bounded by `maxKeys` without ever forgetting a limit: a new key past it takes the place of a bucket that
/// has refilled to `burst` (the same as no bucket), looked for among the least recently used ones; when those are all
/// still limiting, the new key is refused (fail closed) rather than one of them forgotten. Otherwise an attacker
/// spread over many keys (addresses, users) could make the table forget every limit at once. Every operation is O(1):
/// the buckets are kept in a list in order of use, and only a fixed number at its old end is looked at.
final class RateLimiter: Sendable {
    private struct Bucket: Sendable {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    /// How many of the least recently used buckets a new key at the cap looks at for one that has refilled (a bucket
    /// used less recently may still be in debt from a ``charge(_:cost:now:)``, one used after it already full).
    static let evictionCandidates = 16

    private let rate: Double
    private let burst: Double
    private let buckets: NIOLockedValueBox<RecencyTable<Bucket>>

    init(rate: Double, burst: Double, maxKeys: Int = 100_000) {
        self.rate = rate
        self.burst = max(1, burst)
        self.buckets = NIOLockedValueBox(RecencyTable(capacity: max(1, maxKeys)))
    }

    /// How many keys are held now.
    var keyCount: Int { buckets.withLockedValue { $0.count } }

    /// Takes `cost` tokens for `key`; `nil` if allowed, else the whole seconds to wait (nothing is taken then).
    func take(_ key: String, cost: Double = 1, now: ContinuousClock.Instant = .now) -> Int? {
        update(key, now: now) { bucket in
            if bucket.tokens >= cost {
                bucket.tokens -= cost
                return nil
            }
            return waitSeconds(missing: cost - bucket.tokens)
        } full: { $0 }
    }

    /// Whether `key` has any tokens left (`nil`), else the whole seconds until it has: for costs known only after
    /// the work, paired with ``charge(_:cost:now:)``.
    func check(_ key: String, now: ContinuousClock.Instant = .now) -> Int? {
        update(key, now: now) { bucket in
            bucket.tokens > 0 ? nil : waitSeconds(missing: -bucket.tokens + 1)
        } full: { $0 }
    }

    /// Takes `cost` tokens for `key` unconditionally (the bucket may go into debt, which later checks wait out). A key
    /// that has no bucket and finds the table full of limiting buckets is not charged: its check was refused already,
    /// unless its full bucket was taken over since, and it then starts full, as it would have.
    func charge(_ key: String, cost: Double, now: ContinuousClock.Instant = .now) {
        update(key, now: now) { bucket in bucket.tokens -= cost } full: { _ in () }
    }

    private func waitSeconds(missing: Double) -> Int {
        max(1, Int((missing / rate).rounded(.up)))
    }

    /// Runs `body` on `key`'s bucket, refilled to `now`; a new key at the cap takes the place of a refilled bucket,
    /// else gets `full` with the seconds until the least recently used bucket has refilled.
    private func update<T>(
        _ key: String, now: ContinuousClock.Instant, _ body: (inout Bucket) -> T, full: (Int) -> T
    ) -> T {
        buckets.withLockedValue { table in
            if let slot = table.slot(of: key) {
                table.touch(slot)
                return apply(body, to: &table[slot], now: now)
            }
            if table.isFull {
                guard let refilled = table.leastRecentlyUsed(Self.evictionCandidates, where: { self.refilled($0, now: now) >= burst }) else {
                    let oldest = table.oldestValue.map { refilled($0, now: now) } ?? burst
                    return full(waitSeconds(missing: burst - oldest))
                }
                table.remove(refilled)
            }
            let slot = table.insert(key, Bucket(tokens: burst, updated: now))
            return apply(body, to: &table[slot], now: now)
        }
    }

    private func apply<T>(_ body: (inout Bucket) -> T, to bucket: inout Bucket, now: ContinuousClock.Instant) -> T {
        bucket.tokens = refilled(bucket, now: now)
        bucket.updated = now
        return body(&bucket)
    }

    private func refilled(_ bucket: Bucket, now: ContinuousClock.Instant) -> Double {
        let elapsed = now - bucket.updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return min(burst, bucket.tokens + max(0, seconds) * rate)
    }
}

/// Values by key, at most `capacity` of them, in order of use: a doubly linked list threaded through an array (slots
/// are reused through a free list), so looking up, using, inserting and removing are O(1).
struct RecencyTable<Value: Sendable>: Sendable {
    private struct Entry: Sendable {
        var key: String
        var value: Value
        /// The neighbours in order of use (`nil`: none), towards the most and the least recently used.
        var newer: Int?
        var older: Int?
    }

    let capacity: Int
    private var slots: [String: Int] = [:]
    private var entries: [Entry?] = []
    private var freeSlots: [Int] = []
    private var newest: Int?
    private var oldest: Int?

    init(capacity: Int) {
        self.capacity = capacity
    }

    var count: Int { slots.count }
    var isFull: Bool { slots.count >= capacity }
    var oldestValue: Value? { oldest.flatMap { entries[$0]?.value } }

    func slot(of key: String) -> Int? { slots[key] }

    subscript(slot: Int) -> Value {
        get { entries[slot]!.value }
        set { entries[slot]!.value = newValue }
    }

    /// Makes `slot` the most recently used.
    mutating func touch(_ slot: Int) {
        guard newest != slot else { return }
        unlink(slot)
        link(slot)
    }

    /// Adds `key` (which must be absent) as the most recently used; its slot.
    mutating func insert(_ key: String, _ value: Value) -> Int {
        let entry = Entry(key: key, value: value)
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
            entries[slot] = entry
        } else {
            slot = entries.count
            entries.append(entry)
        }
        slots[key] = slot
        link(slot)
        return slot
    }

    mutating func remove(_ slot: Int) {
        guard let entry = entries[slot] else { return }
        unlink(slot)
        slots[entry.key] = nil
        entries[slot] = nil
        freeSlots.append(slot)
    }

    /// The slot of the least recently used value that `matches`, among the `limit` least recently used.
    func leastRecentlyUsed(_ limit: Int, where matches: (Value) -> Bool) -> Int? {
        var cursor = oldest
        var looked = 0
        while let slot = cursor, looked < limit, let entry = entries[slot] {
            if matches(entry.value) { return slot }
            cursor = entry.newer
            looked += 1
        }
        return nil
    }

    private mutating func link(_ slot: Int) {
        entries[slot]!.older = newest
        entries[slot]!.newer = nil
        if let newest { entries[newest]!.newer = slot }
        newest = slot
        if oldest == nil { oldest = slot }
    }

    private mutating func unlink(_ slot: Int) {
        let (newer, older) = (entries[slot]!.newer, entries[slot]!.older)
        if let newer { entries[newer]!.older = older } else { newest = older }
        if let older { entries[older]!.newer = newer } else { oldest = newer }
    }
}
