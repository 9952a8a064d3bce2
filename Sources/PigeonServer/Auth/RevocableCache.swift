import NIOConcurrencyHelpers

/// A bounded in-memory cache of what a token proves, safe against revocations that race a lookup: a value read from
/// the store before an ``invalidate(where:)`` is never cached after it (the read would have missed the revocation).
///
/// Past `limit` entries it starts over empty (entries are cheap to read again).
final class RevocableCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private struct State {
        var entries: [Key: Value] = [:]
        /// Bumped by every invalidation.
        var generation: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// The cached value, and the generation to hand to ``insert(_:for:readAt:)`` after reading it from the store.
    func lookup(_ key: Key) -> (value: Value?, generation: UInt64) {
        state.withLockedValue { ($0.entries[key], $0.generation) }
    }

    /// Caches `value`, read from the store after ``lookup(_:)`` answered `generation`, unless an invalidation came
    /// in between.
    func insert(_ value: Value, for key: Key, readAt generation: UInt64) {
        state.withLockedValue { state in
            guard state.generation == generation else { return }
            if state.entries.count >= limit { state.entries.removeAll(keepingCapacity: true) }
            state.entries[key] = value
        }
    }

    /// Forgets the entries `predicate` picks, and every value being read from the store now.
    func invalidate(where predicate: (Key, Value) -> Bool) {
        state.withLockedValue { state in
            state.generation &+= 1
            state.entries = state.entries.filter { !predicate($0.key, $0.value) }
        }
    }
}
