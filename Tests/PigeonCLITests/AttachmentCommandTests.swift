import Foundation
import PigeonTestSupport
import Testing

/// `pigeon send --file`, `pigeon download` and the 📎 lines, with the built binaries as a user's shell runs them, and
/// `/file` in `pigeon chat` (in tmux). One at a time: each starts a server of its own.
@Suite(.serialized) struct AttachmentCommandTests {
    @Test func aFileSentFromOneProfileIsDownloadedIdenticalOnTheOther() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        #expect(try await cli.run(["login", "alice"], profile: "alice").status == 0)
        #expect(try await cli.run(["login", "bob"], profile: "bob").status == 0)
        let created = try await cli.run(["new", "bob"], profile: "alice")
        let conversation = created.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(created.status == 0, "\(created)")

        var photo = Data(count: 2_000_000)
        photo.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
            for offset in stride(from: 0, to: buffer.count, by: 8) { buffer.storeBytes(of: UInt64.random(in: .min ... .max), toByteOffset: offset, as: UInt64.self) }
        }
        let notes = Data("meet at 8\n".utf8)
        let files = URL(fileURLWithPath: makeTemporaryDirectory())
        let photoPath = files.appendingPathComponent("holiday photo.jpg").path
        let notesPath = files.appendingPathComponent("notes.txt").path
        try photo.write(to: URL(fileURLWithPath: photoPath))
        try notes.write(to: URL(fileURLWithPath: notesPath))

        let sent = try await cli.run(
            ["send", conversation, "from", "the", "beach", "--file", photoPath, "--file", notesPath, "--wait", "30"], profile: "alice")
        #expect(sent.status == 0, "\(sent)")
        #expect(sent.stdout.contains("✓ from the beach 📎 holiday photo.jpg (2.0 MB) 📎 notes.txt (10 B)"), "\(sent)")
        // A file alone, no text.
        let alone = try await cli.run(["send", conversation, "--file", notesPath, "--wait", "30"], profile: "alice")
        #expect(alone.status == 0 && alone.stdout.contains("✓ 📎 notes.txt (10 B)"), "\(alone)")
        let missing = try await cli.run(["send", conversation, "--file", files.appendingPathComponent("nope.jpg").path], profile: "alice")
        #expect(missing.status == 1 && missing.stderr.contains("no such file"), "\(missing)")

        // Every place bob sees the message shows the files.
        let listing = try await cli.run(["ls", conversation], profile: "bob")
        #expect(listing.status == 0, "\(listing)")
        let lines = listing.stdout.split(separator: "\n")
        let body = try #require(lines.firstIndex { $0.contains("from the beach") }, "\(listing)")
        #expect(lines[body + 1].contains("📎 holiday photo.jpg (2.0 MB)") && lines[body + 2].contains("📎 notes.txt (10 B)"), "\(listing)")
        let conversations = try await cli.run(["ls", "--local"], profile: "bob")
        #expect(conversations.stdout.contains("📎 notes.txt (10 B)"), "the last message's preview: \(conversations)")
        let json = try await cli.run(["ls", conversation, "--json", "--local"], profile: "bob")
        let messages = try #require(try json.json() as? [[String: Any]])
        let attachments = try #require(messages.first?["attachments"] as? [[String: Any]])
        #expect(attachments.map { $0["label"] as? String } == ["📎 holiday photo.jpg (2.0 MB)", "📎 notes.txt (10 B)"])
        #expect(attachments.map { $0["size"] as? Int } == [2_000_000, 10])
        #expect(attachments.allSatisfy { ($0["id"] as? String) != nil && ($0["sha256"] as? String)?.count == 64 })

        // Downloaded twice into one directory: identical bytes, and the second never overwrites the first.
        let out = URL(fileURLWithPath: makeTemporaryDirectory()).appendingPathComponent("downloads")
        let first = try await cli.run(["download", String(conversation.prefix(8)), "#1", "--out", out.path], profile: "bob")
        #expect(first.status == 0, "\(first)")
        #expect(first.stdout.contains("📎 \(out.path)/holiday photo.jpg (2.0 MB)"), "\(first)")
        #expect(try Data(contentsOf: out.appendingPathComponent("holiday photo.jpg")) == photo)
        #expect(try Data(contentsOf: out.appendingPathComponent("notes.txt")) == notes)
        let second = try await cli.run(["download", conversation, "1", "--out", out.path, "--json"], profile: "bob")
        #expect(second.status == 0, "\(second)")
        #expect(try Data(contentsOf: out.appendingPathComponent("holiday photo (1).jpg")) == photo)
        #expect(try Data(contentsOf: out.appendingPathComponent("notes (1).txt")) == notes)
        let saved = try #require(try second.json() as? [[String: Any]])
        #expect(saved.map { ($0["path"] as? String).map { URL(fileURLWithPath: $0).lastPathComponent } } == ["holiday photo (1).jpg", "notes (1).txt"])
        // The sender's own download comes from its copy.
        let own = try await cli.run(["download", conversation, "#2", "--out", out.path], profile: "alice")
        #expect(own.status == 0, "\(own)")
        #expect(try Data(contentsOf: out.appendingPathComponent("notes (2).txt")) == notes)

        let plain = try await cli.run(["send", conversation, "no file here", "--wait", "30"], profile: "alice")
        #expect(plain.status == 0)
        let none = try await cli.run(["download", conversation, "#3", "--out", out.path], profile: "bob")
        #expect(none.status == 1 && none.stderr.contains("has no attachment"), "\(none)")
        try await server.stop()
    }

    /// `/file` in alice's chat while bob works from his shell: the file shows under her message at once and goes with
    /// it; bob's file shows in her chat.
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
