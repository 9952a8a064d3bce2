import Foundation
import PigeonTestSupport
import Testing

/// `pigeon react`, `reply` and `thread` through the built binaries, as a user's shell runs them.
@Suite(.serialized) struct ReactionCommandTests {
    func object(_ result: CLIResult) throws -> [String: Any] {
        guard result.status == 0, let object = try result.json() as? [String: Any] else { throw TestFailure("not a JSON object: \(result)") }
        return object
    }

    func reactions(_ message: [String: Any]) -> [String] {
        ((message["reactions"] as? [[String: Any]]) ?? []).map { "\($0["key"]!) \($0["count"]!) \(($0["me"] as? Bool) == true ? "me" : "")" }
    }

    @Test func reactionsRepliesAndThreadsFromTheShell() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "bob"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let conversation = try await cli.run(["new", "bob"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let short = String(conversation.prefix(8))
        #expect(try await cli.run(["send", short, "dinner", "at", "eight?", "--wait", "10"], profile: "bob").status == 0)

        // A reaction, shown at once and then on the server.
        let saved = try object(try await cli.run(["react", short, "1", "👍", "--json"], profile: "alice"))
        #expect(reactions(saved) == ["👍 1 me"], "\(saved)")
        let sent = try await cli.run(["react", short, "1", "party:parrot", "--wait", "10"], profile: "alice")
        #expect(sent.status == 0 && sent.stdout.contains("Added party:parrot on #1") && sent.stdout.contains("✓ on the server"), "\(sent)")
        #expect(sent.stdout.contains("👍 1*") && sent.stdout.contains("party:parrot 1*"), "the queued 👍 went first: \(sent)")
        let removed = try object(try await cli.run(["react", short, "1", "👍", "--remove", "--wait", "10", "--json"], profile: "alice"))
        #expect(reactions(removed) == ["party:parrot 1 me"], "\(removed)")
        let bad = try await cli.run(["react", short, "1", "NOPE"], profile: "alice")
        #expect(bad.status == 64 && bad.stderr.contains("is not a reaction"), "\(bad)")

        // Bob sees it in `ls --json`.
        let listed = try await cli.run(["ls", short, "--json"], profile: "bob")
        let bobs = try #require(try listed.json() as? [[String: Any]])
        #expect(bobs.first.map(reactions) == ["party:parrot 1 "], "\(listed)")

        // A reply quotes; a thread reply goes into the thread.
        let reply = try await cli.run(["reply", short, "1", "eight", "is", "fine", "--wait", "10"], profile: "alice")
        #expect(reply.status == 0 && reply.stdout.contains("↪ bob: dinner at eight?") && reply.stdout.contains("eight is fine"), "\(reply)")
        let quote = try object(try await cli.run(["reply", short, "1", "or nine", "--json"], profile: "alice"))
        #expect((quote["replyPreview"] as? [String: Any])?["body"] as? String == "dinner at eight?", "\(quote)")
        let inThread = try object(try await cli.run(["reply", short, "1", "I'll book", "--thread", "--wait", "10", "--json"], profile: "bob"))
        #expect(inThread["threadRoot"] as? String != nil && inThread["replyTo"] == nil, "\(inThread)")

        let thread = try object(try await cli.run(["thread", short, "1", "--json"], profile: "alice"))
        let root = try #require(thread["root"] as? [String: Any])
        #expect(root["body"] as? String == "dinner at eight?")
        #expect((root["thread"] as? [String: Any])?["replyCount"] as? Int == 1, "\(thread)")
        #expect((thread["replies"] as? [[String: Any]])?.map { $0["body"] as? String } == ["I'll book"], "\(thread)")
        let text = try await cli.run(["thread", short, "1"], profile: "alice")
        #expect(text.status == 0 && text.stdout.contains("dinner at eight?") && text.stdout.contains("I'll book"), "\(text)")
        #expect(text.stdout.contains("party:parrot 1"), "the root's reactions: \(text)")
        try await server.stop()
    }
}
