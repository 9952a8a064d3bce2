import Foundation
import PigeonTestSupport
import Testing

/// `/react`, `/unreact`, `/reply`, `/thread` and `/back` in alice's chat while bob works from his shell.
@Suite(.serialized) struct ReactionsInTmuxTests {
    @Test func chatReactsRepliesAndOpensAThread() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "bob"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let conversation = try await cli.run(["new", "bob"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cli.run(["send", conversation, "see you at the station at noon", "--wait", "20"], profile: "bob").status == 0)

        let command = "env PIGEON_HOME=\(cli.home) \(PigeonCLI.binaryPath) --server \(server.url) --profile \(cli.home)/alice chat \(conversation); echo EXITED:$?; sleep 60"
        let tmux = try TmuxSession(command: command)
        defer { tmux.kill() }
        func lines() -> [String] { ((try? tmux.screen()) ?? "").split(separator: "\n").map(String.init) }
        func waitFor(_ what: String, _ condition: @escaping @Sendable ([String]) -> Bool) async throws {
            try await waitUntil(what, describe: { (try? tmux.screen()) ?? "" }) { condition(lines()) }
        }
        func enter(_ text: String) throws {
            try tmux.type(text)
            try tmux.press("Enter")
        }

        try await waitFor("bob's message is on the screen") { $0.contains { $0.contains("see you at the station") } }
        // No selection: the newest message. Alice's reaction shows under it at once, highlighted.
        try enter("/react 👍")
        try await waitFor("👍 1 under bob's message") { screen in
            guard let row = screen.firstIndex(where: { $0.contains("see you at the station") }), row + 1 < screen.count else { return false }
            return screen[row + 1].trimmingCharacters(in: .whitespaces) == "👍 1"
        }
        let coloured = try tmux.screen(escapes: true).split(separator: "\n").first { $0.contains("👍 1") }
        #expect(coloured?.contains("7m") == true || coloured?.contains(";7") == true, "yours, in inverse: \(coloured ?? "")")
        #expect(try await cli.run(["react", conversation, "1", "👍", "--wait", "20"], profile: "bob").status == 0)
        try await waitFor("bob's 👍 counts too") { $0.contains { $0.trimmingCharacters(in: .whitespaces) == "👍 2" } }
        try enter("/unreact 👍")
        try await waitFor("alice's is taken back") { $0.contains { $0.trimmingCharacters(in: .whitespaces) == "👍 1" } }

        // A reply quoting bob's message.
        try enter("/reply noon works")
        try await waitFor("the quote shows above the reply") { screen in
            guard let row = screen.firstIndex(where: { $0.contains("noon works") }), row > 0 else { return false }
            return screen[row - 1].contains("↪ bob: see you at the station at noon") && screen[row].trimmingCharacters(in: .whitespaces).hasSuffix("✓")
        }
        let bobsCopy = try await cli.run(["ls", conversation, "--json"], profile: "bob")
        #expect(bobsCopy.stdout.contains("\"replyPreview\""), "\(bobsCopy)")

        // Bob answers in the thread of his first message; alice's root counts it, and /thread opens it.
        #expect(try await cli.run(["reply", conversation, "1", "I'll bring snacks", "--thread", "--wait", "20"], profile: "bob").status == 0)
        try await waitFor("the root counts one reply") { $0.contains { $0.contains("💬 1 reply · bob") } }
        #expect(!lines().contains { $0.contains("I'll bring snacks") }, "the reply is in the thread")
        try tmux.press("Up")
        try tmux.press("Up")
        try enter("/thread")
        try await waitFor("the thread is open") { screen in
            screen.contains { $0.contains("Thread · /back") } && screen.contains { $0.contains("I'll bring snacks") }
        }
        try enter("count me in")
        try await waitFor("alice's thread reply is sent") { $0.contains { $0.contains("count me in") && $0.trimmingCharacters(in: .whitespaces).hasSuffix("✓") } }
        try enter("/back")
        try await waitFor("back in the conversation, the root counts two") { screen in
            screen.contains { $0.contains("💬 2 replies · you, bob") } && !screen.contains { $0.contains("count me in") }
        }
        let thread = try await cli.run(["thread", conversation, "1", "--json"], profile: "bob")
        #expect(thread.stdout.contains("count me in") && thread.stdout.contains("I'll bring snacks"), "\(thread)")
        try tmux.press("C-c")
        try await waitFor("pigeon chat exits") { $0.contains { $0.contains("EXITED:0") } }
        try await server.stop()
    }
}
