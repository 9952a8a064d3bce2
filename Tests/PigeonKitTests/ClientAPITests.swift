import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The public API's local side (validation, paging, search), the delivery path, refusals and the SSE fallback.
@Suite(.timeLimit(.minutes(3)))
struct ClientAPITests {
    @Test func badInputIsRefusedLocallyAndChangesNothing() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let conversation = try await alice.client.createConversation(members: ["bob"])
            func refused(_ body: () throws -> Void) -> Bool {
                do {
                    try body()
                    return false
                } catch let error as PigeonClientError {
                    return error.code == .invalidArgument || error.code == .unknownConversation
                } catch {
                    return false
                }
            }
            #expect(refused { try alice.client.send("x", type: "Bad Type", to: conversation.id) })
            #expect(refused { try alice.client.send("{}", type: "pigeon.members", to: conversation.id) }, "the server's own type")
            #expect(refused { try alice.client.send("", to: conversation.id) })
            #expect(refused { try alice.client.send("nul \u{0} inside", to: conversation.id) })
            #expect(refused { try alice.client.send(String(repeating: "a", count: 65_537), to: conversation.id) })
            #expect(refused { try alice.client.send("x", to: "not-a-uuid") })
            #expect(refused { try alice.client.send("x", to: UUID().uuidString) })
            #expect(try alice.client.messages(in: conversation.id).messages.isEmpty)
            #expect(try alice.client.unsentMessages().isEmpty)
            await #expect(throws: PigeonClientError.self) { _ = try await alice.client.createConversation(members: ["no spaces allowed"]) }
            await #expect(throws: PigeonClientError.self) { _ = try await PigeonClient.registerDevice(serverURL: server.url, userId: "") }
        }
    }

    /// AsyncHTTPClient retried a refused connection until the request's deadline: `registerDevice` against a server
    /// that is down took its whole timeout (15 s in `pigeon login`) to say "connection refused".
    @Test func aServerThatIsDownIsReportedAtOnceNotAtTheTimeout() async throws {
        let url = URL(string: "http://127.0.0.1:\(try freePort())")!
        let started = ContinuousClock.now
        let error = await #expect(throws: PigeonClientError.self) {
            _ = try await PigeonClient.registerDevice(serverURL: url, userId: "alice", timeout: .seconds(120))
        }
        #expect(error?.code == .network)
        #expect(ContinuousClock.now - started < .seconds(60), "it waited for the timeout")
    }

    /// API.md 1.1: the kind of a conversation and its members' roles and join seqs reach the local database as the
    /// server reports them, at creation and on another member's device through the stream.
    @Test func aConversationsKindAndRolesAreKeptLocally() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let direct = try await alice.client.createConversation(members: ["bob"])
            let group = try await alice.client.createConversation(members: ["bob", "carol"], name: "trip")
            #expect(direct.kind == .direct)
            #expect(group.kind == .group)
            #expect(group.members.map(\.role) == [.owner, .member, .member], "alice (the creator), bob, carol")
            #expect(group.members.allSatisfy { $0.joinedSeq == 0 })
            try await waitUntil("bob's device has both") { try bob.client.conversations().count == 2 }
            #expect(try bob.client.conversation(id: direct.id)?.kind == .direct)
            #expect(try bob.client.conversation(id: group.id)?.members.first { $0.userId == "alice" }?.role == .owner)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func syncReturnsOnceTheOutboxIsFlushedAndTheReceiptsAreConfirmed() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            let conversation = try await alice.client.createConversation(members: ["bob"])
            await #expect(throws: PigeonClientError.self) { try await alice.client.sync(timeout: .seconds(1)) }
            let sent = try (1...3).map { try alice.client.send("queued \($0)", to: conversation.id) }

            alice.client.start()
            let report = try await alice.client.sync(timeout: .seconds(20))
            #expect(report.failed.isEmpty)
            #expect(try alice.client.unsentMessages().isEmpty)
            #expect(try sent.allSatisfy { try alice.client.message(localId: $0.localId)!.status >= .sent })

            bob.client.start()
            try await bob.client.sync(timeout: .seconds(20))
            // On return bob has every message and the server has his delivered receipt: alice's ✓✓ follows.
            #expect(try bob.client.messages(in: conversation.id).messages.map(\.body) == ["queued 1", "queued 2", "queued 3"])
            try await waitUntil("alice sees ✓✓") {
                try sent.allSatisfy { try alice.client.message(localId: $0.localId)!.status == .delivered }
            }
            await bob.client.stop()
            bob.client.setNetworkEnabled(false)
            let offline = try alice.client.send("bob is away", to: conversation.id)
            try await alice.client.sync(timeout: .seconds(20))
            #expect(try [.sent, .stored].contains(alice.client.message(localId: offline.localId)!.status), "✓, not ✓✓: bob is away")

            alice.client.setNetworkEnabled(false)
            let error = await #expect(throws: PigeonClientError.self) { try await alice.client.sync(timeout: .milliseconds(300)) }
            #expect(error?.code == .timeout)
            #expect(error?.message.contains("the network is switched off") == true)
            await alice.client.stop()
        }
    }

    @Test func aMessageTheServerRefusesFailsAtOnce() async throws {
        try await withKitTestServer(configure: { $0.maxBodyBytes = 2_000 }) { server in
            let alice = try await TestDevice.register("alice", on: server.url) {
                $0.retryPolicy = RetryPolicy(maxAttempts: 3, ackTimeout: .seconds(30), baseDelay: .seconds(30), maxDelay: .seconds(30))
            }
            let bob = try await TestDevice.register("bob", on: server.url)
            alice.client.start()
            try await alice.waitUntilOnline()
            let conversation = try await makeConversation([alice, bob])
            let tooLarge = try alice.client.send(String(repeating: "x", count: 5_000), to: conversation)
            let fine = try alice.client.send("small", to: conversation)
            try await waitUntil("the large one fails", timeout: .seconds(5)) { try alice.message(tooLarge.localId).status == .failed }
            #expect(try alice.message(tooLarge.localId).failure?.code == .payloadTooLarge)
            try await alice.waitForStatus(fine.localId, atLeast: .stored, timeout: .seconds(5))
            await alice.client.stop()
        }
    }

    @Test func deliveryPathIsDirectWhenTheRecipientIsOnlineAndMailboxOtherwise() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            alice.client.start()
            try await alice.waitUntilOnline()
            let conversation = try await makeConversation([alice, bob])

            let toMailbox = try alice.client.send("bob is away", to: conversation)
            try await alice.waitForStatus(toMailbox.localId, atLeast: .stored)
            #expect(try alice.message(toMailbox.localId).deliveryPath == .mailbox)
            #expect(try alice.message(toMailbox.localId).status == .stored, "✓ only, until bob's device has it")

            bob.client.start()
            try await bob.waitUntilOnline()
            try await alice.waitForStatus(toMailbox.localId, atLeast: .delivered)
            let direct = try alice.client.send("bob is here", to: conversation)
            try await alice.waitForStatus(direct.localId, atLeast: .delivered)
            #expect(try alice.message(direct.localId).deliveryPath == .direct)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func pagesAreFiftyNewestLastAndSearchFindsWords() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            for index in 1...120 { try bob.client.send(index == 77 ? "the quick brown fox" : "message \(index)", to: conversation) }
            try await waitUntil("alice has 120") { alice.received.count == 120 }

            let newest = try alice.client.messages(in: conversation)
            #expect(newest.messages.count == 50 && newest.hasMore)
            #expect(newest.messages.map(\.seq) == (71...120).map { Int64($0) })
            let older = try alice.client.messages(in: conversation, before: newest.messages.first?.seq)
            #expect(older.messages.map(\.seq) == (21...70).map { Int64($0) } && older.hasMore)
            let oldest = try alice.client.messages(in: conversation, before: older.messages.first?.seq)
            #expect(oldest.messages.map(\.seq) == (1...20).map { Int64($0) } && !oldest.hasMore)

            #expect(try alice.client.search("QUICK bro").map(\.seq) == [77], "words match as case-insensitive prefixes")
            #expect(try alice.client.search("\"unbalanced OR").isEmpty, "FTS syntax is taken literally")
            #expect(try alice.client.search("message", in: conversation, limit: 5).count == 5)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func serverSentEventsCarryTheSameStory() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url) { $0.streamTransport = .serverSentEvents }
            let bob = try await TestDevice.register("bob", on: server.url) { $0.streamTransport = .serverSentEvents }
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let message = try alice.client.send("over SSE and HTTP", to: conversation)
            try await alice.waitForStatus(message.localId, atLeast: .delivered)
            try bob.client.markRead(conversationId: conversation)
            try await alice.waitForStatus(message.localId, atLeast: .read)
            #expect(isMonotonic(alice.statusHistory(localId: message.localId)))
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// Regression: GRDB turned `synchronous` back to NORMAL on the writer after the setting was made, so
    /// `flushEveryWrite` flushed nothing.
    @Test func flushEveryWriteReallyFlushes() throws {
        let credentials = PigeonClient.Credentials(userId: "alice", deviceId: "device-1", token: "unused")
        var configuration = PigeonClient.Configuration(
            serverURL: URL(string: "http://127.0.0.1:9")!, databasePath: makeTemporaryDirectory() + "/db.sqlite", credentials: credentials)
        #expect(try PigeonClient(configuration: configuration).localDatabaseSynchronousSetting() == 1)
        configuration.flushEveryWrite = true
        #expect(try PigeonClient(configuration: configuration).localDatabaseSynchronousSetting() == 2)
    }

    @Test func anInvalidTokenIsReportedAndNothingIsSent() async throws {
        try await withKitTestServer { server in
            let real = try await PigeonClient.registerDevice(serverURL: server.url, userId: "alice")
            let forged = PigeonClient.Credentials(userId: real.userId, deviceId: real.deviceId, token: "pgn_forged")
            let alice = try TestDevice.open(credentials: forged, serverURL: server.url, databasePath: makeTemporaryDirectory() + "/db.sqlite")
            alice.client.start()
            try await waitUntil("the failure is reported") { alice.client.lastConnectionError?.serverError?.code == .unauthorized }
            #expect(alice.client.connectionState != .online)
            await alice.client.stop()
        }
    }
}
