import Foundation
import PigeonTestSupport
import Testing

/// `pigeon block`, `unblock`, `blocks`, `invites`, `accept` and `decline` through the built binaries, as a user's
/// shell runs them.
@Suite(.serialized) struct ConsentCommandTests {
    @Test func usersAreBlockedListedAndUnblockedFromTheShell() async throws {
        let server = try PigeonServerProcess()
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "mallory"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }

        let blocked = try await cli.run(["block", "mallory"], profile: "alice")
        #expect(blocked.status == 0 && blocked.stdout.contains("Blocked mallory"), "\(blocked)")
        let listed = try await cli.run(["blocks", "--json"], profile: "alice")
        let entries = try #require(try listed.json() as? [[String: Any]], "\(listed)")
        #expect(entries.map { $0["userId"] as? String } == ["mallory"] && entries.first?["blockedAt"] is Int, "\(entries)")
        let text = try await cli.run(["blocks"], profile: "alice")
        #expect(text.status == 0 && text.stdout.contains("mallory  blocked "), "\(text)")

        // Mallory cannot start a conversation with alice any more; the server says why.
        let refused = try await cli.run(["new", "alice"], profile: "mallory")
        #expect(refused.status == 1 && refused.stderr.contains("does not accept invitations from you"), "\(refused)")

        let bad = try await cli.run(["block", "not a user"], profile: "alice")
        #expect(bad.status == 64 && bad.stderr.contains("is not a user id"), "\(bad)")
        let herself = try await cli.run(["block", "alice"], profile: "alice")
        #expect(herself.status == 1 && herself.stderr.contains("cannot block itself"), "\(herself)")

        let unblocked = try await cli.run(["unblock", "mallory"], profile: "alice")
        #expect(unblocked.status == 0 && unblocked.stdout.contains("Unblocked mallory"), "\(unblocked)")
        let empty = try await cli.run(["blocks"], profile: "alice")
        #expect(empty.status == 0 && empty.stdout.contains("You blocked nobody."), "\(empty)")
        #expect(try await cli.run(["new", "alice"], profile: "mallory").status == 0, "unblocked: mallory may add alice again")
        try await server.stop()
    }

    @Test func invitationsAreListedAcceptedAndDeclinedFromTheShell() async throws {
        let server = try PigeonServerProcess(extraArguments: ["--consent", "invites"])
        try await server.start()
        let cli = PigeonCLI(server: server.url)
        for user in ["alice", "carol", "dave"] { #expect(try await cli.run(["login", user], profile: user).status == 0) }
        let crew = try await cli.run(["new", "alice", "--name", "Crew"], profile: "carol").stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await cli.run(["send", crew, "welcome", "--wait", "20"], profile: "carol").status == 0)
        let other = try await cli.run(["new", "alice", "--name", "Spam"], profile: "dave").stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        let invites = try await cli.run(["invites"], profile: "alice")
        #expect(invites.status == 0 && invites.stdout.contains("carol invited you to Crew") && invites.stdout.contains("dave invited you to Spam"), "\(invites)")
        #expect(invites.stdout.contains(crew), "\(invites)")
        let json = try #require(try await cli.run(["invites", "--json"], profile: "alice").json() as? [[String: Any]])
        #expect(Set(json.compactMap { $0["invitedBy"] as? String }) == ["carol", "dave"] && json.allSatisfy { $0["membership"] as? String == "invited" }, "\(json)")
        let conversations = try #require(try await cli.run(["ls", "--json"], profile: "alice").json() as? [[String: Any]])
        #expect(conversations.isEmpty, "invitations are not among the conversations: \(conversations)")

        let accepted = try await cli.run(["accept", crew], profile: "alice")
        #expect(accepted.status == 0 && accepted.stdout.contains("Joined Crew"), "\(accepted)")
        let messages = try #require(try await cli.run(["ls", crew, "--json"], profile: "alice").json() as? [[String: Any]])
        #expect(messages.contains { $0["body"] as? String == "welcome" }, "the history came: \(messages)")
        let again = try await cli.run(["accept", crew], profile: "alice")
        #expect(again.status == 1 && again.stderr.contains("is not an invitation"), "\(again)")

        let declined = try await cli.run(["decline", other], profile: "alice")
        #expect(declined.status == 0 && declined.stdout.contains("Declined dave invited you to Spam"), "\(declined)")
        let none = try await cli.run(["invites"], profile: "alice")
        #expect(none.status == 0 && none.stdout.contains("No invitations."), "\(none)")
        let listed = try #require(try await cli.run(["ls", "--json"], profile: "alice").json() as? [[String: Any]])
        #expect(listed.compactMap { $0["id"] as? String } == [crew], "\(listed)")
        try await server.stop()
    }
}
