import Foundation
import PigeonTestSupport
import Testing

/// `/file` in alice's chat while bob works from his shell: the file shows under her message at once and goes with
/// it; bob's file shows in her chat.
@Suite(.serialized) struct AttachmentsInTmuxTests {
    @Test func chatSendsAFileAndShowsTheOnesItReceives() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "bob"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let conversation = try await cli.run(["new", "bob"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let files = URL(fileURLWithPath: makeTemporaryDirectory())
        let photo = Data((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
        try photo.write(to: files.appendingPathComponent("photo.jpg"))
        try Data("minutes".utf8).write(to: files.appendingPathComponent("minutes.txt"))

        let command = "env PIGEON_HOME=\(cli.home) \(PigeonCLI.binaryPath) --server \(server.url) --profile \(cli.home)/alice chat \(conversation); echo EXITED:$?; sleep 60"
        let tmux = try TmuxSession(command: command, width: 120)
        defer { tmux.kill() }
        func lines() -> [String] { ((try? tmux.screen()) ?? "").split(separator: "\n").map(String.init) }
        func waitFor(_ what: String, _ condition: @escaping @Sendable ([String]) -> Bool) async throws {
            try await waitUntil(what, describe: { (try? tmux.screen()) ?? "" }) { condition(lines()) }
        }
        try await waitFor("the chat is online") { $0.contains { $0.contains("● online") } }

        try tmux.type("/file \(files.appendingPathComponent("photo.jpg").path)")
        try tmux.press("Enter")
        try await waitFor("the file is sent, ✓ on its line") { screen in
            screen.contains { $0.contains("you") && $0.contains("📎 photo.jpg (150 kB)") && $0.trimmingCharacters(in: .whitespaces).hasSuffix("✓") }
        }
        let out = files.appendingPathComponent("bob")
        let download = try await cli.run(["download", conversation, "#1", "--out", out.path], profile: "bob")
        #expect(download.status == 0, "\(download)")
        #expect(try Data(contentsOf: out.appendingPathComponent("photo.jpg")) == photo)

        let sent = try await cli.run(
            ["send", conversation, "the minutes", "--file", files.appendingPathComponent("minutes.txt").path, "--wait", "20"], profile: "bob")
        #expect(sent.status == 0, "\(sent)")
        try await waitFor("bob's file shows under his text") { screen in
            guard let row = screen.firstIndex(where: { $0.contains("the minutes") }), row + 1 < screen.count else { return false }
            return screen[row + 1].contains("📎 minutes.txt (7 B)")
        }
        try tmux.type("/file \(files.appendingPathComponent("nope.png").path)")
        try tmux.press("Enter")
        try await waitFor("a missing file is refused") { $0.contains { $0.contains("not saved:") && $0.contains("no such file") } }
        try tmux.press("C-c")
        try await waitFor("pigeon chat exits") { $0.contains { $0.contains("EXITED:0") } }
        try await server.stop()
    }
}
