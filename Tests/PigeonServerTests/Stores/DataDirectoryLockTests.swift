import Foundation
import Logging
import PigeonProtocol
import PigeonSQLite
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// A serving process holds its data directory: `restore`, `backup --to` into it and a second server on it are refused
/// with one line naming the holder, and change nothing; once the server has stopped they work. A port in use is
/// named, and a refused start leaves no data directory behind.
@Suite struct DataDirectoryLockTests {
    @Test func aRunningServersDataDirectoryIsRefusedToRestoreBackupIntoAndASecondServer() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let live = directory + "/live"
        try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: true)
        let server = try await ServerProcess(dataDirectory: live)
        let client = server.client
        let alice = try await client.register("alice")
        let conversation = try await client.createConversation(alice, members: ["bob"])
        try await client.sendAccepted(alice, to: conversation.id, body: "before the backup")
        let archive = directory + "/backup.tar"
        #expect(try await ServerProcess.run(["backup", "--data-dir", live, "--to", archive]).status == 0)
        try await client.sendAccepted(alice, to: conversation.id, body: "after the backup")

        let restore = try await ServerProcess.run(["restore", "--from", archive, "--data-dir", live, "--replace"])
        #expect(restore.status == 1, "\(restore.output)")
        let refusal = restore.output.split(separator: "\n")
        #expect(refusal.count == 1, "one line: \(restore.output)")
        #expect(refusal.first?.contains("the data directory \(live) is in use by pigeon-server (127.0.0.1:\(server.port)), pid ") == true, "\(restore.output)")

        let into = try await ServerProcess.run(["backup", "--data-dir", live, "--to", live + "/inside.tar"])
        #expect(into.status == 1 && into.output.contains("inside the data directory"), "\(into.output)")
        #expect(!FileManager.default.fileExists(atPath: live + "/inside.tar"))
        let other = directory + "/other"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
        let otherServer = try await ServerProcess(dataDirectory: other)
        let intoOther = try await ServerProcess.run(["backup", "--data-dir", live, "--to", other + "/b.tar"])
        #expect(intoOther.status == 1 && intoOther.output.contains("in use by pigeon-server (127.0.0.1:\(otherServer.port))"), "\(intoOther.output)")
        try await otherServer.stop(signal: SIGTERM)

        let second = try await ServerProcess.run(["serve", "--host", "127.0.0.1", "--port", String(try freePort()), "--data-dir", live])
        #expect(second.status == 1, "\(second.output)")
        let lines = second.output.split(separator: "\n").filter { $0.contains("in use by") }
        #expect(lines.count == 1 && lines.first?.contains("the data directory \(live) is in use by pigeon-server (127.0.0.1:\(server.port))") == true, "\(second.output)")

        // Nothing changed: the server still serves everything it acknowledged, and goes on.
        #expect(server.isRunning)
        try await client.sendAccepted(alice, to: conversation.id, body: "after the refusals")
        #expect(try await client.waitForCount(alice, conversation.id, 3).map(\.body) == ["before the backup", "after the backup", "after the refusals"])
        try await server.stop(signal: SIGTERM)

        // Stopped: the lock went with it (even a SIGKILL lets it go: it is the kernel's).
        let replaced = try await ServerProcess.run(["restore", "--from", archive, "--data-dir", live, "--replace"])
        #expect(replaced.status == 0, "\(replaced.output)")
        let killed = try await ServerProcess(dataDirectory: live)
        try await killed.stop(signal: SIGKILL)
        let restarted = try await ServerProcess(dataDirectory: live)
        #expect(try await restarted.client.allMessages(alice, conversation.id).map(\.body) == ["before the backup"])
        try await restarted.stop(signal: SIGTERM)
    }

    /// Two servers in one process on one data directory: the second start is refused (a `flock` belongs to an open
    /// file, not to the process); after the first stops, it starts.
    @Test func aSecondInProcessServerOnOneDirectoryIsRefused() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory
        configuration.durable = false
        var logger = Logger(label: "pigeon-test")
        logger.logLevel = .critical
        let first = InProcessServer(configuration: configuration, logger: logger)
        try await first.start()
        let second = InProcessServer(configuration: configuration, logger: logger)
        await #expect(throws: DataDirectoryLock.Held.self) { try await second.start() }
        await first.stop()
        try await second.start()
        await second.stop()
    }

    /// `serve` on a port in use: one line naming the port, exit 1, and the data directory it would have created is
    /// not there.
    @Test func aPortInUseIsNamedAndNothingIsCreated() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try await ServerProcess(dataDirectory: directory)
        let fresh = directory + "/fresh"
        let refused = try await ServerProcess.run(["serve", "--host", "127.0.0.1", "--port", String(server.port), "--data-dir", fresh])
        #expect(refused.status == 1, "\(refused.output)")
        let lines = refused.output.split(separator: "\n").filter { $0.contains("in use") }
        #expect(lines.count == 1 && lines.first?.contains("port \(server.port) on 127.0.0.1 is in use (another pigeon-server?)") == true, "\(refused.output)")
        #expect(!refused.output.contains("errno"), "\(refused.output)")
        #expect(!FileManager.default.fileExists(atPath: fresh), "a refused start created \(fresh)")
        try await server.stop(signal: SIGTERM)
    }

    /// The start line says which optional parts are on; a SIGTERM is logged.
    @Test func theStartSaysWhatIsOnAndASigtermIsLogged() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try await ServerProcess(
            dataDirectory: directory, arguments: ["--log-level", "info", "--web", "--admin-token", "an-admin-token-0123456789"])
        try await waitUntil("the start line is logged") { server.log().contains("pigeon-server listening") }
        let line = try #require(server.log().split(separator: "\n").first { $0.contains("pigeon-server listening") })
        #expect(line.contains("webPage=http://127.0.0.1:\(server.port)/"), "\(line)")
        #expect(line.contains("adminPage=http://127.0.0.1:\(server.port)/admin"), "\(line)")
        #expect(line.contains("webhooks=off") && line.contains("push=off") && line.contains("encryptionAtRest=off"), "\(line)")
        #expect(try await server.stop(signal: SIGTERM) == 0)
        #expect(server.log().contains("SIGTERM received"), "\(server.log())")
    }

    /// `serve --help` lists --host, --port and --data-dir first, then the options grouped by topic.
    @Test func theHelpListsWhereItListensFirst() async throws {
        let help = try await ServerProcess.run(["serve", "--help"])
        #expect(help.status == 0, "\(help.output)")
        let options = help.output.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.hasPrefix("--") ? String(trimmed.split(separator: " ")[0]) : nil
        }
        #expect(Array(options.prefix(3)) == ["--host", "--port", "--data-dir"], "\(options.prefix(5))")
        let titles = help.output.split(separator: "\n").filter { !$0.hasPrefix(" ") && $0.hasSuffix(":") }.map(String.init)
        #expect(titles.first == "WHERE IT LISTENS AND KEEPS ITS DATA:", "\(titles)")
        #expect(Array(titles.prefix(3)) == ["WHERE IT LISTENS AND KEEPS ITS DATA:", "STORE, BUFFER AND PROCESSING:", "REGISTRATION AND THE OPERATOR:"])
        // Ungrouped: only --help.
        let ungrouped = help.output.components(separatedBy: "\nOPTIONS:\n").dropFirst().first ?? ""
        #expect(!ungrouped.contains("--") || ungrouped.split(separator: "\n").allSatisfy { !$0.contains("--") || $0.contains("--help") }, "\(ungrouped)")
    }
}
