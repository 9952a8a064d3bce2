import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The reliability checklist (ticks online, offline sending, a hundred rapid messages in order, three tries then a
/// retry, a server restart losing nothing), each item against a real in-process server.
@Suite(.timeLimit(.minutes(3)))
struct SeedChecklistTests {
    @Test func onlineSendGoesPendingSentDeliveredRead() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            let sent = try alice.client.send("hello bob", to: conversation)
            #expect(sent.status == .pending)
            #expect(sent.seq == nil && sent.serverId == nil)
            try await alice.waitForStatus(sent.localId, atLeast: .delivered)
            try await waitUntil("bob has the message") { bob.received.contains { $0.clientMessageId == sent.clientMessageId } }
            let onBob = try #require(bob.received.first { $0.clientMessageId == sent.clientMessageId })
            #expect(onBob.body == "hello bob" && !onBob.isOutgoing && onBob.seq == 1)
            #expect(try alice.message(sent.localId).status == .delivered, "not read before bob reads")

            try bob.client.markRead(conversationId: conversation)
            try await alice.waitForStatus(sent.localId, atLeast: .read)
            try await waitUntil("the read event is recorded") { alice.statusHistory(localId: sent.localId).last == .read }
            let history = alice.statusHistory(localId: sent.localId)
            #expect(history.first == .pending)
            #expect(history.contains(.sent), "✓ comes from the accept answer: \(history)")
            #expect(Array(history.suffix(2)) == [.delivered, .read], "\(history)")
            #expect(isMonotonic(history), "\(history)")
            let stored = try alice.message(sent.localId)
            #expect(stored.seq == 1 && stored.serverId != nil && stored.deliveryPath == .direct && stored.recipientsOnline == 1)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func offlineSendWaitsThenGoesOutWhenOnline() async throws {
        try await withKitTestServer { server in
            // Alice's client waits on a manual clock, so "however long it waits offline" is a fact of the test.
            let clock = ManualClock()
            let alice = try await TestDevice.register("alice", on: server.url) { $0.clock = clock }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            let message = try alice.client.send("sent while offline", to: conversation)
            // An hour offline: every ACK timeout and backoff of the default policy many times over. Offline is not a try.
            clock.advance(by: .seconds(3600))
            #expect(try alice.message(message.localId).status == .pending, "no ✓ without the server")
            #expect(try alice.client.unsentMessages().map(\.localId) == [message.localId])

            alice.client.setNetworkEnabled(true)
            try await alice.waitForStatus(message.localId, atLeast: .delivered)
            let history = alice.statusHistory(localId: message.localId)
            #expect(isMonotonic(history) && history.first == .pending && history.contains(.sent), "\(history)")
            #expect(Array(history.prefix(2)) == [.pending, .sending], "nothing happened to it before it went out: \(history)")
            #expect(try alice.client.unsentMessages().isEmpty)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func hundredRapidMessagesAreStoredInOrder() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            let sent = try (0..<100).map { try alice.client.send("rapid \($0)", to: conversation) }
            try await waitUntil("all 100 are stored") { try sent.allSatisfy { try alice.message($0.localId).seq != nil } }
            #expect(try sent.map { try alice.message($0.localId).seq } == (1...100).map { Int64($0) })
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == (0..<100).map { "rapid \($0)" })
            try await waitUntil("bob has all 100") { bob.received.count == 100 }
            #expect(bob.received.map(\.body) == (0..<100).map { "rapid \($0)" }, "announced in order, each once")
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func networkErrorFailsAfterThreeTriesAndRetrySends() async throws {
        try await withKitTestServer { server in
            let proxy = try await FaultProxy.start(upstreamPort: server.port)
            let alice = try await TestDevice.register("alice", on: server.url, connectingThrough: URL(string: "http://127.0.0.1:\(proxy.port)")!) {
                $0.retryPolicy = RetryPolicy(maxAttempts: 3, ackTimeout: .milliseconds(300), baseDelay: .milliseconds(50), maxDelay: .milliseconds(100))
            }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            proxy.setMode(.stall)
            let message = try alice.client.send("into the void", to: conversation)
            try await waitUntil("the message fails", timeout: .seconds(10)) { try alice.message(message.localId).status == .failed }
            let failed = try alice.message(message.localId)
            #expect(failed.failure != nil)
            try await waitUntil("the failure is announced") { alice.statusHistory(localId: message.localId).last == .failed }
            #expect(alice.statusHistory(localId: message.localId) == [.pending, .sending, .failed])

            proxy.setMode(.forward)
            proxy.cutConnections()
            try await alice.waitUntilOnline()
            let retried = try alice.client.retry(localId: message.localId)
            #expect(retried.status == .pending)
            try await alice.waitForStatus(message.localId, atLeast: .stored)
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == ["into the void"], "stored once")
            #expect(throws: PigeonClientError.self) { try alice.client.retry(localId: message.localId) }
            await alice.client.stop()
            await bob.client.stop()
            await proxy.stop()
        }
    }

    @Test func serverRestartLosesNothing() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            var sent = try (0..<30).map { try alice.client.send("before \($0)", to: conversation) }
            try await waitUntil("some are accepted") { try sent.contains { try alice.message($0.localId).status >= .sent } }
            await server.stop()
            sent += try (0..<20).map { try alice.client.send("during \($0)", to: conversation) }
            try await server.start()
            sent += try (0..<10).map { try alice.client.send("after \($0)", to: conversation) }

            try await waitUntil("all 60 are stored", timeout: .seconds(30)) { try sent.allSatisfy { try alice.message($0.localId).seq != nil } }
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == sent.map(\.body), "each once, in sending order")
            #expect(history.map(\.seq) == (1...60).map { Int64($0) })
            try await waitUntil("bob has all 60", timeout: .seconds(30)) { bob.received.count >= 60 }
            #expect(bob.received.map(\.body) == sent.map(\.body))
            await alice.client.stop()
            await bob.client.stop()
        }
    }
}
