import Foundation
import PigeonTestSupport
import Testing

/// A tmux server of the test's own, with one window running a command; the screen is read back as tmux shows it.
final class TmuxSession: Sendable {
    let socket = "pigeon-test-\(UUID().uuidString.prefix(8))"
    let name = "chat"

    init(command: String, width: Int = 100, height: Int = 30) throws {
        guard Self.tmuxPath != nil else {
            throw TestFailure("tmux is not installed (scripts/test.sh installs it: apt-get install tmux)")
        }
        try tmuxCommand(["new-session", "-d", "-s", name, "-x", String(width), "-y", String(height), command])
    }

    static var tmuxPath: String? {
        ["/usr/bin/tmux", "/usr/local/bin/tmux", "/bin/tmux"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Runs a tmux client command and returns its output. It waits for the client in place: tmux's client commands
    /// end within milliseconds, the suites that use this run one test at a time, and the screen is read from the
    /// synchronous closures of `waitUntil`.
    @discardableResult
    func tmuxCommand(_ arguments: [String]) throws -> String {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-tmux-\(UUID().uuidString)").path
        defer { unlink(outputPath) }
        let pid = try Command.spawn(["/usr/bin/env", "tmux", "-L", socket, "-f", "/dev/null"] + arguments, outputPath: outputPath)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard status == 0 else { throw TestFailure("tmux \(arguments.joined(separator: " ")) failed (status \(status)): \(output)") }
        return output
    }

    /// The screen as text, or with the colours (`escapes`).
    func screen(escapes: Bool = false) throws -> String {
        try tmuxCommand(["capture-pane", "-p", "-t", name] + (escapes ? ["-e"] : []))
    }

    func type(_ text: String) throws {
        try tmuxCommand(["send-keys", "-t", name, "-l", text])
    }

    func press(_ key: String) throws {
        try tmuxCommand(["send-keys", "-t", name, key])
    }

    func kill() {
        _ = try? tmuxCommand(["kill-server"])
    }
}

@Suite(.serialized) struct ChatScreenInTmuxTests {
    /// A running server, alice and bob logged in, and alice's conversation with bob.
    private func aliceAndBob() async throws -> (server: PigeonServerProcess, cli: PigeonCLI, conversation: String) {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        #expect(try await cli.run(["login", "alice"], profile: "alice").status == 0)
        #expect(try await cli.run(["login", "bob"], profile: "bob").status == 0)
        let conversation = try await cli.run(["new", "bob"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        return (server, cli, conversation)
    }

    @Test func chatShowsLiveTicksTheOfflineBannerAndIncomingMessages() async throws {
        let (server, cli, conversation) = try await aliceAndBob()

        let command = "env PIGEON_HOME=\(cli.home) \(PigeonCLI.binaryPath) --server \(server.url) --profile \(cli.home)/alice chat \(conversation); echo EXITED:$?; sleep 60"
        let tmux = try TmuxSession(command: command)
        defer { tmux.kill() }
        func screenLine(containing text: String) -> String? {
            (try? tmux.screen())?.split(separator: "\n").map(String.init).first { $0.contains(text) }
        }
        func waitForLine(_ text: String, endingWith suffix: String, _ what: String) async throws {
            try await waitUntil(what, describe: { (try? tmux.screen()) ?? "" }) {
                screenLine(containing: text)?.trimmingCharacters(in: .whitespaces).hasSuffix(suffix) == true
            }
        }

        try await waitUntil("the chat is online", describe: { (try? tmux.screen()) ?? "" }) { screenLine(containing: "● online") != nil }
        try tmux.type("hello from the terminal")
        try tmux.press("Enter")
        try await waitForLine("hello from the terminal", endingWith: "✓", "the message shows ✓")
        #expect(try await cli.run(["sync"], profile: "bob").status == 0)
        try await waitForLine("hello from the terminal", endingWith: "✓✓", "bob's sync turns it ✓✓")
        #expect(try await cli.run(["read", conversation], profile: "bob").status == 0)
        try await waitUntil("bob's read turns ✓✓ blue", describe: { (try? tmux.screen(escapes: true)) ?? "" }) {
            let coloured = (try? tmux.screen(escapes: true))?.split(separator: "\n").first { $0.contains("hello from the terminal") }
            return coloured.map { $0.contains("94m✓✓") || $0.contains("94;1m✓✓") || $0.contains("1;94m✓✓") } ?? false
        }

        // /offline: the banner, and a message that waits (⏰) until /online sends it. The header's "offline (by
        // you)" is the client's own word that its stream is closed, so the message is written after that; and bob's
        // sync, a round trip through the server that starts once ⏰ shows, would have brought the message to bob's
        // device had alice's client sent it.
        try tmux.type("/offline")
        try tmux.press("Enter")
        try await waitUntil("the offline banner shows and the header says offline (by you)", describe: { (try? tmux.screen()) ?? "" }) {
            screenLine(containing: "No connection - messages will send when online") != nil && screenLine(containing: "○ offline (by you)") != nil
        }
        try tmux.type("written while offline")
        try tmux.press("Enter")
        try await waitForLine("written while offline", endingWith: "⏰", "the offline message shows ⏰")
        #expect(try await cli.run(["sync"], profile: "bob").status == 0)
        let bobsMessages = try await cli.run(["ls", conversation, "--json", "--local"], profile: "bob")
        #expect(bobsMessages.status == 0 && bobsMessages.stdout.contains("hello from the terminal"), "\(bobsMessages)")
        #expect(!bobsMessages.stdout.contains("written while offline"), "the server had the message while alice was offline: \(bobsMessages)")
        #expect(screenLine(containing: "written while offline")?.trimmingCharacters(in: .whitespaces).hasSuffix("⏰") == true)
        #expect(screenLine(containing: "○ offline (by you)") != nil)
        // An edit made offline says it waits, not that it is under way.
        try tmux.press("Up")
        try tmux.type("/edit written while offline, fixed")
        try tmux.press("Enter")
        try await waitUntil("the edit says it is sent once online", describe: { (try? tmux.screen()) ?? "" }) {
            screenLine(containing: "Edit saved: it is sent once online") != nil
        }
        #expect(screenLine(containing: "Editing the message") == nil)
        try tmux.type("/online")
        try tmux.press("Enter")
        try await waitForLine("written while offline", endingWith: "✓", "/online sends it")
        #expect(screenLine(containing: "No connection") == nil)
        // "reconnecting…" is gone once the header says online (read from one capture of the screen).
        var onlineScreen = ""
        try await waitUntil("the header says online", describe: { onlineScreen }) {
            onlineScreen = (try? tmux.screen()) ?? ""
            return onlineScreen.contains("● online")
        }
        #expect(!onlineScreen.contains("reconnecting"), "\(onlineScreen)")

        // Bob answers from his shell: it appears live, with his name.
        #expect(try await cli.run(["send", conversation, "hi alice, got it", "--wait", "20"], profile: "bob").status == 0)
        try await waitUntil("bob's answer appears", describe: { (try? tmux.screen()) ?? "" }) {
            screenLine(containing: "hi alice, got it")?.contains("bob") == true
        }

        // Search, then quit with Ctrl-C: the terminal comes back and the exit status is 0.
        try tmux.press("C-f")
        try tmux.type("offline")
        try tmux.press("Enter")
        try await waitUntil("the search finds the message", describe: { (try? tmux.screen()) ?? "" }) {
            screenLine(containing: "Search \"offline\": 1 result") != nil
        }
        try tmux.press("Escape")
        try tmux.press("C-c")
        try await waitUntil("pigeon chat exits", describe: { (try? tmux.screen()) ?? "" }) { screenLine(containing: "EXITED:0") != nil }
        try await server.stop()
    }

    /// A slash command being typed is not typing: bob's chat never shows "alice is typing…" while she types
    /// `/offline` or `/edit …`, and does when she types a message (so the test sees typing when there is some).
    @Test func aSlashCommandBeingTypedIsNotTyping() async throws {
        let (server, cli, conversation) = try await aliceAndBob()
        func chat(_ profile: String) throws -> TmuxSession {
            try TmuxSession(
                command: "env PIGEON_HOME=\(cli.home) \(PigeonCLI.binaryPath) --server \(server.url) --profile \(cli.home)/\(profile) chat \(conversation); sleep 60")
        }
        let alice = try chat("alice")
        defer { alice.kill() }
        let bob = try chat("bob")
        defer { bob.kill() }
        for (name, session) in [("alice", alice), ("bob", bob)] {
            try await waitUntil("\(name)'s chat is online", describe: { (try? session.screen()) ?? "" }) {
                ((try? session.screen()) ?? "").contains("● online")
            }
        }

        // A message of bob's for alice's marker below to react to.
        try bob.type("hello from bob")
        try bob.press("Enter")
        try await waitUntil("alice's chat shows bob's message", describe: { (try? alice.screen()) ?? "" }) {
            ((try? alice.screen()) ?? "").contains("hello from bob")
        }

        try alice.type("/edit")
        try await Task.sleep(for: .milliseconds(300))
        try alice.type(" 1 changed")
        try alice.press("C-u")
        try alice.type("/offline")
        try alice.press("C-u")
        // The marker: a reaction alice's chat sends over its socket after every keystroke above, which bob's chat
        // shows in place (a reaction does not end a typing line, a message would). A typing frame sent for any of those
        // keystrokes would have reached bob before it.
        try alice.type("/react 👍")
        try alice.press("Enter")
        var screens: [String] = []
        try await waitUntil("bob's chat shows alice's reaction", describe: { (try? bob.screen()) ?? "" }) {
            let screen = (try? bob.screen()) ?? ""
            screens.append(screen)
            return screen.contains("👍 1")
        }
        #expect(!screens.contains { $0.contains("typing") }, "\(screens.first { $0.contains("typing") } ?? "")")

        try alice.type("a real message")
        try await waitUntil("bob sees alice typing a message", describe: { (try? bob.screen()) ?? "" }) {
            ((try? bob.screen()) ?? "").contains("alice is typing…")
        }
        try await server.stop()
    }

    /// A group seen from alice's chat while bob works from his shell: his "added" line, his edit and his deletion
    /// appear live in place, alice edits her own message with /edit, and her tick counts the members who have it.
    @Test func chatShowsMemberChangesEditsAndDeletionsLiveInPlace() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "bob", "carol"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let conversation = try await cli.run(["new", "alice", "--name", "Crew"], profile: "bob").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cli.run(["send", conversation, "meet at the statoin", "--wait", "20"], profile: "bob").status == 0)
        #expect(try await cli.run(["send", conversation, "bring the secret plans", "--wait", "20"], profile: "bob").status == 0)
        #expect(try await cli.run(["send", conversation, "see you", "--wait", "20"], profile: "bob").status == 0)

        let command = "env PIGEON_HOME=\(cli.home) \(PigeonCLI.binaryPath) --server \(server.url) --profile \(cli.home)/alice chat \(conversation); echo EXITED:$?; sleep 60"
        let tmux = try TmuxSession(command: command)
        defer { tmux.kill() }
        func lines() -> [String] { ((try? tmux.screen()) ?? "").split(separator: "\n").map(String.init) }
        func row(_ text: String) -> Int? { lines().firstIndex { $0.contains(text) } }
        func waitFor(_ what: String, _ condition: @escaping () -> Bool) async throws {
            try await waitUntil(what, describe: { (try? tmux.screen()) ?? "" }) { condition() }
        }
        try await waitFor("the chat shows bob's messages") { row("● online") != nil && row("see you") != nil }
        let typoRow = try #require(row("meet at the statoin"))
        let secretRow = try #require(row("bring the secret plans"))

        let added = try await cli.run(["add", conversation, "carol"], profile: "bob")
        #expect(added.status == 0, "\(added)")
        try await waitFor("the added line appears after bob's messages") { (row("bob added carol") ?? 0) > (row("see you") ?? Int.max) }

        #expect(try await cli.run(["edit", conversation, "1", "meet at the station", "--wait", "20"], profile: "bob").status == 0)
        try await waitFor("the edit shows in place") {
            self.rowOf("meet at the station (edited)", in: lines()) != nil && row("statoin") == nil
        }
        #expect(try await cli.run(["delete", conversation, "2", "--wait", "20"], profile: "bob").status == 0)
        try await waitFor("the deletion shows in place") { row("message deleted") != nil && row("secret") == nil }
        // In place: still before "see you", in the order they were sent (rows shift up as lines are added below).
        let current = lines()
        let edited = try #require(rowOf("meet at the station", in: current))
        let gone = try #require(rowOf("message deleted", in: current))
        let later = try #require(rowOf("see you", in: current))
        #expect(edited < gone && gone < later && later - edited == secretRow - typoRow + 1, "\(current.joined(separator: "\n"))")

        // Alice's own message: ✓, then "✓✓ 1/2" once bob's device has it (carol's has not synced); then /edit.
        try tmux.type("count me in")
        try tmux.press("Enter")
        try await waitFor("alice's message is on the server") { lines().first { $0.contains("count me in") }?.hasSuffix("✓") == true }
        #expect(try await cli.run(["sync"], profile: "bob").status == 0)
        try await waitFor("one of two members has it") { lines().first { $0.contains("count me in") }?.hasSuffix("✓✓ 1/2") == true }
        try tmux.press("Up")
        try tmux.type("/edit count me out")
        try tmux.press("Enter")
        try await waitFor("alice's edit shows") { row("count me out (edited)") != nil && row("count me in") == nil }
        let bobs = try await cli.run(["ls", conversation, "--json"], profile: "bob")
        #expect(bobs.status == 0 && bobs.stdout.contains("count me out"), "\(bobs)")
        try tmux.press("C-c")
        try await waitFor("pigeon chat exits") { row("EXITED:0") != nil }
        try await server.stop()
    }

    private func rowOf(_ text: String, in lines: [String]) -> Int? { lines.firstIndex { $0.contains(text) } }
}
