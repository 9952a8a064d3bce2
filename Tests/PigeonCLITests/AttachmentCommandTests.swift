import Foundation
import PigeonTestSupport
import Testing

/// `pigeon send --file`, `pigeon download` and the 📎 lines, with the built binaries as a user's shell runs them.
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
}
