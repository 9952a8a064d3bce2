import Foundation
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``WebhookStore`` contract and the outbox's recording, checked directly against both stores
/// (``StoreContractTests/withStores(_:nodes:faultInjector:webhooks:_:)``).
@Suite struct WebhookStoreContractTests {
    typealias Kind = StoreContractTests.Kind
    static let all = WebhookOutbox(types: Set(WebhookEventType.allCases))

    /// Every event recorded, in delivery order: claims heads and completes them until none is left.
    /// The webhook role of `store`'s backend.
    static func deliveries(_ store: any MessageStore) throws -> any WebhookStore {
        if let sqlite = store as? SQLiteMessageStore { return sqlite.webhookDeliveries }
        if let postgres = store as? PostgresMessageStore { return postgres.webhookDeliveries }
        throw TestFailure("no webhook role for \(type(of: store))")
    }

    static func drain(_ store: any MessageStore, node: String = "test-node") async throws -> [WebhookDelivery] {
        let webhooks = try deliveries(store)
        var delivered: [WebhookDelivery] = []
        for _ in 0..<1_000 {
            let now = WallClock.nowMillis()
            let claimed = try await webhooks.claimWebhookEvents(now: now, limit: 100, leaseUntil: now + 60_000, node: node)
            if claimed.isEmpty { return delivered }
            for event in claimed {
                delivered.append(event)
                try await webhooks.completeWebhookEvent(event)
            }
        }
        throw TestFailure("the outbox does not empty")
    }

    static func json(_ event: WebhookDelivery) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(event.body.utf8)) as? [String: Any])
    }

    static func data(_ event: WebhookDelivery) throws -> [String: Any] {
        try #require(try json(event)["data"] as? [String: Any])
    }

    static func lifecycle(_ type: String, conversation: String, body: String, sender: String = "alice", device: String = "alice-phone") -> ProcessingItem {
        var item = StoreContractTests.item(conversation: conversation, sender: sender, device: device)
        item.entry.message.type = type
        item.entry.message.body = body
        return item
    }

    /// Each write records its event in its own transaction, with the data API.md gives it, in the order of the
    /// commits per key: a conversation's events, and a user's device events.
    @Test(arguments: Kind.allCases) func everyWriteRecordsItsEvent(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind, webhooks: Self.all) { stores, _ in
            let store = stores[0]
            let device = try await store.registerDevice(userId: "dora", name: nil, tokenHash: newId(), rule: StoreContractTests.openRule)
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: "g")
            let items = (1...3).map { StoreContractTests.item(conversation: conversation.id, body: "m\($0)") }
            #expect(StoreContractTests.seqs(try await store.process(items)) == [1, 2, 3])
            let first = items[0].entry.message.serverId
            let edit = Self.lifecycle(ServerMessageType.edit, conversation: conversation.id, body: MessageLifecycle.editText(serverId: first, body: "m1!"))
            #expect(StoreContractTests.seqs(try await store.process([edit])) == [4])
            _ = try await store.react(
                conversationId: conversation.id, serverId: items[1].entry.message.serverId, userId: "bob", key: "🎉", action: .add, at: WallClock.nowMillis())
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .delivered, upToSeq: 4)
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .read, upToSeq: 3)
            let delete = Self.lifecycle(
                ServerMessageType.delete, conversation: conversation.id, body: MessageLifecycle.deleteText(serverId: first, by: "service"))
            #expect(StoreContractTests.seqs(try await store.process([delete])) == [5])
            let own = Self.lifecycle(
                ServerMessageType.delete, conversation: conversation.id, body: MessageLifecycle.deleteText(serverId: items[2].entry.message.serverId))
            #expect(StoreContractTests.seqs(try await store.process([own])) == [6])
            _ = try await store.changeMembership(
                conversationId: conversation.id, by: DeviceIdentity(userId: "alice", deviceId: "alice-phone"), .add(userIds: ["carol"], role: .member),
                maxMembers: 100)
            _ = try await store.revokeDevice(device, at: WallClock.nowMillis())

            let events = try await Self.drain(store)
            let inConversation = events.filter { $0.orderingKey == conversation.id }
            #expect(
                inConversation.map(\.type) == [
                    "conversation.created", "message.stored", "message.stored", "message.stored", "message.edited", "reaction", "receipt.read",
                    "message.deleted", "message.deleted", "members.changed",
                ])
            #expect(events.filter { $0.orderingKey == "user:dora" }.map(\.type) == ["device.registered", "device.revoked"])
            #expect(Set(events.map(\.id)).count == events.count, "an id per event")
            for event in events {
                let body = try Self.json(event)
                #expect(body["id"] as? String == event.id && body["type"] as? String == event.type)
                #expect((body["createdAt"] as? NSNumber)?.int64Value == event.createdAt)
            }
            let stored = try inConversation.filter { $0.type == "message.stored" }.map { try #require(try Self.data($0)["message"] as? [String: Any]) }
            #expect(stored.map { $0["body"] as? String } == ["m1", "m2", "m3"])
            #expect(stored.map { ($0["seq"] as? NSNumber)?.intValue } == [1, 2, 3])
            let edited = try #require(try Self.data(inConversation[4])["message"] as? [String: Any])
            #expect(edited["serverId"] as? String == first && edited["body"] as? String == "m1!" && (edited["seq"] as? NSNumber)?.intValue == 1)
            #expect(edited["editedAt"] != nil && edited["deletedAt"] == nil)
            let reaction = try Self.data(inConversation[5])
            #expect(reaction["key"] as? String == "🎉" && reaction["userId"] as? String == "bob" && reaction["action"] as? String == "add")
            let read = try Self.data(inConversation[6])
            #expect(read["userId"] as? String == "bob" && (read["upToSeq"] as? NSNumber)?.intValue == 3, "only the read watermark makes an event")
            #expect(try Self.data(inConversation[7])["by"] as? String == "service", "the by a delete records")
            #expect(try Self.data(inConversation[8])["by"] as? String == "alice", "by default the delete's sender")
            let members = try Self.data(inConversation[9])
            #expect((members["seq"] as? NSNumber)?.intValue == 7 && (members["change"] as? [String: Any])?["action"] as? String == "added")
            let created = try #require(try Self.data(inConversation[0])["conversation"] as? [String: Any])
            #expect(created["id"] as? String == conversation.id)
        }
    }

    /// What a rolled-back transaction wrote is never reported, and a message is reported once: a batch whose first
    /// try is rolled back (a message failing in it; on PostgreSQL also a one-statement batch whose check fails because
    /// another node stored in the conversation) records the events of what its next try commits, once each.
    @Test(arguments: Kind.allCases) func aRolledBackBatchRecordsNothing(_ kind: Kind) async throws {
        let injector: ProcessingFaultInjector = { message in if message.body == "poison" { throw TestFailure("injected") } }
        try await StoreContractTests.withStores(kind, nodes: kind == .postgres ? 2 : 1, faultInjector: injector, webhooks: Self.all) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let other = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let results = try await store.process([
                StoreContractTests.item(conversation: other.id, body: "one"), StoreContractTests.item(conversation: conversation.id, body: "poison"),
                StoreContractTests.item(conversation: other.id, body: "two"),
            ])
            #expect(StoreContractTests.seqs(results) == [1, nil, 2])
            var expected = ["one", "two"]
            if stores.count > 1 {
                // Node 0 knows the conversation's last seq; node 1 moves it; node 0's one-statement batch fails its check
                // (rolled back) and is stored under the locks.
                #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: conversation.id, body: "a")])) == [1])
                #expect(StoreContractTests.seqs(try await stores[1].process([StoreContractTests.item(conversation: conversation.id, body: "b")])) == [2])
                #expect(StoreContractTests.seqs(try await store.process([StoreContractTests.item(conversation: conversation.id, body: "c")])) == [3])
                expected += ["a", "b", "c"]
            }
            let stored = try await Self.drain(store).filter { $0.type == "message.stored" }
                .map { event -> String in
                    let message = try #require(try Self.data(event)["message"] as? [String: Any])
                    return try #require(message["body"] as? String)
                }
            #expect(stored.sorted() == expected.sorted(), "each committed message once, nothing of the rolled-back tries")
        }
    }

    /// Only the head of a key is handed out, under a lease: a claimed head holds its key back; a lease that ends is
    /// claimed again by any node (at least once); a retry holds the key back until it is due; a dead letter lets the
    /// key go on and a replay puts it behind the key's later events, with the same id.
    @Test(arguments: Kind.allCases) func headsLeasesRetriesDeadLettersAndReplays(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind, webhooks: WebhookOutbox(types: [.messageStored])) { stores, _ in
            let store = stores[0]
            let outbox = try Self.deliveries(store)
            let a = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let b = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            _ = try await store.process((1...3).map { StoreContractTests.item(conversation: a.id, body: "a\($0)") })
            _ = try await store.process([StoreContractTests.item(conversation: b.id, body: "b1")])
            func body(_ event: WebhookDelivery) throws -> String? { try #require(try Self.data(event)["message"] as? [String: Any])["body"] as? String }
            let now = WallClock.nowMillis()
            #expect(try await outbox.webhookStats().pending == 4)

            let first = try await outbox.claimWebhookEvents(now: now, limit: 10, leaseUntil: now + 60_000, node: "n1")
            #expect(try first.map(body) == ["a1", "b1"], "one head per key, oldest first")
            #expect(try await outbox.claimWebhookEvents(now: now, limit: 10, leaseUntil: now + 60_000, node: "n2").isEmpty, "leased heads hold their keys")
            // n1 died: once the lease ends, another node claims the same events.
            let taken = try await outbox.claimWebhookEvents(now: now + 60_001, limit: 10, leaseUntil: now + 120_000, node: "n2")
            #expect(taken.map(\.id) == first.map(\.id))
            try await outbox.completeWebhookEvent(taken[0])
            let second = try await outbox.claimWebhookEvents(now: now + 60_002, limit: 10, leaseUntil: now + 120_000, node: "n2")
            #expect(try second.map(body) == ["a2"], "completed: the next of its key is the head")
            try await outbox.retryWebhookEvent(second[0], error: "the endpoint answered 500", retryAt: now + 70_000, node: "n2")
            #expect(try await outbox.claimWebhookEvents(now: now + 60_003, limit: 10, leaseUntil: now + 120_000, node: "n2").isEmpty, "a3 waits behind a2")
            let retried = try await outbox.claimWebhookEvents(now: now + 70_000, limit: 10, leaseUntil: now + 130_000, node: "n2")
            #expect(retried.map(\.id) == [second[0].id] && retried[0].attempts == 1 && retried[0].body == second[0].body)
            try await outbox.deadLetterWebhookEvent(retried[0], error: "the endpoint answered 500", at: now + 70_001)
            let dead = try await outbox.deadWebhookEvents(limit: 10)
            #expect(dead.map(\.id) == [second[0].id] && dead[0].attempts == 2 && dead[0].lastError == "the endpoint answered 500")
            #expect(dead[0].body == second[0].body && dead[0].orderingKey == a.id && dead[0].type == "message.stored")
            var stats = try await outbox.webhookStats()
            #expect(stats.pending == 2 && stats.dead == 1 && stats.oldestPendingAt != nil)

            let third = try await outbox.claimWebhookEvents(now: now + 70_002, limit: 10, leaseUntil: now + 130_000, node: "n2")
            #expect(try third.map(body) == ["a3"], "a dead letter lets its key go on")
            #expect(try await outbox.replayWebhookEvent(id: second[0].id, now: now + 70_003))
            #expect(try await outbox.replayWebhookEvent(id: second[0].id, now: now + 70_003) == false, "no longer dead")
            #expect(try await outbox.replayWebhookEvent(id: newId(), now: now + 70_003) == false)
            #expect(try await outbox.claimWebhookEvents(now: now + 70_004, limit: 10, leaseUntil: now + 130_000, node: "n3").isEmpty, "behind a3")
            try await outbox.completeWebhookEvent(third[0])
            let replayed = try await outbox.claimWebhookEvents(now: now + 70_005, limit: 10, leaseUntil: now + 130_000, node: "n3")
            #expect(replayed.map(\.id) == [second[0].id] && replayed[0].attempts == 0 && replayed[0].retryFrom == now + 70_003)
            try await outbox.completeWebhookEvent(replayed[0])
            stats = try await outbox.webhookStats()
            #expect(stats.pending == 1 && stats.dead == 0, "b1 is left (n2 claimed it and never answered)")
            try await outbox.releaseWebhookClaims(node: "n2")
            let released = try await outbox.claimWebhookEvents(now: now + 70_006, limit: 10, leaseUntil: now + 130_000, node: "n3")
            #expect(try released.map(body) == ["b1"], "a node's released claims are claimable at once")
        }
    }

    /// Without webhooks configured nothing is recorded.
    @Test(arguments: Kind.allCases) func withoutWebhooksNothingIsRecorded(_ kind: Kind) async throws {
        try await StoreContractTests.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            _ = try await store.process([StoreContractTests.item(conversation: conversation.id)])
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .read, upToSeq: 1)
            _ = try await store.registerDevice(userId: "dora", name: nil, tokenHash: newId(), rule: StoreContractTests.openRule)
            #expect(try await Self.drain(store).isEmpty)
            #expect(try await Self.deliveries(store).webhookStats() == WebhookStats(pending: 0, dead: 0, oldestPendingAt: nil))
        }
    }

    /// Nodes claiming at once never get the same head (PostgreSQL, several nodes on one database).
    @Test func nodesClaimingAtOnceGetDifferentHeads() async throws {
        try await StoreContractTests.withStores(.postgres, nodes: 3, webhooks: WebhookOutbox(types: [.messageStored])) { stores, _ in
            var conversations: [Conversation] = []
            for _ in 0..<30 { conversations.append(try await stores[0].createConversation(creator: "alice", members: ["bob"], name: nil)) }
            _ = try await stores[0].process(conversations.map { StoreContractTests.item(conversation: $0.id) })
            let now = WallClock.nowMillis()
            let claims = try await withThrowingTaskGroup(of: [WebhookDelivery].self) { group in
                for (index, store) in stores.enumerated() {
                    group.addTask {
                        var mine: [WebhookDelivery] = []
                        for _ in 0..<10 {
                            mine += try await Self.deliveries(store).claimWebhookEvents(
                                now: now, limit: 2, leaseUntil: now + 60_000, node: "n\(index)")
                        }
                        return mine
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(claims.count == 30 && Set(claims.map(\.id)).count == 30, "each head to one node")
        }
    }
}
