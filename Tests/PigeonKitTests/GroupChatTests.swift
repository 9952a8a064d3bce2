import Foundation
import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Group chats (API.md 1.1) against a real in-process server: joining late, being removed, roles, and the
/// per-member ticks.
@Suite(.timeLimit(.minutes(3)))
struct GroupChatTests {
    /// Carol is added while her laptop is off: her phone and then her laptop (back with its old cursor) hold exactly
    /// the conversation from the seq that added her on, nothing older and nothing missing.
    @Test func aMemberAddedWhileItsOtherDeviceIsOfflineCatchesUpExactlyFromItsJoinedSeq() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            let carolPhone = try await TestDevice.register("carol", on: server.url)
            let carolLaptop = try await TestDevice.register("carol", on: server.url, existing: carolPhone)
            try await startAll(alice, bob, carolPhone, carolLaptop)
            // The laptop has a cursor of its own (a conversation it already saw) when it goes away.
            _ = try await makeConversation([alice, carolPhone, carolLaptop])
            try await waitUntil("the laptop has a cursor") { try carolLaptop.client.conversations().count == 1 }
            await carolLaptop.client.stop()

            let group = try await alice.client.createConversation(members: ["bob"], name: "club")
            // Bob learns of the group from his stream, which may come after alice's answer.
            try await waitUntil("bob has the group") { try bob.client.conversation(id: group.id) != nil }
            let before = [try alice.client.send("one", to: group.id), try bob.client.send("two", to: group.id), try alice.client.send("three", to: group.id)]
            for message in [before[0], before[2]] { try await alice.waitForStatus(message.localId, atLeast: .delivered) }
            let afterAdd = try await alice.client.addMembers(["carol"], to: group.id)
            let joined = try #require(afterAdd.members.first { $0.userId == "carol" }?.joinedSeq)
            #expect(joined == 4)
            // Nothing before her join counts (3); her phone is online and may have acknowledged the add (4) already
            // when the answer is read.
            let carolMarks = afterAdd.members.first { $0.userId == "carol" }.map { [$0.deliveredSeq, $0.readSeq] }
            #expect(carolMarks == [3, 3] || carolMarks == [4, 3], "nothing before her join counts: \(String(describing: carolMarks))")
            let after = [try alice.client.send("four", to: group.id), try bob.client.send("five", to: group.id), try alice.client.send("six", to: group.id)]
            for message in [after[0], after[2]] { try await alice.waitForStatus(message.localId, atLeast: .stored) }

            let expected = try await server.history(conversationId: group.id, token: alice.credentials.token).filter { $0.seq >= joined }
            #expect(expected.map(\.seq) == [4, 5, 6, 7])
            func check(_ device: TestDevice, _ name: String) async throws {
                // Seq 7 may come live before the conversation it fetched (it was unknown there) is saved.
                try await waitUntil("\(name) has seq 7 and the conversation", describe: { "\((try? device.allMessages(in: group.id).map(\.seq)) ?? [])" }) {
                    let conversation = try device.client.conversation(id: group.id)
                    return conversation?.contiguousSeq == 7 && conversation?.name == "club"
                }
                let messages = try device.allMessages(in: group.id)
                #expect(messages.map(\.seq) == [4, 5, 6, 7], "\(name): nothing older than its join, nothing missing")
                #expect(messages.map(\.serverId) == expected.map(\.serverId))
                #expect(messages.first?.kind == .membersChange(MembersChange(action: .added, userIds: ["carol"], role: .member, by: "alice")))
                let found = try device.client.conversation(id: group.id)
                let conversation = try #require(found)
                #expect(conversation.name == "club" && conversation.kind == .group && conversation.members.map(\.userId) == ["alice", "bob", "carol"])
                #expect(conversation.members.first { $0.userId == "carol" }?.joinedSeq == 4)
                #expect(conversation.lastSeq == 7 && conversation.isMember)
            }
            try await check(carolPhone, "carol's phone")
            #expect(carolPhone.received.filter { $0.conversationId == group.id }.map(\.seq) == [4, 5, 6, 7], "announced once each, in order")

            carolLaptop.client.start()
            try await check(carolLaptop, "carol's laptop")

            // ✓✓ of the messages before carol joined never needed her; those after need her devices too.
            for message in before where message.senderId == "alice" { #expect(try alice.message(message.localId).status == .delivered) }
            try await alice.waitForStatus(after[2].localId, atLeast: .delivered)
            #expect(try alice.message(after[2].localId).recipients == RecipientCounts(members: 2, delivered: 2, read: 0))
            for device in [alice, bob, carolPhone, carolLaptop] { await device.client.stop() }
        }
    }

    /// Bob is removed while alice keeps writing: his phone (online) and his laptop (back later with an older cursor)
    /// hold the conversation up to the message that removed him, and nothing after it.
    @Test func aRemovedMemberReceivesNothingAfterItsRemovalAlsoWithAnOldCursor() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bobPhone = try await TestDevice.register("bob", on: server.url)
            let bobLaptop = try await TestDevice.register("bob", on: server.url, existing: bobPhone)
            let carol = try await TestDevice.register("carol", on: server.url)
            try await startAll(alice, bobPhone, bobLaptop, carol)
            let direct = try await makeConversation([alice, bobPhone, bobLaptop])
            let group = try await alice.client.createConversation(members: ["bob", "carol"], name: "plans")
            try await waitUntil("bob's devices have the group") {
                try bobPhone.client.conversation(id: group.id) != nil && bobLaptop.client.conversation(id: group.id) != nil
            }
            await bobLaptop.client.stop()

            try alice.client.send("before 1", to: group.id)
            try carol.client.send("before 2", to: group.id)
            try await waitUntil("both are stored") { try alice.client.conversation(id: group.id)?.contiguousSeq == 2 }
            let removed = try await alice.client.removeMember("bob", from: group.id)
            #expect(removed.members.map(\.userId) == ["alice", "carol"])
            for index in 1...5 { try (index.isMultiple(of: 2) ? carol : alice).client.send("after \(index)", to: group.id) }
            try await waitUntil("alice has all 8") { try alice.client.conversation(id: group.id)?.contiguousSeq == 8 }
            // The stream of one embedded server is one ordered log: once the marker (sent after everything above) is on
            // a device of bob's, every event it would get of the group is there too.
            let marker = try alice.client.send("marker", to: direct)
            try await alice.waitForStatus(marker.localId, atLeast: .stored)

            func check(_ device: TestDevice, _ name: String) async throws {
                try await waitUntil("\(name) has the marker") { try device.allMessages(in: direct).contains { $0.body == "marker" } }
                let messages = try device.allMessages(in: group.id)
                #expect(messages.map(\.seq) == [1, 2, 3], "\(name): \(messages.map(\.body))")
                #expect(messages.last?.kind == .membersChange(MembersChange(action: .removed, userIds: ["bob"], by: "alice")))
                let found = try device.client.conversation(id: group.id)
                let conversation = try #require(found)
                #expect(conversation.leftAtSeq == 3 && conversation.members.isEmpty)
                #expect(await eventually { device.events.contains { if case .leftConversation(let c, _) = $0 { c.id == group.id } else { false } } })
                let refused = #expect(throws: PigeonClientError.self) { try device.client.send("hello?", to: group.id) }
                #expect(refused?.code == .notMember)
            }
            try await check(bobPhone, "bob's phone")
            bobLaptop.client.start()
            try await check(bobLaptop, "bob's laptop")
            // A catch-up (what a reset or the periodic one does) changes nothing: the server answers 404 there.
            try await bobLaptop.client.catchUp()
            #expect(try bobLaptop.allMessages(in: group.id).map(\.seq) == [1, 2, 3])
            #expect(try bobLaptop.client.conversation(id: group.id)?.leftAtSeq == 3)
            #expect(try alice.client.conversation(id: group.id)?.members.map(\.userId) == ["alice", "carol"])
            for device in [alice, bobPhone, bobLaptop, carol] { await device.client.stop() }
        }
    }

    @Test func rolesNamesAndLeavingAreCheckedAnnouncedAndReportedClearly() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            let carol = try await TestDevice.register("carol", on: server.url)
            try await startAll(alice, bob, carol)
            let group = try await alice.client.createConversation(members: ["bob", "carol"])
            let direct = try await alice.client.createConversation(members: ["bob"])
            try await waitUntil("bob has both") { try bob.client.conversations().count == 2 }

            let forbidden = await #expect(throws: PigeonClientError.self) { try await bob.client.addMembers(["dave"], to: group.id) }
            #expect(forbidden?.code == .forbidden && forbidden?.httpStatus == 403, "\(String(describing: forbidden))")
            let directRefused = await #expect(throws: PigeonClientError.self) { try await alice.client.addMembers(["dave"], to: direct.id) }
            #expect(directRefused?.code == .invalidArgument)
            let ownerRole = await #expect(throws: PigeonClientError.self) { try await alice.client.addMembers(["dave"], to: group.id, role: .owner) }
            #expect(ownerRole?.code == .invalidArgument)
            let notAMember = await #expect(throws: PigeonClientError.self) { try await alice.client.removeMember("zed", from: group.id) }
            #expect(notAMember?.code == .invalidArgument, "\(String(describing: notAMember))")
            #expect(try alice.client.conversation(id: group.id)?.isMember == true, "a 404 about someone else is not a 404 about alice")

            let promoted = try await alice.client.setRole(.admin, for: "bob", in: group.id)
            #expect(promoted.role(of: "bob") == .admin)
            try await waitUntil("bob hears he is an admin") {
                bob.events.contains { if case .roleChanged(let c, let change) = $0 { c.role(of: "bob") == .admin && change.userIds == ["bob"] } else { false } }
            }
            let renamed = try await bob.client.rename(group.id, to: "Friday")
            #expect(renamed.name == "Friday")
            try await waitUntil("carol sees the new name") {
                carol.events.contains { if case .conversationRenamed(let c, _) = $0 { c.name == "Friday" } else { false } }
            }
            #expect(try carol.client.conversation(id: group.id)?.name == "Friday")
            let carolsCannot = await #expect(throws: PigeonClientError.self) { try await carol.client.rename(group.id, to: "Mine") }
            #expect(carolsCannot?.code == .forbidden)

            // The owner leaves: bob (the admin) becomes owner; alice keeps her copy, read-only.
            let left = try await alice.client.leave(group.id)
            #expect(left.leftAtSeq != nil && left.members.isEmpty)
            try await waitUntil("bob hears he is the owner") {
                bob.events.contains { if case .roleChanged(let c, let change) = $0 { change.role == .owner && c.role(of: "bob") == .owner } else { false } }
            }
            #expect(try bob.client.conversation(id: group.id)?.members.map(\.userId) == ["bob", "carol"])
            try await waitUntil("alice's device hears she left") {
                alice.events.contains { if case .leftConversation(let c, let change) = $0 { c.id == group.id && change.action == .left } else { false } }
            }
            let gone = await #expect(throws: PigeonClientError.self) { try await alice.client.addMembers(["dave"], to: group.id) }
            #expect(gone?.code == .notMember)
            try await waitUntil("carol has every change") { try carol.client.conversation(id: group.id)?.contiguousSeq == 4 }
            #expect(try carol.allMessages(in: group.id).compactMap { message -> MembersChange.Action? in
                if case .membersChange(let change) = message.kind { return change.action } else { return nil }
            } == [.role, .renamed, .left, .role], "in the conversation's order")
            for device in [alice, bob, carol] { await device.client.stop() }
        }
    }

    /// Alice's message in a group of four: "delivered to n of 3" as each member's device gets it, "read by n" as each
    /// reads it; ✓✓ and blue ✓✓ only when all have.
    @Test func perMemberCountsInAFourMemberGroupFollowEachMember() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let others = [
                try await TestDevice.register("bob", on: server.url), try await TestDevice.register("carol", on: server.url),
                try await TestDevice.register("dave", on: server.url),
            ]
            try await startAll(alice)
            let group = try await alice.client.createConversation(members: others.map(\.userId), name: "four")
            let message = try alice.client.send("who is in?", to: group.id)
            try await alice.waitForStatus(message.localId, atLeast: .stored)
            #expect(try alice.message(message.localId).recipients == RecipientCounts(members: 3, delivered: 0, read: 0))

            for (index, device) in others.enumerated() {
                device.client.start()
                try await waitUntil("delivered to \(index + 1) of 3") { try alice.message(message.localId).recipients?.delivered == index + 1 }
                #expect(try alice.message(message.localId).status == (index == 2 ? .delivered : .stored))
            }
            for (index, device) in others.enumerated() {
                try device.client.markRead(conversationId: group.id)
                try await waitUntil("read by \(index + 1) of 3") { try alice.message(message.localId).recipients?.read == index + 1 }
                #expect(try alice.message(message.localId).status == (index == 2 ? .read : .delivered))
            }
            func counts() -> [RecipientCounts] {
                alice.events.compactMap { event -> RecipientCounts? in
                    if case .recipientsChanged(let changed) = event, changed.localId == message.localId { return changed.recipients } else { return nil }
                }
            }
            #expect(await eventually { counts().count == 7 }, "each change announced once: \(counts())")
            let counts = counts()
            #expect(counts.map(\.delivered) == [0, 1, 2, 3, 3, 3, 3], "\(counts)")
            #expect(counts.map(\.read) == [0, 0, 0, 0, 1, 2, 3], "\(counts)")
            let statuses = alice.statusHistory(localId: message.localId)
            #expect(isMonotonic(statuses) && statuses.suffix(2) == [.delivered, .read], "\(statuses)")
            for device in [alice] + others { await device.client.stop() }
        }
    }
}
