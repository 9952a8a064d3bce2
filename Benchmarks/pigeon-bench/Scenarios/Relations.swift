import Foundation
import PigeonBenchSupport
import PigeonProtocol

/// What reactions and replies cost a history read (API.md 1.2): two conversations of ``messages`` messages each, one
/// plain, one where every message carries reactions (two users, two keys) and a quarter are replies (quoting an earlier
/// message; every other one of those in a thread). Pages of 50 are read one at a time, alternating between the two,
/// at random places: the p99 of the rich one against the plain one's is the figure (target ≤ 1.5×). Filling the
/// rich one also measures reactions per second (`PUT …/reactions/{key}`, 32 in flight).
struct Relations {
    static let messages = 10_000
    static let reads = 400
    static let pageSize = 50
    static let inFlight = 32

    let api: PigeonAPI
    let namePrefix: String

    func measure() async throws -> RelationsResult {
        let alice = try await api.registerDevice(userId: namePrefix + "-alice", deviceName: "bench")
        let bob = try await api.registerDevice(userId: namePrefix + "-bob", deviceName: "bench")
        let plain = try await api.createConversation(members: [bob.userId], token: alice.token).id
        let rich = try await api.createConversation(members: [bob.userId], token: alice.token).id
        let body = String(repeating: "x", count: 64)

        // Three quarters of the rich one plain at first, the plain one whole.
        let base = Self.messages - Self.messages / 4
        _ = try await concurrently(Self.messages) { _ in
            try await api.send(.benchmark(body: body), conversationId: plain, token: alice.token).serverId
        }
        var ids = try await concurrently(base) { _ in
            try await api.send(.benchmark(body: body), conversationId: rich, token: alice.token).serverId
        }
        try await waitForSeq(rich, base, token: alice.token)
        // The last quarter quotes earlier messages; every other one goes into the thread of a plain message.
        let roots = ids
        ids += try await concurrently(Self.messages - base) { index in
            var request = SendMessageRequest.benchmark(body: body)
            request.replyTo = roots[(index * 7919) % roots.count]
            if index % 2 == 0 { request.threadRoot = roots[(index * 104_729) % roots.count] }
            return try await api.send(request, conversationId: rich, token: bob.token).serverId
        }
        try await waitForSeq(plain, Self.messages, token: alice.token)
        try await waitForSeq(rich, Self.messages, token: alice.token)

        let reactions = ids.count * 2
        let start = ContinuousClock.now
        let allIds = ids
        _ = try await concurrently(reactions) { index in
            let (token, key) = index % 2 == 0 ? (alice.token, "%F0%9F%91%8D") : (bob.token, "party_parrot")
            return try await api.react(conversationId: rich, serverId: allIds[index / 2], encodedKey: key, token: token).serverId
        }
        let reactionSeconds = (ContinuousClock.now - start).seconds

        // Warm both, then alternate single reads at random places.
        let plainReads = LatencyRecorder()
        let richReads = LatencyRecorder()
        var generator = SystemRandomNumberGenerator()
        for round in 0..<(Self.reads + 20) {
            for (conversation, recorder) in [(plain, plainReads), (rich, richReads)] {
                let before = Int.random(in: (Self.pageSize + 1)...(Self.messages + 1), using: &generator)
                let started = ContinuousClock.now
                let page = try await api.history(conversationId: conversation, query: "before=\(before)&limit=\(Self.pageSize)", token: bob.token)
                let took = ContinuousClock.now - started
                guard page.messages.count == Self.pageSize else { throw BenchError.timedOut("a page of \(page.messages.count) messages") }
                if conversation == rich, page.messages.contains(where: { $0.reactions.count != 2 }) {
                    throw BenchError.timedOut("a rich page without its reactions")
                }
                if round >= 20 { recorder.record(took) }
            }
        }
        return RelationsResult(
            messages: Self.messages, pageSize: Self.pageSize, plain: plainReads.summary, rich: richReads.summary, reactions: reactions,
            reactionsPerSecond: Double(reactions) / reactionSeconds)
    }

    /// Runs `body(0..<count)` with ``inFlight`` at a time; answers the results in index order.
    private func concurrently(_ count: Int, _ body: @escaping @Sendable (Int) async throws -> String) async throws -> [String] {
        try await withThrowingTaskGroup(of: (Int, String).self) { group in
            var results = [String](repeating: "", count: count)
            var next = 0
            while next < min(count, Self.inFlight) {
                let index = next
                group.addTask { (index, try await body(index)) }
                next += 1
            }
            while let (index, value) = try await group.next() {
                results[index] = value
                if next < count {
                    let index = next
                    group.addTask { (index, try await body(index)) }
                    next += 1
                }
            }
            return results
        }
    }

    private func waitForSeq(_ conversation: String, _ seq: Int, token: String) async throws {
        let stored = try await waitUntil(.now + .seconds(120), polling: .milliseconds(100)) {
            try await api.conversation(id: conversation, token: token).lastSeq >= Int64(seq)
        }
        guard stored else { throw BenchError.timedOut("conversation \(conversation) did not reach seq \(seq)") }
    }
}

/// The ``Relations`` scenario's figures.
struct RelationsResult: Codable, Sendable {
    var messages: Int
    var pageSize: Int
    var plain: LatencySummary
    var rich: LatencySummary
    var reactions: Int
    var reactionsPerSecond: Double

    var p99Ratio: Double { plain.p99Ms > 0 ? rich.p99Ms / plain.p99Ms : 0 }
    var p50Ratio: Double { plain.p50Ms > 0 ? rich.p50Ms / plain.p50Ms : 0 }

    func printLines() {
        print("  history, plain:             p50 / p99 / max \(Format.percentiles(plain)) (\(Format.count(plain.count)) reads)")
        print("  history, reactions+replies: p50 / p99 / max \(Format.percentiles(rich)) (\(Format.count(rich.count)) reads)")
        print("  ratio:                      p50 \(String(format: "%.2f", p50Ratio))×, p99 \(String(format: "%.2f", p99Ratio))× (target ≤ 1.5×), pages of \(pageSize) in \(Format.count(messages)) messages")
        print("  reactions:                  \(String(format: "%.0f", reactionsPerSecond))/s (\(Format.count(reactions)) PUTs, \(Relations.inFlight) in flight)")
    }
}
