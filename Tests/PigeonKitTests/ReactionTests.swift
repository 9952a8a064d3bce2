import AsyncHTTPClient
import Foundation
import NIOConcurrencyHelpers
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Reactions (API.md 1.2) against a real in-process server: made offline through the outbox, shown at once, netted
/// out, corrected by the server's aggregate, refused and undone, and heard once whatever way the event comes back.
@Suite(.timeLimit(.minutes(3)))
struct ReactionTests {
    /// The aggregate rule against an independently written table: (before, change) → after.
    @Test func aUsersOwnChangeMovesTheCountOnlyWhenItChangesMe() {
        let thumbs = Reaction(key: "👍", count: 2, me: false)
        let table: [([Reaction], ReactionAction, String, [Reaction])] = [
            ([], .add, "👍", [Reaction(key: "👍", count: 1, me: true)]),
            ([], .remove, "👍", []),
            ([thumbs], .add, "👍", [Reaction(key: "👍", count: 3, me: true)]),
            ([thumbs], .remove, "👍", [thumbs]),
            ([Reaction(key: "👍", count: 3, me: true)], .add, "👍", [Reaction(key: "👍", count: 3, me: true)]),
            ([Reaction(key: "👍", count: 3, me: true)], .remove, "👍", [thumbs]),
            ([Reaction(key: "👍", count: 1, me: true), thumbs.with(key: "❤️")], .remove, "👍", [thumbs.with(key: "❤️")]),
            ([thumbs], .add, "❤️", [thumbs, Reaction(key: "❤️", count: 1, me: true)]),
        ]
        for (before, action, key, after) in table {
            #expect(ReactionAggregate.applying(action, key: key, to: before) == after, "\(before) \(action) \(key)")
        }
        let shown = ReactionAggregate.showing([thumbs], pending: [(.add, "👍"), (.add, "🎉"), (.remove, "👍")])
        #expect(shown == [thumbs, Reaction(key: "🎉", count: 1, me: true)])
    }

    @Test func anInvalidKeyIsRefusedBeforeAnythingIsQueued() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            alice.client.setNetworkEnabled(false)
            let message = try alice.client.send("hello", to: conversation)
            for key in ["", "UPPER", "a b", "👍👍", String(repeating: "x", count: 33), "e\u{301}"] {
                #expect("\(key)") { try alice.client.react(key, to: message) } throws: { error in
                    (error as? PigeonClientError)?.code == .invalidArgument && "\(error)".contains("reaction key")
                }
            }
            #expect(try alice.client.pendingReactions().isEmpty)
            #expect(try alice.message(message.localId).reactions.isEmpty)
            #expect(try alice.client.unsentMessages().map(\.localId) == [message.localId])
            try alice.client.delete(localId: message.localId)
            #expect("a deleted message takes no reaction") { try alice.client.unreact("👍", from: message) } throws: { error in
                (error as? PigeonClientError)?.code == .invalidArgument
            }
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// Offline: two keys added, one added and taken back (nothing is sent for it), shown at once; online, both clients
    /// and the server agree, and the other user's reaction to the same key counts once per user.
    @Test(arguments: [PigeonClient.StreamTransport.webSocket, .serverSentEvents])
    func reactionsMadeOfflineConvergeWithTheServer(stream: PigeonClient.StreamTransport) async throws {
        try await withKitTestServer { server in
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) { $0.streamTransport = stream }
            let bob = try await TestDevice.register("bob", on: server.url) { $0.streamTransport = stream }
            let reacts = NIOLockedValueBox<[ReactRequest]>([])
            faulty.setOperationObserver { operation in
                if case .react(_, let request) = operation { reacts.withLockedValue { $0.append(request) } }
            }
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            try bob.client.send("lunch?", to: conversation)
            try await waitUntil("alice has it") { alice.received.contains { $0.body == "lunch?" } }
            let target = try #require(alice.received.first { $0.body == "lunch?" })
            let serverId = try #require(target.serverId)

            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            try alice.client.react("👍", to: target)
            try alice.client.react("❤️", to: target)
            try alice.client.unreact("❤️", from: target)
            let shown = try alice.client.react("party:parrot", to: target)
            let expected = [Reaction(key: "👍", count: 1, me: true), Reaction(key: "party:parrot", count: 1, me: true)]
            #expect(shown.reactions == expected, "shown at once")
            #expect(try alice.message(target.localId).reactions == expected)
            #expect(try alice.client.pendingReactions().map(\.key) == ["👍", "party:parrot"], "the ❤️ add and remove netted out")
            #expect(reacts.withLockedValue { $0 }.isEmpty)
            #expect(await eventually { alice.events.contains { if case .reactionsChanged(let m) = $0 { m.reactions == expected } else { false } } })

            alice.client.setNetworkEnabled(true)
            try await alice.client.sync()
            #expect(reacts.withLockedValue { $0 }.map(\.key) == ["👍", "party:parrot"], "nothing is sent for ❤️")
            #expect(reacts.withLockedValue { $0 }.allSatisfy { $0.serverId == serverId && $0.action == .add })
            #expect(try alice.client.pendingReactions().isEmpty)

            try await waitUntil("bob sees alice's reactions") {
                try bob.allMessages(in: conversation).first?.reactions
                    == [Reaction(key: "👍", count: 1, me: false), Reaction(key: "party:parrot", count: 1, me: false)]
            }
            let bobsCopy = try #require(bob.allMessages(in: conversation).first)
            try bob.client.react("👍", to: bobsCopy)
            let both = [Reaction(key: "👍", count: 2, me: true), Reaction(key: "party:parrot", count: 1, me: true)]
            try await waitUntil("alice hears bob's 👍") { try alice.message(target.localId).reactions == both }
            try await waitUntil("bob's is confirmed") {
                try bob.allMessages(in: conversation).first?.reactions
                    == [Reaction(key: "👍", count: 2, me: true), Reaction(key: "party:parrot", count: 1, me: false)]
            }
            let users = try await alice.client.reactionUsers(of: target)
            #expect(users.users.map { "\($0.userId) \($0.key)" }.sorted() == ["alice party:parrot", "alice 👍", "bob 👍"].sorted())
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.first?.reactions == both, "the server's aggregate as alice reads it")
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// A reaction to a message that still waits goes after it (it needs its serverId); a remove after an add that
    /// already left is sent too.
    @Test func aReactionToAWaitingMessageGoesOutAfterIt() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            let message = try alice.client.send("vote here", to: conversation)
            try alice.client.react("+1", to: message)
            #expect(try alice.message(message.localId).reactions == [Reaction(key: "+1", count: 1, me: true)])
            alice.client.setNetworkEnabled(true)
            try await alice.client.sync()
            try await waitUntil("bob sees the +1") { try bob.allMessages(in: conversation).first?.reactions == [Reaction(key: "+1", count: 1, me: false)] }
            try alice.client.unreact("+1", from: alice.message(message.localId))
            try await alice.client.sync()
            try await waitUntil("bob sees it gone") { try bob.allMessages(in: conversation).first?.reactions == [] }
            #expect(try alice.message(message.localId).reactions.isEmpty)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// Past the server's limit of keys per user, the reaction is refused (`conflict`): dropped from the outbox, its
    /// message shows what it showed without it, and the failure is announced.
    @Test func aReactionTheServerRefusesIsDroppedAndUndone() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            try bob.client.send("pick some", to: conversation)
            try await waitUntil("alice has it") { alice.received.contains { $0.body == "pick some" } }
            let target = try #require(alice.received.first { $0.body == "pick some" })
            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            let keys = (1...(ReactionLimits.keysPerUser + 1)).map { "k\($0)" }
            for key in keys { try alice.client.react(key, to: target) }
            #expect(try alice.message(target.localId).reactions.count == keys.count, "all shown at once")
            alice.client.setNetworkEnabled(true)
            try await alice.client.sync()
            let last = try #require(keys.last)
            #expect(try alice.client.pendingReactions().isEmpty, "the refused one left the outbox")
            #expect(try alice.message(target.localId).reactions.map(\.key) == Array(keys.dropLast()))
            #expect(await eventually {
                alice.events.contains {
                    if case .reactionFailed(let message, let key, let action, let error) = $0 {
                        message.localId == target.localId && key == last && action == .add && error.code == .conflict
                            && !message.reactions.contains { $0.key == last }
                    } else {
                        false
                    }
                }
            })
            try await waitUntil("bob has the twenty") { try bob.allMessages(in: conversation).first?.reactions.count == ReactionLimits.keysPerUser }
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// An answer overtaken by the stream: bob's 👍 is answered over HTTP with the aggregate as it was then, and that
    /// answer reaches his device only after alice's later 🎉 did, through the stream. The older answer does not take
    /// the 🎉 away (it did: the answer replaced the aggregate whole, and no event came after it to set it right).
    @Test func anAnswerOlderThanAnEventHeardMeanwhileDoesNotRollTheAggregateBack() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url) { $0.streamTransport = .serverSentEvents }
            let (bob, faulty) = try await TestDevice.registerFaulty("bob", on: server.url) { $0.streamTransport = .serverSentEvents }
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let message = try alice.client.send("overtaken", to: conversation)
            try await waitUntil("bob has it") { bob.received.contains { $0.body == "overtaken" } }
            let atBob = try #require(bob.received.first { $0.body == "overtaken" })
            faulty.holdReactionAnswers()
            try bob.client.react("👍", to: atBob)
            try await waitUntil("the server answered bob's 👍, held back") { faulty.heldReactionAnswers == 1 }
            try alice.client.react("🎉", to: try alice.message(message.localId))
            let both = [Reaction(key: "👍", count: 1, me: true), Reaction(key: "🎉", count: 1, me: false)]
            try await waitUntil("alice's 🎉 reached bob's device") { try bob.message(atBob.localId).reactions == both }
            faulty.releaseReactionAnswers()
            try await waitUntil("bob's 👍 is answered") { try bob.client.pendingReactions().isEmpty }
            #expect(try bob.message(atBob.localId).reactions == both)
            try await Task.sleep(for: .milliseconds(300))
            #expect(try bob.message(atBob.localId).reactions == both, "no later event was needed to keep 🎉")
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// Bob's device is away while alice reacts: the `reaction` event comes back with the stream's replay when it
    /// reconnects, and applying it again (a second replay, a catch-up) changes nothing.
    @Test func aMissedReactionArrivesAfterReconnectingAndCountsOnce() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let message = try bob.client.send("how was the trip?", to: conversation)
            try await bob.waitForStatus(message.localId, atLeast: .stored)
            try await waitUntil("alice has it") { alice.received.contains { $0.body == "how was the trip?" } }
            await bob.client.stop()

            let target = try #require(alice.received.first { $0.body == "how was the trip?" })
            try alice.client.react("🎉", to: target)
            try alice.client.react("❤️", to: target)
            try alice.client.unreact("🎉", from: target)
            try await alice.client.sync()
            let final = [Reaction(key: "❤️", count: 1, me: false)]

            let reopened = try TestDevice.open(credentials: bob.credentials, serverURL: server.url, databasePath: bob.databasePath)
            #expect(try reopened.message(message.localId).reactions.isEmpty, "nothing heard while away")
            reopened.client.start()
            try await waitUntil("the replay brings alice's reactions") { try reopened.message(message.localId).reactions == final }
            #expect(await eventually {
                reopened.events.contains { if case .reactionsChanged(let changed) = $0 { changed.localId == message.localId && changed.reactions == final } else { false } }
            })

            // The same events once more, as a second replay would bring them: nothing moves.
            let serverId = try #require(reopened.message(message.localId).serverId)
            let replayed: [Incoming] = [
                .event(.reaction(cursor: "0", ReactionEvent(
                    conversationId: conversation, serverId: serverId, key: "❤️", userId: "alice", action: .add,
                    reactions: [Reaction(key: "🎉", count: 1, me: false), Reaction(key: "❤️", count: 1, me: false)], at: 1))),
                .event(.reaction(cursor: "0", ReactionEvent(
                    conversationId: conversation, serverId: serverId, key: "🎉", userId: "alice", action: .remove, reactions: final, at: 2))),
            ]
            await reopened.client.stop()
            let before = reopened.events.count
            try await reopened.client.apply(replayed)
            try await reopened.client.apply(replayed)
            #expect(try reopened.message(message.localId).reactions == final, "set, never counted up")
            #expect(reopened.events.count >= before)
            await alice.client.stop()
        }
    }
}

extension Reaction {
    func with(key: String) -> Reaction { Reaction(key: key, count: count, me: me) }
}
