import Foundation
import PigeonTestSupport
import Testing

/// The built `pigeon` binary against the built `pigeon-server`, as a user's shell runs them.
@Suite(.serialized) struct CLITests {
    /// Statuses of a conversation's messages by body, from `ls <id> --json` (which refreshes first).
    func statuses(_ cli: PigeonCLI, _ profile: String, _ conversation: String, local: Bool = false) async throws -> [String: String] {
        let result = try await cli.run(["ls", conversation, "--json"] + (local ? ["--local"] : []), profile: profile)
        guard result.status == 0, let messages = try result.json() as? [[String: Any]] else { throw TestFailure("ls: \(result)") }
        return Dictionary(uniqueKeysWithValues: messages.map { ($0["body"] as! String, $0["status"] as! String) })
    }

    func messages(_ cli: PigeonCLI, _ profile: String, _ conversation: String) async throws -> [[String: Any]] {
        let result = try await cli.run(["ls", conversation, "--json", "--local"], profile: profile)
        guard result.status == 0, let messages = try result.json() as? [[String: Any]] else { throw TestFailure("ls: \(result)") }
        return messages
    }

    @Test func twoProfilesChatThroughARealServerAndTheOfflineMessagesArriveInOrder() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        let login = try await cli.run(["login", "alice"], profile: "alice")
        #expect(login.status == 0, "\(login)")
        #expect(login.stdout.contains("Logged in as alice"))
        #expect(try await cli.run(["login", "bob", "--json"], profile: "bob").status == 0)
        let attributes = try FileManager.default.attributesOfItem(atPath: "\(cli.home)/alice/device.json")
        #expect((attributes[.posixPermissions] as? Int) == 0o600, "the token is readable by its owner only")

        let created = try await cli.run(["new", "bob", "--name", "Tickets"], profile: "alice")
        let conversation = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(created.status == 0 && UUID(uuidString: conversation) != nil, "\(created)")

        // Online: ✓ on --wait, ✓✓ once bob's device has synced.
        let online = try await cli.run(["send", conversation, "hello", "bob", "--wait", "20"], profile: "alice")
        #expect(online.status == 0, "\(online)")
        #expect(online.stdout.contains("✓ hello bob"))
        #expect(try await cli.run(["sync"], profile: "bob").status == 0)
        #expect(try await statuses(cli, "alice", conversation)["hello bob"] == "delivered")

        // The server goes away: sends queue (⏰), --wait says it ran out, sync says there is no server.
        try await server.stop()
        for index in 1...3 {
            let queued = try await cli.run(["send", String(conversation.prefix(8)), "offline \(index)"], profile: "alice")
            #expect(queued.status == 0, "\(queued)")
            #expect(queued.stdout.contains("⏰ offline \(index)"))
        }
        let timedOut = try await cli.run(["send", conversation, "offline 4", "--wait", "1"], profile: "alice")
        #expect(timedOut.status == 75, "\(timedOut)")
        #expect(timedOut.stderr.contains("stays queued"))
        let noServer = try await cli.run(["sync", "--wait", "5"], profile: "bob")
        #expect(noServer.status == 1, "\(noServer)")
        #expect(noServer.stderr.hasPrefix("pigeon: cannot reach the Pigeon server at \(server.url)"))
        let cached = try await cli.run(["ls", conversation, "--json"], profile: "alice")
        #expect(cached.status == 0 && cached.stderr.contains("showing this device's copy"), "\(cached)")
        let offlineStatuses = try await statuses(cli, "alice", conversation, local: true)
        #expect((1...4).allSatisfy { offlineStatuses["offline \($0)"] == "pending" }, "\(offlineStatuses)")

        // Back: alice's sync delivers in order; bob's sync makes alice's ticks ✓✓; bob's read turns them blue.
        try await server.start()
        let flushed = try await cli.run(["sync", "--json"], profile: "alice")
        #expect(flushed.status == 0, "\(flushed)")
        #expect((try flushed.json() as? [String: Any])?["sent"] as? Int == 4)
        #expect(try await cli.run(["sync"], profile: "bob").status == 0)
        let received = try await messages(cli, "bob", conversation)
        #expect(received.map { $0["body"] as? String } == ["hello bob", "offline 1", "offline 2", "offline 3", "offline 4"])
        #expect(received.map { $0["seq"] as? Int } == [1, 2, 3, 4, 5])
        let bobsList = try await cli.run(["ls", "--json", "--local"], profile: "bob")
        #expect(((try bobsList.json() as? [[String: Any]])?.first?["unreadCount"] as? Int) == 5, "\(bobsList)")

        let delivered = try await statuses(cli, "alice", conversation)
        #expect(delivered.values.allSatisfy { $0 == "delivered" } && delivered.count == 5, "\(delivered)")
        let read = try await cli.run(["read", String(conversation.prefix(6))], profile: "bob")
        #expect(read.status == 0, "\(read)")
        let blue = try await statuses(cli, "alice", conversation)
        #expect(blue.values.allSatisfy { $0 == "read" } && blue.count == 5, "\(blue)")
        let bobsListAfter = try await cli.run(["ls", "--json", "--local"], profile: "bob")
        #expect(((try bobsListAfter.json() as? [[String: Any]])?.first?["unreadCount"] as? Int) == 0)

        // The text listing shows the ticks; the conversation list its name.
        let listing = try await cli.run(["ls", conversation, "--local"], profile: "alice")
        #expect(listing.stdout.split(separator: "\n").filter { $0.hasSuffix("✓✓") }.count == 5, "\(listing)")
        // Each message shows the #seq that `pigeon edit` and `delete` take.
        let seqLines = listing.stdout.split(separator: "\n").filter { $0.hasSuffix("✓✓") }
        #expect(zip(seqLines, 1...5).allSatisfy { line, seq in line.contains(" #\(seq) ") }, "\(listing)")
        let conversations = try await cli.run(["ls", "--local"], profile: "bob")
        #expect(conversations.stdout.contains(conversation) && conversations.stdout.contains("Tickets"), "\(conversations)")
        try await server.stop()
    }

    /// Without `PIGEON_HOME`, profiles live under `$HOME/.pigeon`: the `$HOME` the process was given, not the account's
    /// home directory, so scripts and tests with a home of their own do not share profiles.
    @Test func profilesLiveUnderTheGivenHOME() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let home = makeTemporaryDirectory("pigeon-cli-home")
        let login = try await runBuiltProduct(
            "pigeon", ["--server", server.url, "login", "zed"], home: home, timeout: .seconds(60), overriding: ["PIGEON_HOME": nil, "HOME": home])
        #expect(login.status == 0, "\(login)")
        #expect(FileManager.default.fileExists(atPath: "\(home)/.pigeon/zed/device.json"), "\(login)")
        let listed = try await runBuiltProduct("pigeon", ["ls", "--local"], home: home, timeout: .seconds(60), overriding: ["PIGEON_HOME": nil, "HOME": home])
        #expect(listed.status == 0 && listed.stdout.contains("No conversations yet"), "\(listed)")
        try await server.stop()
    }

    /// `--help` (before or after a command) and `pigeon help <command>` print the help on stdout with status 0.
    @Test func helpIsPrintedForEveryCommand() async throws {
        let cli = PigeonCLI(server: "http://127.0.0.1:\(try freePort())")
        for arguments in [["--help"], ["devices", "--help"], ["send", "--help"], ["help", "send"], ["help"]] {
            let result = try await cli.run(arguments)
            #expect(result.status == 0 && result.stdout.contains("USAGE: pigeon") && result.stderr.isEmpty, "\(arguments): \(result)")
        }
        #expect(try await cli.run(["send", "--help"]).stdout.contains("--wait"), "the command's own help")
    }

    @Test func mistakesGetOneClearLineAndANonZeroStatus() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        func expectError(_ arguments: [String], profile: String? = "alice", status: Int32 = 1, _ text: String) async throws {
            let result = try await cli.run(arguments, profile: profile)
            #expect(result.status == status, "\(arguments): \(result)")
            #expect(result.stderr.contains(text), "\(arguments): \(result)")
            #expect(!result.stderr.contains("Fatal error") && !result.stderr.contains("Stack"), "\(result)")
            #expect(result.stdout.isEmpty, "\(arguments): \(result)")
        }
        try await expectError(["ls"], "pigeon: not logged in")
        try await expectError(["ls"], profile: nil, "pigeon: not logged in: run `pigeon login <userId>` first")
        try await expectError(["login", "bad user"], status: 64, "is not a user id")
        let unreachable = PigeonCLI(server: "http://127.0.0.1:\(try freePort())")
        let noServer = try await unreachable.run(["login", "carol"], profile: "carol")
        #expect(noServer.status == 1 && noServer.stderr.contains("cannot reach the Pigeon server") && noServer.stderr.contains("connection refused"), "\(noServer)")
        #expect(!FileManager.default.fileExists(atPath: "\(unreachable.home)/carol/device.json"))

        #expect(try await cli.run(["login", "alice"], profile: "alice").status == 0)
        try await expectError(["login", "alice"], "is already logged in as alice")
        try await expectError(["send", "nonsense", "hi"], "\"nonsense\" is not a conversation id")
        try await expectError(["send", UUID().uuidString, "hi"], "no conversation")
        try await expectError(["read", "0000"], "no conversation \"0000\"")
        try await expectError(["send", UUID().uuidString, "hi", "--wait", "-1"], status: 64, "--wait")
        try await expectError(["--server", "not a url", "ls"], "is not a server URL")
        try await expectError(["chat"], "needs a terminal")
        let created = try await cli.run(["new", "bob"], profile: "alice")
        let conversation = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        try await expectError(["send", conversation, String(repeating: "x", count: 70_000)], "the body is 70000 bytes")
        #expect(try await messages(cli, "alice", conversation).isEmpty, "a refused send saves nothing")
        let piped = try await cli.run(["send", conversation, "-"], profile: "alice", stdin: "from stdin\n")
        #expect(piped.status == 0 && piped.stdout.contains("⏰ from stdin"), "\(piped)")
        try await server.stop()
    }

    /// A user's second device needs proof it is that user: the profile of one of its devices.
    @Test func aSecondDeviceLogsInWithTheProfileOfTheFirst() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        #expect(try await cli.run(["login", "alice"], profile: "alice").status == 0)
        let stranger = try await cli.run(["login", "alice"], profile: "mallory")
        #expect(stranger.status == 1 && stranger.stderr.contains("already has devices"), "\(stranger)")
        #expect(try await cli.run(["login", "bob"], profile: "bob").status == 0)
        let wrongUser = try await cli.run(["login", "alice", "--from-profile", "\(cli.home)/bob"], profile: "laptop")
        #expect(wrongUser.status == 1 && wrongUser.stderr.contains("logged in as bob, not alice"), "\(wrongUser)")
        let laptop = try await cli.run(["login", "alice", "--from-profile", "\(cli.home)/alice", "--json"], profile: "laptop")
        #expect(laptop.status == 0, "\(laptop)")
        // The new device reads alice's conversations.
        let created = try await cli.run(["new", "bob"], profile: "alice")
        let conversation = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cli.run(["send", conversation, "from the phone", "--wait", "10"], profile: "alice").status == 0)
        let listed = try await cli.run(["sync"], profile: "laptop")
        #expect(listed.status == 0, "\(listed)")
        #expect(try await messages(cli, "laptop", conversation).count == 1)
        try await server.stop()
    }

    @Test func theDemoPlaysTheWholeStoryAndChecksIt() async throws {
        let started = ContinuousClock.now
        let demo = try await runBuiltProduct("pigeon-demo", ["--plain"], home: makeTemporaryDirectory("pigeon-demo-home"), timeout: .seconds(120))
        print("pigeon-demo --plain took \(ContinuousClock.now - started)")
        #expect(demo.status == 0, "\(demo)")
        for step in 1...5 { #expect(demo.stdout.contains("== Step \(step)/5"), "\(demo)") }
        for tick in ["⏰ pending", "✓ sent", "✓✓ delivered", "✓✓ read", "⚠️ failed"] { #expect(demo.stdout.contains(tick), "\(tick)") }
        #expect(demo.stdout.contains("Nothing lost, nothing twice: 6 messages, seq 1…6 on both devices"))
    }

    @Test func pigeonDemoNamesTheProgramThatPlaysIt() async throws {
        let cli = PigeonCLI(server: "http://127.0.0.1:1")
        let result = try await cli.run(["demo", "--plain"])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("swift run pigeon-demo"), "\(result)")
    }
}
