import Foundation
import PigeonKit
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// Consent and blocking (API.md 1.2) against a real in-process server: a blocked user's messages never reach the
/// blocker's device and never show ✓✓ on its own, while everyone else's keep flowing past them; invitations kept
/// apart until accepted (then the history comes) or declined (then gone from every device of the user).
@Suite(.timeLimit(.minutes(3)))
struct ConsentTests {
    static func invitesServer(_ configuration: inout ServerConfiguration) {
        configuration.appBackend.consent = .invites
    }

    @Test func aBlockedUsersLaterMessagesNeverReachTheBlockerAndStayUndeliveredOnItsSide() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            let mallory = try await TestDevice.register("mallory", on: server.url)
            try await startAll(alice, bob, mallory)
            let group = try await alice.client.createConversation(members: ["bob", "mallory"], name: "club")
            try await waitUntil("everyone has the group") {
                try bob.client.conversation(id: group.id) != nil && mallory.client.conversation(id: group.id) != nil
            }
            let before = try mallory.client.send("before the block", to: group.id)
            try await mallory.waitForStatus(before.localId, atLeast: .delivered)

            let blocked = try await alice.client.block("mallory")
            #expect(blocked.map(\.userId) == ["mallory"])
            #expect(try alice.client.blockedUsers().map(\.userId) == ["mallory"], "kept on the device")
            let refused = await #expect(throws: PigeonClientError.self) { try await alice.client.block("alice") }
            #expect(refused?.code == .invalidArgument)

            let hidden = try mallory.client.send("hidden one", to: group.id)
            try await mallory.waitForStatus(hidden.localId, atLeast: .stored)
            let fromBob = try bob.client.send("from bob", to: group.id)
            // Stored before mallory's next, so that the conversation ends on seqs alice's device never gets (sent at
            // once, mallory's could take the lower seq and bob's be the last: alice's device then rightly held more
            // than `lastSeq`, and this test failed one run in three).
            try await bob.waitForStatus(fromBob.localId, atLeast: .stored)
            let hiddenLast = try mallory.client.send("hidden two", to: group.id)
            try await mallory.waitForStatus(hiddenLast.localId, atLeast: .stored)
            let lastSeq = try #require(try mallory.message(hiddenLast.localId).seq)

            // Alice's device passes over the seqs it never gets: bob's message is announced and acknowledged (✓✓).
            try await bob.waitForStatus(fromBob.localId, atLeast: .delivered)
            try await alice.client.sync(timeout: .seconds(10))
            #expect(try alice.client.conversation(id: group.id)?.contiguousSeq == lastSeq)
            #expect(try alice.allMessages(in: group.id).map(\.body) == ["before the block", "from bob"])
            #expect(alice.received.filter { $0.conversationId == group.id && $0.kind == .message }.map(\.body) == ["before the block", "from bob"])

            // Mallory's messages wait for alice for good: bob has them, alice never will (✓, not ✓✓).
            try await waitUntil("bob's delivery of mallory's last message is counted") {
                try mallory.message(hiddenLast.localId).recipients?.delivered == 1
            }
            for message in [hidden, hiddenLast] {
                #expect(try mallory.message(message.localId).status == .stored, "\(message.body)")
                #expect(try mallory.message(message.localId).recipients == RecipientCounts(members: 2, delivered: 1, read: 0))
            }

            // Unblocked: what mallory sends now arrives; what was held back stays hidden.
            #expect(try await alice.client.unblock("mallory").isEmpty)
            #expect(try alice.client.blockedUsers().isEmpty)
            let afterward = try mallory.client.send("after the unblock", to: group.id)
            try await waitUntil("alice gets mallory's message after the unblock") {
                try alice.allMessages(in: group.id).contains { $0.body == "after the unblock" }
            }
            try await alice.client.catchUp()
            #expect(try alice.allMessages(in: group.id).map(\.body) == ["before the block", "from bob", "after the unblock"])
            // Ticks recover: once alice and bob read it, mallory's message after the unblock turns blue ✓✓, although
            // alice's watermark passes the two held back, which stay at ✓ for good.
            try alice.client.markRead(conversationId: group.id)
            try await waitUntil("bob has it") { try bob.allMessages(in: group.id).contains { $0.body == "after the unblock" } }
            try bob.client.markRead(conversationId: group.id)
            try await mallory.waitForStatus(afterward.localId, atLeast: .read)
            for message in [hidden, hiddenLast] {
                #expect(try mallory.message(message.localId).status == .stored, "\(message.body)")
                #expect(try mallory.message(message.localId).recipients == RecipientCounts(members: 2, delivered: 1, read: 1))
            }
            for device in [alice, bob, mallory] { await device.client.stop() }
        }
    }

    @Test func aBlockMadeOnAnotherDeviceReachesTheListAtTheNextCatchUp() async throws {
        try await withKitTestServer { server in
            let phone = try await TestDevice.register("alice", on: server.url)
            let laptop = try await TestDevice.register("alice", on: server.url, existing: phone)
            try await startAll(phone, laptop)
            try await phone.client.block("mallory")
            try await phone.client.block("trudy")
            try await laptop.client.catchUp()
            #expect(try laptop.client.blockedUsers().map(\.userId) == ["mallory", "trudy"])
            #expect(try laptop.client.blockedUsers() == phone.client.blockedUsers(), "the server's times")
            #expect(try await laptop.client.fetchBlockedUsers().count == 2)
            for device in [phone, laptop] { await device.client.stop() }
        }
    }

    /// Carol invites alice while alice's device is off: after its sync the invitation is there (not among the
    /// conversations), says who sent it, and holds nothing yet; carol's message waits for alice (✓). Accepted, the
    /// history comes, carol's message turns ✓✓, and new messages arrive live.
    @Test func anInvitationMadeWhileOfflineIsListedAfterSyncAndAcceptingBringsTheHistory() async throws {
        try await withKitTestServer(configure: Self.invitesServer) { server in
            let carol = try await TestDevice.register("carol", on: server.url)
            let alice = try await TestDevice.register("alice", on: server.url)
            try await startAll(carol)
            let crew = try await carol.client.createConversation(members: ["alice"], name: "Crew")
            #expect(crew.members.first { $0.userId == "alice" }?.membership == .invited)
            let welcome = try carol.client.send("welcome aboard", to: crew.id)
            try await carol.waitForStatus(welcome.localId, atLeast: .stored)

            alice.client.start()
            try await alice.waitUntilOnline()
            try await alice.client.sync(timeout: .seconds(10))
            let invitation = try #require(try alice.client.invitations().first)
            #expect(invitation.id == crew.id && invitation.invitedBy == "carol" && invitation.name == "Crew" && invitation.isInvitation)
            #expect(try alice.client.conversations().isEmpty, "invitations are listed apart")
            #expect(try alice.allMessages(in: crew.id).isEmpty, "nothing is fetched before accepting")
            #expect(await eventually { alice.events.contains { if case .invitationReceived(let c) = $0 { c.id == crew.id } else { false } } })
            let notYet = #expect(throws: PigeonClientError.self) { try alice.client.send("hi", to: crew.id) }
            #expect(notYet?.code == .invitationPending)
            #expect(try carol.message(welcome.localId).status == .stored, "an invited member counts: ✓ until she joins and has it")

            let joined = try await alice.client.acceptInvitation(crew.id)
            #expect(!joined.isInvitation && joined.invitedBy == nil)
            #expect(try alice.allMessages(in: crew.id).contains { $0.body == "welcome aboard" }, "the history came with the acceptance")
            #expect(try alice.client.conversations().map(\.id) == [crew.id] && alice.client.invitations().isEmpty)
            #expect(await eventually { alice.events.contains { if case .invitationAccepted(let c) = $0 { c.id == crew.id } else { false } } })
            try await carol.waitForStatus(welcome.localId, atLeast: .delivered)

            let live = try carol.client.send("live now", to: crew.id)
            try await waitUntil("alice gets carol's next message") { try alice.allMessages(in: crew.id).contains { $0.body == "live now" } }
            try await carol.waitForStatus(live.localId, atLeast: .delivered)
            _ = try alice.client.send("thanks", to: crew.id)
            try await waitUntil("carol gets alice's answer") { try carol.allMessages(in: crew.id).contains { $0.body == "thanks" } }
            for device in [carol, alice] { await device.client.stop() }
        }
    }

    /// Declined on alice's phone: gone there at once, gone from her laptop too, and carol sees that alice left.
    @Test func aDeclinedInvitationIsGoneFromEveryDeviceOfTheUser() async throws {
        try await withKitTestServer(configure: Self.invitesServer) { server in
            let carol = try await TestDevice.register("carol", on: server.url)
            let phone = try await TestDevice.register("alice", on: server.url)
            let laptop = try await TestDevice.register("alice", on: server.url, existing: phone)
            try await startAll(carol, phone, laptop)
            let crew = try await carol.client.createConversation(members: ["alice"], name: "Crew")
            for device in [phone, laptop] {
                try await waitUntil("the invitation reaches a device of alice's") { try device.client.invitations().map(\.id) == [crew.id] }
            }

            try await phone.client.declineInvitation(crew.id)
            #expect(try phone.client.conversation(id: crew.id) == nil && phone.client.invitations().isEmpty)
            try await waitUntil("the laptop drops it too") { try laptop.client.conversation(id: crew.id) == nil }
            #expect(await eventually { laptop.events.contains { if case .invitationRemoved(crew.id) = $0 { true } else { false } } })
            try await waitUntil("carol sees alice leave") {
                try carol.client.conversation(id: crew.id)?.members.map(\.userId) == ["carol"]
            }
            // A catch-up (what a reset or the periodic one does) brings nothing back.
            try await phone.client.catchUp()
            #expect(try phone.client.conversation(id: crew.id) == nil && phone.client.conversations().isEmpty)
            let gone = await #expect(throws: PigeonClientError.self) { try await phone.client.acceptInvitation(crew.id) }
            #expect(gone?.code == .unknownConversation)
            for device in [carol, phone, laptop] { await device.client.stop() }
        }
    }
}
