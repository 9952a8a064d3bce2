import Foundation
import GRDB
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The app killed mid-send, force-quit persistence, offline history, and a local database that cannot be opened.
@Suite(.timeLimit(.minutes(3)))
struct CrashAndPersistenceTests {
    /// The helper executable next to the test bundle (the test target depends on it, so SwiftPM builds it).
    static var helperPath: String {
        var directory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("pigeonkit-test-helper")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate.path }
            directory = directory.deletingLastPathComponent()
        }
        return "pigeonkit-test-helper"
    }

    /// The app is killed with every message saved and sent, none answered: its connection to the server goes through
    /// a proxy that black-holes it once the app is online (so the kill comes mid-send however loaded the machine is;
    /// a race against the server's answers decided that before, and lost under load). Reopened, it sends each once.
    @Test func appKilledWhileSendingResumesAndSendsEachOnce() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            bob.client.start()
            try await bob.waitUntilOnline()
            let conversation = try await makeConversation([alice, bob])
            let databasePath = alice.databasePath
            let credentials = alice.credentials
            let proxy = try await FaultProxy.start(upstreamPort: server.port)
            defer { Task { await proxy.stop() } }

            let directory = makeTemporaryDirectory()
            let output = directory + "/helper.log"
            let go = directory + "/go"
            let helper = try ChildProcess([
                Self.helperPath, "--server", "http://127.0.0.1:\(proxy.port)", "--db", databasePath, "--user", credentials.userId,
                "--device", credentials.deviceId, "--token", credentials.token, "--conversation", conversation, "--count", "200", "--go", go,
            ], stdout: output, truncate: true)
            try await waitUntil("the helper is online", timeout: .seconds(30)) {
                (try? String(contentsOfFile: output, encoding: .utf8))?.contains("online") == true
            }
            proxy.setMode(.stall)
            _ = FileManager.default.createFile(atPath: go, contents: nil)
            // Killed once everything is saved locally and handed to a connection that never answers.
            try await waitUntil("the helper saved 200 messages", timeout: .seconds(30)) {
                (try? String(contentsOfFile: output, encoding: .utf8))?.contains("all saved") == true
            }
            helper.signal(SIGKILL)
            try await helper.waitForExit(what: "the killed app")
            let acceptedBeforeKill = try await server.history(conversationId: conversation, token: credentials.token).count
            #expect(acceptedBeforeKill == 0, "nothing passed the black hole (\(acceptedBeforeKill))")

            let reopened = try TestDevice.open(credentials: credentials, serverURL: server.url, databasePath: databasePath)
            let unsent = try reopened.client.unsentMessages()
            #expect(unsent.count == 200, "every message is still the outbox's (\(unsent.count))")
            reopened.client.start()
            try await waitUntil("every message is stored", timeout: .seconds(120)) {
                try reopened.allMessages(in: conversation).filter { $0.seq != nil }.count == 200
            }
            let history = try await server.history(conversationId: conversation, token: credentials.token)
            #expect(history.map(\.body) == (0..<200).map { "message \($0)" }, "each stored once, in sending order")
            #expect(try reopened.client.unsentMessages().isEmpty)
            try await waitUntil("bob has all 200", timeout: .seconds(60)) { bob.received.count == 200 }
            #expect(Set(bob.received.map(\.serverId)).count == 200)
            await reopened.client.stop()
            await bob.client.stop()
        }
    }

    @Test func forceQuitKeepsQueuedMessagesAndCachedHistoryReadsOffline() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            for index in 0..<3 { try bob.client.send("from bob \(index)", to: conversation) }
            try await waitUntil("alice has bob's messages") { alice.received.count == 3 }
            alice.client.setNetworkEnabled(false)
            let queued = try alice.client.send("written offline, app then quit", to: conversation)
            await alice.client.stop()

            // The server is gone too: the app reopens with no network at all.
            await server.stop()
            let reopened = try TestDevice.open(credentials: alice.credentials, serverURL: server.url, databasePath: alice.databasePath)
            let page = try reopened.client.messages(in: conversation)
            #expect(page.messages.map(\.body) == ["from bob 0", "from bob 1", "from bob 2", "written offline, app then quit"])
            #expect(try reopened.client.unsentMessages().map(\.clientMessageId) == [queued.clientMessageId])
            #expect(try reopened.client.search("bob").count == 3)
            #expect(try reopened.client.conversations().first?.unreadCount == 3)

            try await server.start()
            reopened.client.start()
            try await reopened.waitForStatus(queued.localId, atLeast: .delivered)
            await reopened.client.stop()
            await bob.client.stop()
        }
    }

    @Test func unreadableDatabaseIsMovedAsideAndRebuiltFromTheServer() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            for index in 0..<5 { try bob.client.send("history \(index)", to: conversation) }
            try await waitUntil("alice has the history") { alice.received.count == 5 }
            alice.client.setNetworkEnabled(false)
            _ = try alice.client.send("unsent when the disk broke", to: conversation)
            await alice.client.stop()

            // Garbage over the header: SQLite no longer recognises the file.
            let handle = try #require(FileHandle(forWritingAtPath: alice.databasePath))
            try handle.write(contentsOf: Data(repeating: 0x5A, count: 4096))
            try handle.close()
            try? FileManager.default.removeItem(atPath: alice.databasePath + "-wal")

            let rebuilt = try TestDevice.open(credentials: alice.credentials, serverURL: server.url, databasePath: alice.databasePath)
            let recovery = try #require(rebuilt.client.localDatabaseRecovery)
            #expect(FileManager.default.fileExists(atPath: recovery.movedTo))
            #expect(recovery.recoveredOutboxItems == 0)
            #expect(recovery.lostOutboxItems == nil, "an unreadable outbox is reported as an unknown loss, never as none")
            rebuilt.client.start()
            try await waitUntil("the history is back") { try rebuilt.allMessages(in: conversation).map(\.body) == (0..<5).map { "history \($0)" } }
            #expect(rebuilt.events.contains { if case .localDatabaseRebuilt = $0 { return true } else { return false } })
            await rebuilt.client.stop()
            await bob.client.stop()
        }
    }

    @Test func databaseFromANewerVersionKeepsItsOutboxWhenRebuilt() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            alice.client.setNetworkEnabled(false)
            let unsent = try alice.client.send("queued before the downgrade", to: conversation)
            await alice.client.stop()
            let queue = try DatabaseQueue(path: alice.databasePath)
            try await queue.write { try $0.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99-from-the-future')") }
            try queue.close()

            let rebuilt = try TestDevice.open(credentials: alice.credentials, serverURL: server.url, databasePath: alice.databasePath)
            let recovery = try #require(rebuilt.client.localDatabaseRecovery)
            #expect(recovery.recoveredOutboxItems == 1 && recovery.lostOutboxItems == 0)
            rebuilt.client.start()
            let resent = try #require(try rebuilt.client.unsentMessages().first { $0.clientMessageId == unsent.clientMessageId } ?? rebuilt.allMessages(in: conversation).first)
            try await rebuilt.waitForStatus(resent.localId, atLeast: .stored)
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == ["queued before the downgrade"])
            await rebuilt.client.stop()
            await bob.client.stop()
        }
    }

    @Test func wrongCredentialsForADatabaseAreRefused() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let other = try await PigeonClient.registerDevice(serverURL: server.url, userId: "mallory")
            #expect {
                _ = try TestDevice.open(credentials: other, serverURL: server.url, databasePath: alice.databasePath)
            } throws: { ($0 as? PigeonClientError)?.code == .wrongDatabase }
        }
    }
}
