import Foundation
import NIOConcurrencyHelpers
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The SDK's integration tests against a real server: offline sending, ACK timeouts and retries, and the gap case
/// (a message beyond a gap is fetched at once, announced in order, never dropped).
@Suite(.timeLimit(.minutes(4)))
struct SyncTests {
    @Test func fiveMessagesSentOfflineArriveInOrder() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            alice.client.setNetworkEnabled(false)
            let sent = try (1...5).map { try alice.client.send("offline \($0)", to: conversation) }
            #expect(try alice.client.messages(in: conversation).messages.map(\.body) == sent.map(\.body), "shown at once, in order")
            alice.client.setNetworkEnabled(true)
            try await waitUntil("bob has five") { bob.received.count == 5 }
            #expect(bob.received.map(\.body) == sent.map(\.body))
            #expect(bob.received.map(\.seq) == [1, 2, 3, 4, 5])
            for message in sent { try await alice.waitForStatus(message.localId, atLeast: .delivered) }
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func twoDevicesOfOneUserStayInSync() async throws {
        try await withKitTestServer { server in
            let phone = try await TestDevice.register("alice", on: server.url)
            let laptop = try await TestDevice.register("alice", on: server.url, existing: phone)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(phone, laptop, bob)
            let conversation = try await makeConversation([phone, laptop, bob])

            let fromPhone = try phone.client.send("sent on the phone", to: conversation)
            try await waitUntil("the laptop shows it as alice's own") {
                laptop.received.contains { $0.clientMessageId == fromPhone.clientMessageId && $0.isOutgoing }
            }
            try bob.client.send("hi alice", to: conversation)
            try await waitUntil("both devices have bob's message") {
                phone.received.contains { $0.body == "hi alice" } && laptop.received.contains { $0.body == "hi alice" }
            }
            #expect(try laptop.client.conversation(id: conversation)?.unreadCount == 1)
            try phone.client.markRead(conversationId: conversation)
            try await waitUntil("reading on the phone clears the laptop's unread count") {
                try laptop.client.conversation(id: conversation)?.unreadCount == 0
            }
            try bob.client.markRead(conversationId: conversation)
            try await phone.waitForStatus(fromPhone.localId, atLeast: .read)
            try await waitUntil("the laptop sees the phone's message read") {
                try laptop.allMessages(in: conversation).first { $0.clientMessageId == fromPhone.clientMessageId }?.status == .read
            }
            for device in [phone, laptop, bob] { await device.client.stop() }
        }
    }

    @Test func fiftyFlapsThroughAFaultyNetworkLoseNothingAndDuplicateNothing() async throws {
        try await withKitTestServer { server in
            let aliceProxy = try await FaultProxy.start(upstreamPort: server.port)
            let bobProxy = try await FaultProxy.start(upstreamPort: server.port)
            let alice = try await TestDevice.register("alice", on: server.url, connectingThrough: URL(string: "http://127.0.0.1:\(aliceProxy.port)")!)
            let bob = try await TestDevice.register("bob", on: server.url, connectingThrough: URL(string: "http://127.0.0.1:\(bobProxy.port)")!)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            let total = 300
            let flapper = Task {
                var flaps = 0
                while flaps < 60 {
                    let proxy = flaps.isMultiple(of: 2) ? aliceProxy : bobProxy
                    // Each flap cuts a live connection: wait for the client to be back first.
                    try await waitUntil("a client reconnected through its proxy", timeout: .seconds(15), every: .milliseconds(5)) {
                        proxy.openConnections > 0
                    }
                    try await Task.sleep(for: .milliseconds(Int.random(in: 5...40)))
                    if flaps.isMultiple(of: 5) {
                        proxy.setMode(.refuse)
                        try await Task.sleep(for: .milliseconds(Int.random(in: 20...80)))
                        proxy.setMode(.forward)
                    } else {
                        proxy.cutConnections()
                    }
                    flaps += 1
                }
                return flaps
            }
            var sent: [PigeonMessage] = []
            for index in 0..<total {
                sent.append(try alice.client.send("flap \(index)", to: conversation))
                if index.isMultiple(of: 10) { try await Task.sleep(for: .milliseconds(Int.random(in: 5...30))) }
            }
            let flaps = try await flapper.value
            #expect(flaps >= 50)
            #expect(aliceProxy.acceptedConnections + bobProxy.acceptedConnections >= 60, "the clients reconnected through every flap")

            try await waitUntil("every message is stored", timeout: .seconds(60)) {
                try sent.allSatisfy { try alice.message($0.localId).seq != nil }
            }
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == sent.map(\.body), "stored once each, in sending order")
            try await waitUntil("bob has every message", timeout: .seconds(60)) { try bob.allMessages(in: conversation).count == total }
            #expect(try bob.allMessages(in: conversation).map(\.body) == sent.map(\.body))
            #expect(bob.received.map(\.body) == sent.map(\.body), "announced once each, in order")
            for message in sent {
                let statuses = alice.statusHistory(localId: message.localId)
                #expect(isMonotonic(statuses), "\(message.body): \(statuses)")
            }
            await alice.client.stop()
            await bob.client.stop()
            await aliceProxy.stop()
            await bobProxy.stop()
        }
    }

    @Test func aSocketWriteIsNotSuccessADroppedAckIsResentAfterTheTimeout() async throws {
        try await withKitTestServer { server in
            // Alice's client waits on a manual clock: her ACK deadline passes when the test says so, not after a sleep.
            let clock = ManualClock()
            let policy = RetryPolicy(maxAttempts: 3, ackTimeout: .milliseconds(800), baseDelay: .milliseconds(50), maxDelay: .milliseconds(100))
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) {
                $0.retryPolicy = policy
                $0.clock = clock
                $0.jitter = { 0 }
            }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            let droppedAcks = NIOLockedValueBox(0)
            faulty.setFrameFilter { frame in
                // Drop the first ack and the stored event that would also prove acceptance, and bob's receipt: a
                // receipt of a seq alice lacks makes her fill the gap from history, where she finds the message stored.
                switch frame {
                case .ack:
                    return droppedAcks.withLockedValue { dropped in
                        dropped += 1
                        return dropped > 1
                    }
                case .event(.messageStored), .event(.receipt):
                    return droppedAcks.withLockedValue { $0 } > 1
                default:
                    return true
                }
            }
            // When each send left, on alice's clock.
            let sendTimes = NIOLockedValueBox<[ManualClock.Instant]>([])
            faulty.setOperationObserver { operation in
                if case .send = operation { sendTimes.withLockedValue { $0.append(clock.now) } }
            }
            let sends = { sendTimes.withLockedValue { $0 }.count }
            // No history page may bring the evidence either until the resend: a catch-up still in flight from the
            // conversation's creation read the stored message on a loaded machine, and the ✓ came without a resend.
            faulty.failNextFetches(.max)
            let message = try alice.client.send("ack lost", to: conversation)
            // The server's answer came back and was dropped: nothing but a resend can bring a ✓ now.
            try await waitUntil("the first ack arrived and was dropped") { droppedAcks.withLockedValue { $0 } == 1 }
            #expect(try alice.message(message.localId).status == .sending, "written to the socket, but no ✓ without the ack")
            #expect(try alice.client.unsentMessages().map(\.localId) == [message.localId], "still in the outbox")
            #expect(sends() == 1)
            // At the ACK deadline the try counts; the resend follows its backoff (25 ms without jitter).
            try await clock.advance(by: .milliseconds(5), until: "the resent message is stored") {
                if sends() >= 2 { faulty.failNextFetches(0) }
                let status = try alice.message(message.localId).status
                return status != .failed && status >= .stored
            }
            let times = sendTimes.withLockedValue { $0 }
            try #require(times.count == 2, "resent once: \(times)")
            let earliestResend = times[0].advanced(by: policy.ackTimeout + policy.delay(afterAttempt: 1, jitter: 0))
            #expect(times[1] >= earliestResend, "resent after the ACK timeout and its backoff, not before: \(times)")
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == ["ack lost"], "the server de-duplicated the resend")
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func reconnectResendsInFlightMessagesAtOnce() async throws {
        try await withKitTestServer { server in
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) {
                $0.retryPolicy = RetryPolicy(maxAttempts: 3, ackTimeout: .seconds(60), baseDelay: .milliseconds(50), maxDelay: .milliseconds(100))
            }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            faulty.setFrameFilter { frame in
                if case .ack = frame { return false }
                if case .event(.messageStored) = frame { return false }
                return true
            }
            let message = try alice.client.send("in flight at the drop", to: conversation)
            try await waitUntil("the message is on the wire") { try alice.message(message.localId).status == .sending }
            faulty.setFrameFilter { _ in true }
            faulty.dropConnection()
            try await alice.waitForStatus(message.localId, atLeast: .stored, timeout: .seconds(10))
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == ["in flight at the drop"])
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func aGapIsFetchedAtOnceAndAnnouncedInOrderAndNothingIsDropped() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            // Bob's client waits on a manual clock: its fetch retries and every timeout happen when the test moves it.
            let clock = ManualClock()
            let (bob, faulty) = try await TestDevice.registerFaulty("bob", on: server.url) {
                $0.catchUpInterval = .seconds(3600)
                $0.clock = clock
            }
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])

            // 3 and 4 are withheld from bob's stream; the first two fetches of the gap fail as well.
            faulty.setFrameFilter { frame in
                if case .event(.messageNew(_, let message)) = frame { return message.seq != 3 && message.seq != 4 }
                return true
            }
            faulty.failNextFetches(2)
            var sent: [PigeonMessage] = []
            for index in 1...6 {
                sent.append(try alice.client.send("m\(index)", to: conversation))
                try await alice.waitForStatus(sent[index - 1].localId, atLeast: .stored)
            }
            // A failed fetch is retried after a backoff on bob's clock.
            try await clock.advance(by: .milliseconds(10), until: "bob has all six", timeout: .seconds(20)) { bob.received.count == 6 }
            #expect(bob.received.map(\.seq) == [1, 2, 3, 4, 5, 6], "announced in seq order")
            #expect(faulty.fetches >= 3, "the gap was fetched (and the failed fetches retried)")
            // Two hours pass for bob's client: every timer it has fires, the hourly catch-up included.
            let listings = faulty.conversationListings
            clock.advance(by: .seconds(7200))
            try await waitUntil("the periodic catch-up ran") { faulty.conversationListings > listings }
            // Bob's receipts wait out their delay on his clock too.
            try await clock.advance(by: .milliseconds(10), until: "bob's delivered watermark covers all six") {
                try alice.message(sent[5].localId).status == .delivered
            }
            #expect(try bob.allMessages(in: conversation).map(\.body) == ["m1", "m2", "m3", "m4", "m5", "m6"], "nothing dropped after any timeout")
            #expect(bob.received.count == 6, "nothing announced twice")
            await alice.client.stop()
            await bob.client.stop()
        }
    }
}
