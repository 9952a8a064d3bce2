import Foundation
import GRDB
@testable import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Replies and threads (API.md 1.2) against a real in-process server: a reply's quote at once and on the other
/// device, a root's summary kept current from the stream and corrected by reads, counted once on a fresh device;
/// and the local database of an older PigeonKit migrated.
@Suite(.timeLimit(.minutes(3)))
struct ThreadTests {
    @Test func aReplyShowsItsQuoteAtOnceAndOnTheOtherDevice() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let long = "see you at the station at noon, by the clock under the big departures board near platform nine and three quarters"
            try bob.client.send(long, to: conversation)
            try await waitUntil("alice has it") { alice.received.contains { $0.body == long } }
            let quoted = try #require(alice.received.first { $0.body == long })

            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            let reply = try alice.client.send("on my way", to: conversation, replyTo: quoted)
            let preview = ReplyPreview(serverId: try #require(quoted.serverId), senderId: "bob", type: "text", body: long, deleted: false)
            #expect(reply.replyPreview == preview, "quoted from this device's copy, before anything is sent")
            #expect(preview.body.count == ReplyPreview.bodyLimit)
            #expect(reply.replyTo == PigeonMessage.MessageReference(serverId: quoted.serverId, localId: quoted.localId))
            #expect(reply.threadRoot == nil)

            alice.client.setNetworkEnabled(true)
            try await alice.waitForStatus(reply.localId, atLeast: .stored)
            try await waitUntil("bob has the reply") { bob.received.contains { $0.body == "on my way" } }
            let onBob = try #require(bob.received.first { $0.body == "on my way" })
            #expect(onBob.replyTo?.serverId == quoted.serverId)
            #expect(onBob.replyTo?.localId == (try bob.allMessages(in: conversation).first { $0.body == long })?.localId)
            #expect(onBob.replyPreview == preview)
            let stored = try await server.history(conversationId: conversation, token: bob.credentials.token)
            #expect(stored.last?.replyTo == quoted.serverId && stored.last?.replyPreview == preview)

            // The quoted message deleted: the quote on both devices says so.
            let original = try #require(bob.allMessages(in: conversation).first { $0.body == long })
            try bob.client.delete(localId: original.localId)
            try await waitUntil("alice's quote is emptied") { try alice.message(reply.localId).replyPreview?.deleted == true }
            #expect(try alice.message(reply.localId).replyPreview?.body == "")
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func aQuoteOfAWaitingMessageGoesOutWithItsServerId() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            let question = try alice.client.send("which train?", to: conversation)
            let followUp = try alice.client.send("the 9:15 one", to: conversation, replyTo: question, threadRoot: question)
            #expect(followUp.replyPreview?.serverId == "" && followUp.replyTo?.serverId == nil && followUp.replyTo?.localId == question.localId)
            alice.client.setNetworkEnabled(true)
            try await alice.client.sync()
            let questionId = try #require(alice.message(question.localId).serverId)
            let sent = try alice.message(followUp.localId)
            #expect(sent.replyTo?.serverId == questionId && sent.threadRoot?.serverId == questionId && sent.replyPreview?.serverId == questionId)
            let history = try await server.history(conversationId: conversation, token: bob.credentials.token)
            #expect(history.map(\.threadRoot) == [nil, questionId])
            #expect(history.first?.thread?.replyCount == 1)
            try await waitUntil("alice's root counts its reply") { try alice.message(question.localId).thread?.replyCount == 1 }
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// Replies bump their root's summary as they arrive, a deleted reply recomputes it, a thread page from the server
    /// agrees; and a device that catches up the whole conversation counts each reply once.
    @Test func aRootsSummaryFollowsItsRepliesAndCountsEachOnce() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            let carol = try await TestDevice.register("carol", on: server.url)
            try await startAll(alice, bob, carol)
            let conversation = try await makeConversation([alice, bob, carol])
            let root = try alice.client.send("weekend plans?", to: conversation)
            try await alice.waitForStatus(root.localId, atLeast: .stored)
            let rootId = try #require(alice.message(root.localId).serverId)
            for device in [bob, carol] {
                try await waitUntil("\(device.userId) has the root") { try device.allMessages(in: conversation).count == 1 }
            }
            let bobsRoot = try #require(bob.allMessages(in: conversation).first)
            let hike = try bob.client.send("hiking", to: conversation, threadRoot: bobsRoot)
            try await bob.waitForStatus(hike.localId, atLeast: .stored)
            await bob.client.stop()  // away while the others reply
            let carolsRoot = try #require(carol.allMessages(in: conversation).first)
            let beach = try carol.client.send("beach", to: conversation, threadRoot: carolsRoot)
            try await carol.waitForStatus(beach.localId, atLeast: .stored)
            let both = try #require(carol.message(beach.localId).storedAt)
            try await waitUntil("alice counts two replies") {
                try alice.message(root.localId).thread == ThreadSummary(replyCount: 2, lastReplyAt: both, lastReplySenders: ["carol", "bob"])
            }
            #expect(await eventually { alice.events.contains { if case .threadUpdated(let m) = $0 { m.thread?.replyCount == 2 } else { false } } })
            #expect(try alice.client.thread(of: alice.message(root.localId)).messages.map(\.body) == ["hiking", "beach"])
            #expect(try alice.allMessages(in: conversation).filter { $0.threadRoot?.serverId == rootId }.count == 2)

            // Alice's own reply counts once it is stored.
            let mine = try alice.client.send("both!", to: conversation, threadRoot: alice.message(root.localId))
            try await alice.waitForStatus(mine.localId, atLeast: .stored)
            try await waitUntil("alice counts three") { try alice.message(root.localId).thread?.replyCount == 3 }
            #expect(try alice.message(root.localId).thread?.lastReplySenders == ["alice", "carol", "bob"])

            // Bob, back, reads the thread from the server before anything else: the root's summary as read already
            // counts the replies that come with it.
            let bobsPage = try await bob.client.fetchThread(of: bob.message(bobsRoot.localId))
            #expect(bobsPage.replies.map(\.body) == ["hiking", "beach", "both!"])
            #expect(try bobsPage.root.thread?.replyCount == 3 && bob.message(bobsRoot.localId).thread?.replyCount == 3)
            bob.client.start()
            try await bob.client.sync()
            #expect(try bob.message(bobsRoot.localId).thread?.replyCount == 3)

            // A new device of alice catches up the whole conversation (the root read with its summary, then the replies
            // it already counts) and counts each reply once.
            let laptop = try await TestDevice.register("alice", on: server.url, existing: alice)
            laptop.client.start()
            try await laptop.client.sync()
            let laptopRoot = try #require(laptop.allMessages(in: conversation).first { $0.serverId == rootId })
            let before = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(laptopRoot.thread?.replyCount == 3 && laptopRoot.thread == before.first?.thread)

            // Carol deletes hers: recounted from the replies on the device.
            try carol.client.delete(localId: beach.localId)
            try await waitUntil("alice recounts") { try alice.message(root.localId).thread?.replyCount == 2 }
            #expect(try alice.message(root.localId).thread?.lastReplySenders == ["alice", "bob"])

            // The server's page agrees, and its copy is what the root shows.
            let page = try await alice.client.fetchThread(of: alice.message(root.localId))
            #expect(page.replies.map(\.body) == ["hiking", "", "both!"] || page.replies.map(\.body) == ["hiking", "both!"])
            #expect(page.root.localId == root.localId && page.root.thread?.replyCount == 2)
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(try alice.message(root.localId).thread == history.first?.thread)

            try await waitUntil("the laptop recounts too") { try laptop.message(laptopRoot.localId).thread?.replyCount == 2 }
            for device in [alice, bob, carol, laptop] { await device.client.stop() }
        }
    }

    /// A database written by the PigeonKit before reactions and threads (schema v3) opens: its messages, its
    /// unsent message (sent after the upgrade) and its stream position are kept, and the new fields work on them.
    @Test func aVersion3DatabaseIsMigrated() async throws {
        try await withKitTestServer { server in
            let bob = try await TestDevice.register("bob", on: server.url)
            bob.client.start()
            try await bob.waitUntilOnline()
            let credentials = try await PigeonClient.registerDevice(serverURL: server.url, userId: "alice")
            let conversation = try await bob.client.createConversation(members: ["alice"])
            let received = try bob.client.send("from before the upgrade", to: conversation.id)
            try await bob.waitForStatus(received.localId, atLeast: .stored)
            let stored = try #require(await server.history(conversationId: conversation.id, token: bob.credentials.token).first)

            // Alice's database as the previous PigeonKit left it: bob's message, and one of hers still unsent.
            let path = makeTemporaryDirectory() + "/pigeon.sqlite"
            let queue = try DatabaseQueue(path: path)
            try LocalDatabase.migrator.migrate(queue, upTo: "v3")
            try await queue.write { db in
                try db.execute(sql: "INSERT INTO device (id, userId, deviceId, needsFullSync) VALUES (1, ?, ?, 0)", arguments: [credentials.userId, credentials.deviceId])
                try db.execute(
                    sql: "INSERT INTO conversations (id, kind, createdAt, lastSeq, contiguousSeq, lastActivityAt) VALUES (?, 'direct', ?, 1, 1, ?)",
                    arguments: [conversation.id, conversation.createdAt, stored.storedAt])
                try db.execute(sql: """
                    INSERT INTO messages (conversationId, clientMessageId, serverId, seq, senderId, senderDeviceId, type, body, clientTimestamp,
                        acceptedAt, storedAt, isOutgoing, status, changeSeq)
                    VALUES (?, ?, ?, 1, 'bob', ?, 'text', ?, ?, ?, ?, 0, 'delivered', 1)
                    """, arguments: [conversation.id, stored.clientMessageId, stored.serverId, stored.senderDeviceId, stored.body,
                                     stored.clientTimestamp, stored.acceptedAt, stored.storedAt])
                try db.execute(sql: """
                    INSERT INTO messages (conversationId, clientMessageId, senderId, senderDeviceId, type, body, clientTimestamp, isOutgoing, status)
                    VALUES (?, 'c0ffee00-0000-4000-8000-000000000001', 'alice', ?, 'text', 'written before the upgrade', 1, 1, 'pending')
                    """, arguments: [conversation.id, credentials.deviceId])
                try db.execute(sql: "INSERT INTO outbox (localId, conversationId, clientMessageId) VALUES (?, ?, 'c0ffee00-0000-4000-8000-000000000001')",
                               arguments: [db.lastInsertedRowID, conversation.id])
            }
            try queue.close()

            let alice = try TestDevice.open(credentials: credentials, serverURL: server.url, databasePath: path)
            #expect(alice.client.localDatabaseRecovery == nil, "migrated, not rebuilt")
            let old = try #require(alice.allMessages(in: conversation.id).first { $0.body == "from before the upgrade" })
            #expect(old.reactions.isEmpty && old.replyTo == nil && old.threadRoot == nil && old.thread == nil)
            let unsent = try #require(alice.client.unsentMessages().first)
            #expect(unsent.body == "written before the upgrade")
            try alice.client.react("👍", to: old)
            try alice.client.send("and a quote", to: conversation.id, replyTo: old)
            alice.client.start()
            try await alice.client.sync()
            let history = try await server.history(conversationId: conversation.id, token: bob.credentials.token)
            #expect(history.map(\.body) == ["from before the upgrade", "written before the upgrade", "and a quote"])
            #expect(history.first?.reactions == [Reaction(key: "👍", count: 1, me: false)])
            #expect(history.last?.replyTo == stored.serverId)
            #expect(try alice.message(old.localId).reactions == [Reaction(key: "👍", count: 1, me: true)])
            let version = try await DatabaseQueue(path: path).read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations") }
            #expect(version.contains("v4"))
            await alice.client.stop()
            await bob.client.stop()
        }
    }
}

/// Read means shown (API.md, "Receipts"): an open main chat marks the main chat's messages read, not the thread
/// replies among them, so the read watermark the server gets stops below the first reply the user never opened (a
/// main chat used to turn such a reply blue); opening the thread moves it on; an explicit "mark everything read"
/// includes thread replies.
@Suite(.timeLimit(.minutes(3)))
struct ThreadReadTests {
    @Test func aThreadReplyIsReadOnlyOnceItsThreadIsShown() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let root = try bob.client.send("the plan", to: conversation)
            try await bob.waitForStatus(root.localId, atLeast: .stored)
            let reply = try bob.client.send("a detail, in the thread", to: conversation, threadRoot: try bob.message(root.localId))
            let after = try bob.client.send("back in the main chat", to: conversation)
            try await bob.waitForStatus(after.localId, atLeast: .stored)
            try await waitUntil("alice has the three") { try alice.client.conversation(id: conversation)?.contiguousSeq == 3 }

            // The main chat is shown: the root and the later main message, not the reply.
            try alice.client.markRead(conversationId: conversation)
            #expect(try alice.client.conversation(id: conversation)?.readSeq == 1)
            #expect(try alice.client.conversation(id: conversation)?.unreadCount == 1, "the thread reply is still unread")
            try await waitUntil("bob sees alice's read stop below the reply") {
                try bob.message(root.localId).status == .read
            }
            #expect(try bob.message(reply.localId).status != .read, "never blue for a reply alice did not open")
            #expect(try bob.message(after.localId).status != .read)

            // The thread is shown: the watermark moves on past both.
            let rootId = try #require(alice.allMessages(in: conversation).first { $0.body == "the plan" }?.serverId)
            try alice.client.markThreadRead(conversationId: conversation, threadRoot: rootId)
            #expect(try alice.client.conversation(id: conversation)?.readSeq == 3)
            #expect(try alice.client.conversation(id: conversation)?.unreadCount == 0)
            try await waitUntil("bob's reply and later message turn blue") {
                try bob.message(reply.localId).status == .read && bob.message(after.localId).status == .read
            }

            // Marking everything read (the app says so) includes thread replies.
            let second = try bob.client.send("another detail", to: conversation, threadRoot: try bob.message(root.localId))
            try await bob.waitForStatus(second.localId, atLeast: .stored)
            try await waitUntil("alice has it") { try alice.client.conversation(id: conversation)?.contiguousSeq == 4 }
            try alice.client.markRead(conversationId: conversation, includingThreadReplies: true)
            #expect(try alice.client.conversation(id: conversation)?.readSeq == 4)
        }
    }
}
