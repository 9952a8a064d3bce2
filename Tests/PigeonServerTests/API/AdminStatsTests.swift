import Crypto
import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// Issue 17, part 3, "The operator's page": `GET /v1/admin/stats`, `GET /v1/admin/conversations/{id}` and the page
/// `GET /admin`, all behind (or, for the page, only with) the admin token. Runs on every backend.
@Suite struct AdminStatsTests {
    static let token = "operator-secret"

    static func withAdminServer<T: Sendable>(
        configure: @escaping (inout ServerConfiguration) -> Void = { _ in }, _ body: @Sendable (PigeonTestClient) async throws -> T
    ) async throws -> T {
        try await withTestServer(configure: { configuration in
            configuration.adminToken = token
            configure(&configuration)
        }, body)
    }

    static func stats(_ client: PigeonTestClient, query: String = "") async throws -> AdminStats {
        let answer = try await client.request(.GET, "/v1/admin/stats" + query, token: token)
        guard answer.status == 200 else { throw TestFailure("stats: \(answer.status) \(answer.text)") }
        return try answer.decode(AdminStats.self)
    }

    static func delivery(_ client: PigeonTestClient, _ conversationId: String) async throws -> ConversationDelivery {
        let answer = try await client.request(.GET, "/v1/admin/conversations/\(conversationId)", token: token)
        guard answer.status == 200 else { throw TestFailure("conversation: \(answer.status) \(answer.text)") }
        return try answer.decode(ConversationDelivery.self)
    }

    /// Polls the stats until `condition` holds (or `timeout`); answers the last ones read.
    static func waitForStats(
        _ client: PigeonTestClient, timeout: Duration = .seconds(10), until condition: (AdminStats) -> Bool
    ) async throws -> AdminStats {
        let deadline = ContinuousClock.now + timeout
        while true {
            let stats = try await stats(client)
            if condition(stats) || ContinuousClock.now > deadline { return stats }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    // MARK: Access

    @Test func withoutAnAdminTokenNeitherTheRoutesNorThePageExist() async throws {
        try await withTestServer { client in
            expectError(try await client.request(.GET, "/v1/admin/stats", token: "anything"), 404, .notFound)
            expectError(try await client.request(.GET, "/v1/admin/conversations/\(newId())", token: "anything"), 404, .notFound)
            expectError(try await client.request(.GET, "/admin"), 404, .notFound)
        }
    }

    @Test func theRoutesRefuseAMissingOrWrongToken() async throws {
        try await Self.withAdminServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            for path in ["/v1/admin/stats", "/v1/admin/conversations/\(conversation.id)"] {
                expectError(try await client.request(.GET, path), 401, .unauthorized, path)
                expectError(try await client.request(.GET, path, token: "wrong"), 401, .unauthorized, path)
                expectError(try await client.request(.GET, path, token: Self.token + "x"), 401, .unauthorized, path)
                // A device's token is not the operator's.
                expectError(try await client.request(.GET, path, token: alice.token), 401, .unauthorized, path)
            }
        }
    }

    // MARK: Stats

    @Test func theCountsRiseWithSendsStoresAndDeliveries() async throws {
        try await Self.withAdminServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let before = try await Self.stats(client)
            // This node is listed (embedded: alone; production: from the backends' heartbeats, every 1–2 s).
            let me = try #require(before.nodes.first { $0.thisNode })
            #expect(me.nodeId == before.nodeId)
            #expect(before.nodes.filter(\.thisNode).count == 1)
            #expect(abs(before.serverTime - me.lastHeartbeatAt) < 15_000)
            if TestBackend.current == .embedded { #expect(before.nodes.count == 1) }
            #expect(before.startedAt <= before.serverTime)
            #expect(abs(before.serverTime - nowMillis()) < 5_000)

            for index in 0..<20 { try await client.sendAccepted(alice, to: conversation.id, body: "m\(index)") }
            #expect(try await client.send(alice, to: conversation.id, body: "x", type: "BAD").status == 400)
            _ = try await client.waitForCount(bob, conversation.id, 20)
            let stored = try await Self.waitForStats(client) { $0.totals.stored >= before.totals.stored + 20 }
            #expect(stored.totals.accepted == before.totals.accepted + 20)
            #expect(stored.totals.stored == before.totals.stored + 20)
            #expect(stored.totals.rejected == before.totals.rejected + 1)
            #expect(stored.totals.delivered == before.totals.delivered)
            #expect(stored.latency.acceptToStored.count >= 20)
            let quantiles = stored.latency.acceptToStored
            #expect(quantiles.p50 != nil && quantiles.p90 != nil && quantiles.p99 != nil)
            if let p50 = quantiles.p50, let p90 = quantiles.p90, let p99 = quantiles.p99 { #expect(0 <= p50 && p50 <= p90 && p90 <= p99) }
            #expect(stored.latency.storedToDelivered.count == 0)
            #expect(stored.latency.storedToDelivered.p50 == nil)

            // Bob's device got them: its delivered receipt moves his watermark onto alice's message.
            #expect(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 20).status == 200)
            let delivered = try await Self.stats(client)
            #expect(delivered.totals.delivered == before.totals.delivered + 1)
            #expect(delivered.latency.storedToDelivered.count == 1)
            #expect(delivered.latency.storedToDelivered.p99 != nil)
            // A repeated receipt moves nothing and counts nothing.
            #expect(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 20).status == 200)
            #expect(try await Self.stats(client).totals.delivered == delivered.totals.delivered)

            // The per-second samples show the burst within a couple of ticks.
            let sampled = try await Self.waitForStats(client) { stats in
                stats.samples.reduce(0) { $0 + $1.stored } > 0 && stats.samples.reduce(0) { $0 + $1.delivered } > 0
            }
            #expect(sampled.samples.contains { $0.accepted > 0 && $0.stored > 0 }, "\(sampled.samples)")
            #expect(sampled.samples.contains { $0.delivered > 0 }, "\(sampled.samples)")
            #expect(zip(sampled.samples, sampled.samples.dropFirst()).allSatisfy { $0.at < $1.at })
            // `since` answers only the newer samples.
            if let last = sampled.samples.last {
                let newer = try await Self.stats(client, query: "?since=\(last.at)")
                #expect(newer.samples.allSatisfy { $0.at > last.at })
                #expect(newer.totals.stored == sampled.totals.stored)
            }
        }
    }

    @Test func theRatesAreAboveZeroDuringABurst() async throws {
        try await Self.withAdminServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sending = NIOLockedValueBox(true)
            let sender = Task {
                var sent = 0
                while sending.withLockedValue({ $0 }) {
                    try await client.sendAccepted(alice, to: conversation.id, body: "burst \(sent)")
                    sent += 1
                }
                return sent
            }
            let during = try await Self.waitForStats(client) { $0.rates.accepted > 0 && $0.rates.stored > 0 }
            sending.withLockedValue { $0 = false }
            let sent = try await sender.value
            #expect(during.rates.accepted > 0, "\(during.rates)")
            #expect(during.rates.stored > 0, "\(during.rates)")
            #expect(during.samples.last.map { $0.accepted == during.rates.accepted && $0.stored == during.rates.stored } == true)
            // A rate is per second of the tick: never more than was sent.
            #expect(during.samples.allSatisfy { $0.accepted <= Double(sent) * 1.5 })
            // Once the burst is over, the rates fall back to zero and the buffer empties. The Redis buffer's depth is an
            // estimate between its heartbeats (an append answered while XLEN runs can count twice until the next one),
            // so the depth is waited for too, not read at the first quiet tick.
            let after = try await Self.waitForStats(client) { $0.rates.accepted == 0 && $0.rates.stored == 0 && $0.bufferDepth == 0 }
            #expect(after.rates.accepted == 0)
            #expect(after.totals.accepted == sent)
            #expect(after.bufferDepth == 0)
        }
    }

    @Test func openStreamsAreCountedPerTransport() async throws {
        try await Self.withAdminServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let initial = try await Self.stats(client)
            #expect(initial.openStreams == OpenStreams(["ws": 0, "sse": 0]))

            let socket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            let sse = try await TestSSE.open(port: client.port, token: alice.token)
            let open = try await Self.waitForStats(client) { $0.openStreams.websocket == 1 && $0.openStreams.sse == 1 }
            #expect(open.openStreams.websocket == 1)
            #expect(open.openStreams.sse == 1)
            let sampled = try await Self.waitForStats(client) { $0.samples.last?.openStreams == OpenStreams(["ws": 1, "sse": 1]) }
            #expect(sampled.samples.last?.openStreams.websocket == 1)
            #expect(sampled.samples.last?.openStreams.sse == 1)

            await socket.close()
            await sse.close()
            let closed = try await Self.waitForStats(client) { $0.openStreams.websocket == 0 && $0.openStreams.sse == 0 }
            #expect(closed.openStreams == OpenStreams(["ws": 0, "sse": 0]))
        }
    }

    @Test func deadLettersAreCountedAndDepthIsTheBuffersOwn() async throws {
        struct InjectedStoreError: Error {}
        try await Self.withAdminServer(configure: { configuration in
            configuration.retryBaseDelay = .milliseconds(10)
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = { message in if message.body == "fragile" { throw InjectedStoreError() } }
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let before = try await Self.stats(client)
            #expect(before.deadLetters == 0)
            try await client.sendAccepted(alice, to: conversation.id, body: "fragile")
            // The buffer acknowledges the entry once the dead letter is written: its depth falls a moment later.
            let after = try await Self.waitForStats(client) {
                $0.deadLetters == 1 && $0.totals.deadLettered == before.totals.deadLettered + 1 && $0.bufferDepth == 0
            }
            #expect(after.deadLetters == 1)
            #expect(after.totals.deadLettered == before.totals.deadLettered + 1)
            #expect(after.totals.retried == before.totals.retried + 2)
            #expect(after.totals.stored == before.totals.stored)
            #expect(after.bufferDepth == 0)
        }
    }

    @Test func badQueriesAreRefusedAndChangeNothing() async throws {
        try await Self.withAdminServer { client in
            for query in ["?since=-1", "?since=abc", "?since=1.5", "?since="] {
                expectError(try await client.request(.GET, "/v1/admin/stats" + query, token: Self.token), 400, .invalidRequest, query)
            }
        }
    }

    // MARK: Conversation

    @Test func theConversationShowsWatermarksMovingAndWhoIsBehind() async throws {
        try await Self.withAdminServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob", deviceName: "bob's phone")
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob", "carol"], name: "ops")
            for index in 1...3 { try await client.sendAccepted(alice, to: conversation.id, body: "\(index)") }
            _ = try await client.waitForCount(alice, conversation.id, 3)

            let socket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            var state = try await Self.delivery(client, conversation.id)
            #expect(state.conversationId == conversation.id)
            #expect(state.kind == .group)
            #expect(state.name == "ops")
            #expect(state.lastSeq == 3)
            #expect(state.members.map(\.userId) == ["alice", "bob", "carol"])
            #expect(state.members.map(\.role) == [.owner, .member, .member])
            #expect(state.members.allSatisfy { $0.joinedSeq == 0 && $0.deliveredSeq == 0 && $0.readSeq == 0 })
            #expect(state.members.allSatisfy { $0.behind && $0.undelivered == 3 })
            #expect(state.behind == ["alice", "bob", "carol"])
            let bobDevices = state.members.first { $0.userId == "bob" }?.devices ?? []
            #expect(bobDevices.map(\.deviceId) == [bob.deviceId])
            #expect(bobDevices.first?.name == "bob's phone")
            #expect(bobDevices.first?.online == true)
            #expect(state.members.first { $0.userId == "carol" }?.devices.map(\.online) == [false])
            #expect(state.members.first { $0.userId == "carol" }?.devices.map(\.deviceId) == [carol.deviceId])

            // Bob's delivered receipt moves his watermark; read moves both for alice; carol stays behind.
            #expect(try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 3).status == 200)
            #expect(try await client.receipt(alice, conversation.id, kind: .read, upToSeq: 3).status == 200)
            state = try await Self.delivery(client, conversation.id)
            let members = Dictionary(uniqueKeysWithValues: state.members.map { ($0.userId, $0) })
            #expect(members["bob"]?.deliveredSeq == 3)
            #expect(members["bob"]?.readSeq == 0)
            #expect(members["bob"]?.behind == false)
            #expect(members["alice"]?.deliveredSeq == 3)
            #expect(members["alice"]?.readSeq == 3)
            #expect(members["carol"]?.deliveredSeq == 0)
            #expect(members["carol"]?.undelivered == 3)
            #expect(state.behind == ["carol"])

            // A new message puts everyone below the new last seq again.
            try await client.sendAccepted(carol, to: conversation.id, body: "4")
            _ = try await client.waitForCount(alice, conversation.id, 4)
            state = try await Self.delivery(client, conversation.id)
            #expect(state.lastSeq == 4)
            #expect(state.behind == ["alice", "bob", "carol"])
            #expect(state.members.first { $0.userId == "bob" }?.undelivered == 1)

            // The server notices the close asynchronously (the client's close handshake, then the session's end).
            await socket.close()
            try await waitUntil("bob's device shows offline once its stream closed", timeout: .seconds(10), every: .milliseconds(50)) {
                try await Self.delivery(client, conversation.id).members.first { $0.userId == "bob" }?.devices.first?.online == false
            }
        }
    }

    @Test func badAndUnknownConversationIdsAre400And404AndChangeNothing() async throws {
        try await Self.withAdminServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            try await client.sendAccepted(alice, to: conversation.id, body: "one")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            // The node counts a message stored once its write returned, a moment after history shows it.
            let statsBefore = try await Self.waitForStats(client) { $0.totals.stored == 1 }
            let before = try await Self.delivery(client, conversation.id)

            for bad in ["abc", "1", "not-a-uuid-at-all-not-a-uuid-at-all", "%00", String(repeating: "a", count: 300)] {
                expectError(
                    try await client.request(.GET, "/v1/admin/conversations/\(bad)", token: Self.token), 400, .invalidRequest, bad)
            }
            expectError(try await client.request(.GET, "/v1/admin/conversations/\(newId())", token: Self.token), 404, .notFound)
            // The other methods of the path are not routes.
            #expect(try await client.request(.POST, "/v1/admin/conversations/\(conversation.id)", token: Self.token).status == 405)
            #expect(try await client.request(.DELETE, "/v1/admin/stats", token: Self.token).status == 405)

            let after = try await Self.delivery(client, conversation.id)
            #expect(after.lastSeq == before.lastSeq)
            #expect(after.members.map(\.deliveredSeq) == before.members.map(\.deliveredSeq))
            let statsAfter = try await Self.stats(client)
            #expect(statsAfter.totals.accepted == statsBefore.totals.accepted)
            #expect(statsAfter.totals.stored == statsBefore.totals.stored)
            #expect(try await client.allMessages(alice, conversation.id).count == 1)
        }
    }

    // MARK: The page

    @Test func thePageIsOneSelfContainedDocumentWithStrictHeaders() async throws {
        try await Self.withAdminServer { client in
            let answer = try await client.request(.GET, "/admin")
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"] == "text/html; charset=utf-8")
            #expect(answer.headers["x-frame-options"] == "DENY")
            #expect(answer.headers["cache-control"] == "no-store")
            #expect(answer.headers["referrer-policy"] == "no-referrer")
            #expect(answer.headers["x-content-type-options"] == "nosniff")
            let policy = Dictionary(
                uniqueKeysWithValues: (answer.headers["content-security-policy"] ?? "").split(separator: ";").map { directive in
                    let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1).map(String.init)
                    return (parts[0], parts.count > 1 ? parts[1] : "")
                })
            #expect(policy["default-src"] == "'none'")
            #expect(policy["connect-src"] == "'self'")
            #expect(policy["frame-ancestors"] == "'none'")
            #expect(policy["base-uri"] == "'none'")

            // The CSP allows exactly the page's one inline script and one inline style, by hash.
            let html = answer.text
            func inline(_ tag: String) -> [String] {
                html.components(separatedBy: "<\(tag)>").dropFirst().compactMap { $0.components(separatedBy: "</\(tag)>").first }
            }
            func hash(_ text: String) -> String { "'sha256-" + Data(SHA256.hash(data: Data(text.utf8))).base64EncodedString() + "'" }
            #expect(inline("script").count == 1)
            #expect(inline("style").count == 1)
            #expect(policy["script-src"] == inline("script").first.map(hash))
            #expect(policy["style-src"] == inline("style").first.map(hash))
            #expect(!policy["script-src", default: ""].contains("unsafe"))

            // Nothing is loaded from elsewhere and no element carries inline style or handlers the CSP would block.
            #expect(!html.contains("<script src"))
            #expect(!html.contains("<link"))
            #expect(!html.contains("style=\""))
            #expect(!html.contains("onclick="))
            #expect(html.components(separatedBy: "http").count - 1 == html.components(separatedBy: "http://www.w3.org/2000/svg").count - 1)
            for id in ["token-form", "rate-accepted", "rate-stored", "rate-delivered", "buffer-depth", "streams-websocket", "streams-sse", "nodes", "dead-letters", "conversation-form"] {
                #expect(html.contains("id=\"\(id)\""), "\(id)")
            }
            // Other methods are not routes.
            #expect(try await client.request(.POST, "/admin").status == 405)
        }
    }

    // MARK: Latency buckets

    @Test func latencyBucketsHoldEveryValueWithinAnEighth() {
        var previousBucket = -1
        for value in Int64(0)...200_000 {
            let bucket = LatencyHistogram.bucket(of: value)
            #expect(bucket == previousBucket || bucket == previousBucket + 1, "\(value)")
            previousBucket = bucket
            let upper = LatencyHistogram.upperBound(of: bucket)
            guard value <= upper, bucket == 0 || value > LatencyHistogram.upperBound(of: bucket - 1) else {
                Issue.record("\(value) in bucket \(bucket) up to \(upper)")
                return
            }
            #expect(Double(upper - value) <= Double(value) / 8 + 1, "\(value) → \(upper)")
        }
        #expect(LatencyHistogram.bucket(of: -5) == 0)
        #expect(LatencyHistogram.bucket(of: Int64.max) == LatencyHistogram.bucketCount - 1)

        var counts = [Int](repeating: 0, count: LatencyHistogram.bucketCount)
        #expect(LatencyHistogram.quantile(0.5, of: counts) == nil)
        // 90 measurements of 3 ms, 9 of 100 ms, 1 of 2,000 ms.
        counts[LatencyHistogram.bucket(of: 3)] += 90
        counts[LatencyHistogram.bucket(of: 100)] += 9
        counts[LatencyHistogram.bucket(of: 2_000)] += 1
        #expect(LatencyHistogram.quantile(0.5, of: counts) == 3)
        #expect(LatencyHistogram.quantile(0.9, of: counts) == 3)
        #expect(LatencyHistogram.quantile(0.99, of: counts) == LatencyHistogram.upperBound(of: LatencyHistogram.bucket(of: 100)))
        #expect(LatencyHistogram.quantile(1, of: counts) == LatencyHistogram.upperBound(of: LatencyHistogram.bucket(of: 2_000)))
    }
}
