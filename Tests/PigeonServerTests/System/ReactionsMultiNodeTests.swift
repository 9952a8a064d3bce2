import Foundation
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// Reactions and threads on several PostgreSQL nodes sharing one database (API.md 1.2): reactions to one message are
/// serialized across nodes (two users at once count 2, two devices of one user count 1), every member's stream ends on
/// the final reactions, and thread replies processed on two nodes at once are all counted in their root's summary.
@Suite struct ReactionsMultiNodeTests {
    static let users = ["alice", "bob", "carol", "dave", "erin", "frank"]
    static let keys = ["👍", "ok", "🎉", "+1"]

    /// Every reaction event `userId`'s devices get in the conversation, in stream order.
    static func reactionEvents(of userId: String, in conversationId: String, store: any MessageStore) async throws -> [ReactionEvent] {
        let head = try await store.headPosition()
        var position = EventPosition.start(partitions: head.offsets.count)
        var events: [ReactionEvent] = []
        while true {
            let page = try await store.events(for: DeviceIdentity(userId: userId, deviceId: "\(userId)-phone"), after: position, limit: 500)
            guard !page.isEmpty else { return events }
            for event in page {
                position.advance(past: event)
                guard event.type == "reaction" else { continue }
                let decoded = try JSONDecoder().decode(ReactionEvent.self, from: Data(event.payload.utf8))
                if decoded.conversationId == conversationId { events.append(decoded) }
            }
        }
    }

    /// Runs `operations` at once, each on the node of its index modulo the nodes.
    static func concurrently(
        _ stores: [any MessageStore], _ operations: [@Sendable (any MessageStore) async throws -> Void]
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, operation) in operations.enumerated() {
                let store = stores[index % stores.count]
                group.addTask { try await operation(store) }
            }
            try await group.waitForAll()
        }
    }

    @Test func concurrentReactionsOnTwoNodesCountEachUserOnceAndEveryMemberEndsOnTheFinalReactions() async throws {
        try await StoreContractTests.withStores(.postgres, nodes: 2) { stores, _ in
            let conversation = try await stores[0].createConversation(creator: "alice", members: Array(Self.users.dropFirst()), name: nil)
            let item = StoreContractTests.item(conversation: conversation.id, sender: "bob", device: "bob-phone", body: "react to me")
            _ = try await stores[0].process([item])
            let serverId = item.entry.message.serverId
            let conversationId = conversation.id

            // Every user adds every key from two devices at once, one on each node (each add twice, on both nodes).
            var adds: [@Sendable (any MessageStore) async throws -> Void] = []
            for user in Self.users {
                for key in Self.keys {
                    for _ in 0..<2 {
                        adds.append { store in
                            _ = try await store.react(
                                conversationId: conversationId, serverId: serverId, userId: user, key: key, action: .add, at: WallClock.nowMillis())
                        }
                    }
                }
            }
            try await Self.concurrently(stores, adds.shuffled())

            // Then half of the users remove two keys, again from both nodes at once.
            let removed = Set(Self.users.enumerated().filter { $0.offset % 2 == 1 }.flatMap { user in Self.keys.prefix(2).map { [user.element, $0] } })
            var removes: [@Sendable (any MessageStore) async throws -> Void] = []
            for pair in removed {
                for _ in 0..<2 {
                    removes.append { store in
                        _ = try await store.react(
                            conversationId: conversationId, serverId: serverId, userId: pair[0], key: pair[1], action: .remove,
                            at: WallClock.nowMillis())
                    }
                }
            }
            try await Self.concurrently(stores, removes.shuffled())

            var held: [String: Set<String>] = [:]
            for user in Self.users {
                held[user] = Set(Self.keys.filter { !removed.contains([user, $0]) })
            }
            let changes = Self.users.count * Self.keys.count + removed.count
            for user in Self.users {
                let read = try await stores[Self.users.firstIndex(of: user)! % 2].messages(
                    conversationId: conversationId, after: 0, before: nil, limit: 10, visibleFrom: 0, reader: user
                ).messages
                let reactions = try #require(read.first { $0.serverId == serverId }).reactions
                #expect(reactions.count == Self.keys.count)
                for reaction in reactions {
                    let holders = Self.users.filter { held[$0]!.contains(reaction.key) }
                    #expect(reaction.count == holders.count, "\(reaction.key)")
                    #expect(reaction.me == holders.contains(user), "\(user) \(reaction.key)")
                }
                let events = try await Self.reactionEvents(of: user, in: conversationId, store: stores[1])
                #expect(events.count == changes, "\(user): one event per change, none for a repeated add or remove")
                #expect(events.last?.reactions == reactions, "\(user)'s stream ends on the final reactions")
                #expect(events.allSatisfy { $0.serverId == serverId })
            }

            // Who reacted: every holder once per key, ascending by user then key, paged by whole users.
            var listed: [ReactionUser] = []
            var after: String?
            var pages = 0
            repeat {
                let page = try await stores[1].reactionUsers(
                    conversationId: conversationId, serverId: serverId, reader: "carol", key: nil, after: after, limit: 4)
                #expect(Set(page.users.map(\.userId)).count <= 4)
                listed += page.users
                after = page.users.last?.userId
                pages += 1
                if !page.hasMore { break }
            } while pages < 10
            #expect(pages == 2)
            let expected = Self.users.sorted().flatMap { user in held[user]!.sorted().map { [user, $0] } }
            #expect(listed.map { [$0.userId, $0.key] } == expected)
        }
    }

    @Test func threadRepliesProcessedOnTwoNodesAtOnceAreAllCountedAndDeletesRecountThem() async throws {
        try await StoreContractTests.withStores(.postgres, nodes: 2) { stores, _ in
            let conversation = try await stores[0].createConversation(creator: "alice", members: ["bob", "carol", "dave"], name: nil)
            let rootItem = StoreContractTests.item(conversation: conversation.id, sender: "alice", body: "the root")
            _ = try await stores[0].process([rootItem])
            let root = rootItem.entry.message.serverId
            let conversationId = conversation.id
            let senders = ["alice", "bob", "carol", "dave"]

            // 2 nodes × 10 batches × 4 replies, every batch on both nodes at once.
            let replies = NIOLockedValueBox<[BufferedMessage]>([])
            var batches: [@Sendable (any MessageStore) async throws -> Void] = []
            for node in 0..<2 {
                batches.append { store in
                    for round in 0..<10 {
                        let batch = (0..<4).map { i in
                            let sender = senders[(node + round + i) % senders.count]
                            var item = StoreContractTests.item(
                                conversation: conversationId, sender: sender, device: "\(sender)-\(node)", body: "reply \(node).\(round).\(i)")
                            item.entry.message.threadRoot = root
                            return item
                        }
                        let results = try await store.process(batch)
                        #expect(results.allSatisfy { if case .stored = $0 { true } else { false } })
                        replies.withLockedValue { $0 += batch.map(\.entry.message) }
                    }
                }
            }
            try await Self.concurrently(stores, batches)

            let stored = replies.withLockedValue { $0 }
            try await Self.expectThread(of: root, in: conversationId, replies: stored.count, stores: stores)

            // Deletes of eight replies by their senders, four batches on each node at once.
            let deleted = Array(stored.shuffled().prefix(8))
            var deletes: [@Sendable (any MessageStore) async throws -> Void] = []
            for pair in stride(from: 0, to: deleted.count, by: 2) {
                deletes.append { store in
                    let batch = deleted[pair..<pair + 2].map { reply in
                        var item = StoreContractTests.item(
                            conversation: conversationId, sender: reply.senderId, device: reply.senderDeviceId, body: "")
                        item.entry.message.type = ServerMessageType.delete
                        item.entry.message.body = MessageLifecycle.deleteText(serverId: reply.serverId)
                        return item
                    }
                    let results = try await store.process(batch)
                    #expect(results.allSatisfy { if case .stored = $0 { true } else { false } })
                }
            }
            try await Self.concurrently(stores, deletes)
            try await Self.expectThread(of: root, in: conversationId, replies: stored.count - deleted.count, stores: stores)
        }
    }

    /// The root's summary on every node agrees with its replies as the thread page lists them: the count of those not
    /// deleted, the newest one's store time, its newest distinct senders.
    static func expectThread(of root: String, in conversationId: String, replies count: Int, stores: [any MessageStore]) async throws {
        for store in stores {
            let page = try #require(
                try await store.threadMessages(
                    conversationId: conversationId, root: root, after: 0, before: nil, limit: 500, visibleFrom: 0, reader: "bob"))
            #expect(!page.hasMore)
            #expect(page.messages.allSatisfy { $0.threadRoot == root })
            #expect(page.messages.map(\.seq) == page.messages.map(\.seq).sorted())
            let live = page.messages.filter { $0.deletedAt == nil }.reversed()
            #expect(live.count == count)
            var newestSenders: [String] = []
            for reply in live where !newestSenders.contains(reply.senderId) && newestSenders.count < ThreadSummary.senderLimit {
                newestSenders.append(reply.senderId)
            }
            let thread = try #require(page.root.thread)
            #expect(thread.replyCount == count)
            #expect(thread.lastReplyAt == live.first?.storedAt)
            #expect(thread.lastReplySenders == newestSenders)
        }
    }
}
