import PigeonDomain
@testable import PigeonServer
import Testing

/// ``MembersCache``: a read that raced a change never puts the old list back, and the cache stays within its limit.
@Suite struct MembersCacheTests {
    @Test func aReadThatStartedBeforeAChangeDoesNotStoreItsList() {
        let cache = MembersCache()
        let generation = cache.generation(of: "c")
        cache.changed("c", members: ["alice", "bob"])
        cache.store(["alice"], for: "c", ifGeneration: generation)
        #expect(cache["c"] == ["alice", "bob"])
        cache.changed("c", members: nil)
        #expect(cache["c"] == nil)
        let now = cache.generation(of: "c")
        cache.store(["alice", "carol"], for: "c", ifGeneration: now)
        #expect(cache["c"] == ["alice", "carol"])
    }

    @Test func theCacheStartsOverAtItsLimitAndAnEarlierReadStillCannotStore() {
        let cache = MembersCache(limit: 3)
        let early = cache.generation(of: "x")
        for index in 0..<3 { cache.changed("c\(index)", members: ["u"]) }
        // The fourth change starts over: the lists and the recorded changes are forgotten.
        cache.changed("c3", members: ["u"])
        #expect(cache["c0"] == nil && cache["c3"] == ["u"])
        // A read of a conversation never changed, started before the start-over, cannot store its list.
        cache.store(["stale"], for: "x", ifGeneration: early)
        #expect(cache["x"] == nil)
        cache.store(["fresh"], for: "x", ifGeneration: cache.generation(of: "x"))
        #expect(cache["x"] == ["fresh"])
    }
}
