import Foundation
import PigeonTestSupport
import Testing

/// `pigeon members`, `add`, `remove`, `leave`, `edit` and `delete` through the built binaries, as a user's shell runs them.
@Suite(.serialized) struct GroupCommandTests {
    func json(_ result: CLIResult) throws -> [String: Any] {
        guard result.status == 0, let object = try result.json() as? [String: Any] else { throw TestFailure("not a JSON object: \(result)") }
        return object
    }

    func memberRoles(_ conversation: [String: Any]) -> [String: String] {
        Dictionary(uniqueKeysWithValues: ((conversation["members"] as? [[String: Any]]) ?? []).map { ($0["userId"] as! String, $0["role"] as! String) })
    }

    func messages(_ cli: PigeonCLI, _ profile: String, _ conversation: String) async throws -> [[String: Any]] {
        let result = try await cli.run(["ls", conversation, "--json"], profile: profile)
        guard result.status == 0, let messages = try result.json() as? [[String: Any]] else { throw TestFailure("ls: \(result)") }
        return messages
    }

    @Test func membersAreListedAddedRemovedAndLeftFromTheShell() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "bob", "carol", "dave"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let conversation = try await cli.run(["new", "bob", "--name", "Crew"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let short = String(conversation.prefix(8))

        let listed = try json(try await cli.run(["members", short, "--json"], profile: "alice"))
        #expect(listed["kind"] as? String == "group" && memberRoles(listed) == ["alice": "owner", "bob": "member"], "\(listed)")

        let added = try await cli.run(["add", short, "carol", "dave"], profile: "alice")
        #expect(added.status == 0 && added.stdout.contains("Added carol, dave to Crew (4 members)"), "\(added)")
        let forbidden = try await cli.run(["add", short, "erin"], profile: "bob")
        #expect(forbidden.status == 1 && forbidden.stderr.contains("pigeon: not allowed"), "\(forbidden)")
        let removed = try await cli.run(["remove", short, "dave", "--json"], profile: "alice")
        #expect(memberRoles(try json(removed)) == ["alice": "owner", "bob": "member", "carol": "member"], "\(removed)")
        // The conversation list says a member change once, in words, with no tick.
        let list = try await cli.run(["ls"], profile: "alice")
        let crew = list.stdout.split(separator: "\n").first { $0.contains("Crew") }.map(String.init) ?? ""
        #expect(crew.contains("you removed dave") && !crew.contains("you: you") && !crew.hasSuffix("✓"), "\(list)")
        let text = try await cli.run(["members", short], profile: "alice")
        #expect(text.status == 0 && text.stdout.contains("Crew (\(conversation)) · group · 3 members"), "\(text)")
        #expect(text.stdout.contains("alice  owner") && text.stdout.contains("(you)") && text.stdout.contains("joined at #"), "\(text)")
        #expect(!text.stdout.contains("dave"))

        // Carol sees the conversation from the change that added her on; dave, removed before he ever synced, not at all.
        let carols = try await messages(cli, "carol", conversation)
        let first = try #require(carols.first)
        #expect((first["membersChange"] as? [String: Any])?["action"] as? String == "added", "\(carols)")
        #expect(carols.count == 2, "added, then dave removed: \(carols)")
        let daves = try await cli.run(["members", conversation], profile: "dave")
        #expect(daves.status == 1 && daves.stderr.contains("no conversation"), "\(daves)")

        // Bob leaves: his copy stays, read-only.
        let left = try await cli.run(["leave", short], profile: "bob")
        #expect(left.status == 0 && left.stdout.contains("You left Crew"), "\(left)")
        let afterwards = try await cli.run(["members", short], profile: "bob")
        #expect(afterwards.status == 0 && afterwards.stdout.contains("you are no longer a member"), "\(afterwards)")
        let refused = try await cli.run(["send", short, "anyone?"], profile: "bob")
        #expect(refused.status == 1 && refused.stderr.contains("no longer a member"), "\(refused)")
        let again = try await cli.run(["leave", short], profile: "bob")
        #expect(again.status == 1 && again.stderr.contains("no longer a member"), "\(again)")

        // Alice's listing tells the story in the conversation's order.
        let story = try await cli.run(["ls", short], profile: "alice")
        #expect(story.status == 0, "\(story)")
        let lines = story.stdout.split(separator: "\n").map(String.init)
        let order = ["you added carol and dave", "you removed dave", "bob left"].map { text in lines.firstIndex { $0.contains(text) } }
        #expect(order.allSatisfy { $0 != nil } && order == order.sorted { ($0 ?? 0) < ($1 ?? 0) }, "\(story.stdout)")

        // Export: the same story as text on stdout, as JSON into a file that is never overwritten by accident.
        let exported = try await cli.run(["export", short, "--local"], profile: "alice")
        #expect(exported.status == 0 && exported.stdout.hasPrefix("Crew (\(conversation))"), "\(exported)")
        let told = ["you added carol and dave", "you removed dave", "bob left"].map { text in exported.stdout.range(of: text)?.lowerBound }
        #expect(told.allSatisfy { $0 != nil } && told == told.sorted { $0! < $1! }, "\(exported.stdout)")
        let file = "\(cli.home)/crew.json"
        let toFile = try await cli.run(["export", short, "--format", "json", "--out", file, "--local"], profile: "alice")
        #expect(toFile.status == 0 && toFile.stdout.isEmpty, "\(toFile)")
        let document = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Any]
        #expect((document?["messages"] as? [[String: Any]])?.compactMap { $0["text"] as? String }.contains("bob left") == true, "\(document ?? [:])")
        let overwrite = try await cli.run(["export", short, "--format", "json", "--out", file, "--local"], profile: "alice")
        #expect(overwrite.status == 1 && overwrite.stderr.contains("exists; pass --force"), "\(overwrite)")
        let badFormat = try await cli.run(["export", short, "--format", "xml"], profile: "alice")
        #expect(badFormat.status == 64 && badFormat.stderr.contains("--format must be json or text"), "\(badFormat)")
        try await server.stop()
    }

    @Test func aMessageIsEditedAndDeletedFromTheShell() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "bob"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let conversation = try await cli.run(["new", "bob"], profile: "alice").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cli.run(["send", conversation, "helo wrld", "--wait", "20"], profile: "alice").status == 0)
        #expect(try await cli.run(["send", conversation, "a secret", "--wait", "20"], profile: "alice").status == 0)

        let edited = try await cli.run(["edit", conversation, "1", "hello", "world", "--wait", "20"], profile: "alice")
        #expect(edited.status == 0 && edited.stdout.contains("✓ edit of #1 stored"), "\(edited)")
        let deleted = try await cli.run(["delete", conversation, "2", "--wait", "20"], profile: "alice")
        #expect(deleted.status == 0 && deleted.stdout.contains("✓ deletion of #2 stored"), "\(deleted)")
        let missing = try await cli.run(["edit", conversation, "9", "x"], profile: "alice")
        #expect(missing.status == 1 && missing.stderr.contains("no message #9"), "\(missing)")

        for profile in ["alice", "bob"] {
            let listed = try await messages(cli, profile, conversation)
            #expect(listed.map { $0["body"] as? String } == ["hello world", ""], "\(profile): \(listed)")
            #expect(listed[0]["editedAt"] is Int && listed[1]["deletedAt"] is Int, "\(profile): \(listed)")
        }
        let text = try await cli.run(["ls", conversation, "--local"], profile: "bob")
        #expect(text.stdout.contains("hello world (edited)") && text.stdout.contains("message deleted") && !text.stdout.contains("secret"), "\(text)")
        let notYours = try await cli.run(["edit", conversation, "1", "bob", "was", "here", "--wait", "20"], profile: "bob")
        #expect(notYours.status == 1 && notYours.stderr.contains("edit refused"), "\(notYours)")
        #expect(try await messages(cli, "bob", conversation).first?["body"] as? String == "hello world", "undone on bob's device too")
        try await server.stop()
    }
}
