import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The ``MessageStore`` contract, checked directly (no server) against both implementations: the embedded SQLite
/// store and the PostgreSQL store (which needs `PIGEON_TEST_POSTGRES_URL`: scripts/test.sh starts PostgreSQL).
@Suite struct StoreContractTests {
    enum Kind: String, CaseIterable, Sendable { case sqlite, postgres }

    /// Records what a store publishes, in order.
    final class RecordingSink: EventSink {
        private let events = NIOLockedValueBox([StoredEvent]())
        func publish(_ events: [StoredEvent]) { self.events.withLockedValue { $0.append(contentsOf: events) } }
        var published: [StoredEvent] { events.withLockedValue { $0 } }

        /// Waits until `predicate` holds for what was published (the PostgreSQL store publishes from its tail).
        func wait(until predicate: ([StoredEvent]) -> Bool) async throws -> [StoredEvent] {
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                let current = published
                if predicate(current) { return current }
                try await Task.sleep(for: .milliseconds(10))
            }
            throw TestFailure("the sink did not get the expected events; it has \(published.count)")
        }
    }

    /// Checks that `events` hold each partition's offsets 1, 2, 3 … once each, in order (what every sink gets).
    static func expectGaplessPartitions(_ events: [StoredEvent], sourceLocation: SourceLocation = #_sourceLocation) {
        let byPartition = Dictionary(grouping: events, by: \.partition)
        for (partition, events) in byPartition {
            #expect(events.map(\.id) == Array(1...Int64(events.count)), "partition \(partition)", sourceLocation: sourceLocation)
        }
    }

    /// The position just after `events`.
    static func position(after events: [StoredEvent], partitions: Int) -> EventPosition {
        var position = EventPosition.start(partitions: partitions)
        for event in events { position.advance(past: event) }
        return position
    }

    /// Runs `body` with a fresh store of `kind` (a temporary file, or a schema of its own), and more stores on the
    /// same data when `nodes` > 1 (the PostgreSQL store only: several server nodes share one database).
    static func withStores(
        _ kind: Kind, nodes: Int = 1, faultInjector: ProcessingFaultInjector? = nil, webhooks: WebhookOutbox = .off,
        _ body: @Sendable ([any MessageStore], [RecordingSink]) async throws -> Void
    ) async throws {
        var logger = Logger(label: "store-contract")
        logger.logLevel = .error
        switch kind {
        case .sqlite:
            let directory = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let sink = RecordingSink()
            let store = try SQLiteMessageStore(
                path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: sink), faultInjector: faultInjector,
                webhooks: webhooks)
            try await body([store], [sink])
        case .postgres:
            let schema = "pigeon_c_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
            let url = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)"
            var stores: [PostgresMessageStore] = []
            var sinks: [RecordingSink] = []
            for _ in 0..<nodes {
                let sink = RecordingSink()
                stores.append(try await PostgresMessageStore.open(
                    url: url, local: LocalFanout(sink: sink), faultInjector: faultInjector, logger: logger, maxConnections: 4,
                    webhooks: webhooks))
                sinks.append(sink)
            }
            let (running, recorded) = (stores, sinks)
            let result = await Self.whileRunning(stores) { try await body(running, recorded) }
            try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
            try result.get()
        }
    }

    /// Runs `body` while `stores` run (their pools, fan-outs and receipt writers), then stops them; `body`'s outcome.
    static func whileRunning(_ stores: [PostgresMessageStore], _ body: @Sendable () async throws -> Void) async -> Result<Void, any Error> {
        await withThrowingTaskGroup(of: Void.self) { group in
            for store in stores { group.addTask { try await store.run() } }
            defer { group.cancelAll() }
            do {
                try await body()
                return .success(())
            } catch {
                return .failure(error)
            }
        }
    }

    static func item(
        conversation: String, sender: String = "alice", device: String = "alice-phone", body: String = "hi", attempts: Int = 0, final: Bool = false
    ) -> ProcessingItem {
        let serverId = Identifiers.uuidV7()
        return ProcessingItem(
            entry: BufferEntry(
                id: serverId,
                message: BufferedMessage(
                    serverId: serverId, conversationId: conversation, senderId: sender, senderDeviceId: device, clientMessageId: newId(),
                    type: "text", body: body, clientTimestamp: 1, acceptedAt: WallClock.nowMillis()),
                attempts: attempts),
            isFinalAttempt: final)
    }

    static func seqs(_ results: [ProcessingResult]) -> [Int64?] {
        results.map { result in
            switch result {
            case .stored(let seq): seq
            case .alreadyStored(let seq): -seq
            default: nil
            }
        }
    }

    /// API.md 1.1: a conversation's kind is fixed at creation (direct: one other member, no name), its creator is its
    /// owner, every founding member joined at seq 0; read back the same way one by one and in the list.
    @Test(arguments: Kind.allCases) func aConversationKeepsItsKindAndTheCreatorIsItsOwner(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let direct = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let group = try await store.createConversation(creator: "carol", members: ["alice", "bob"], name: nil)
            let named = try await store.createConversation(creator: "alice", members: ["bob"], name: "us")
            for (created, expected) in [(direct, ConversationKind.direct), (group, .group), (named, .group)] {
                #expect(created.kind == expected)
                let read = try #require(try await store.conversation(id: created.id, for: "alice"))
                #expect(read == created, "read back as created")
                let listed = try await store.conversations(of: "alice", before: nil, limit: 10).conversations.first { $0.id == created.id }
                #expect(listed == created, "listed as created")
            }
            #expect(group.members.map(\.userId) == ["alice", "bob", "carol"])
            #expect(group.members.map(\.role) == [.member, .member, .owner])
            #expect((direct.members + group.members + named.members).allSatisfy { $0.joinedSeq == 0 })
        }
    }

    /// API.md 1.1: a conversation read by a member carries its newest message and that member's unread count (the
    /// other members' messages above its read watermark), one by one and in the list alike.
    @Test(arguments: Kind.allCases) func aConversationShowsItsLastMessageAndTheCallersUnreadCount(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let empty = try #require(try await store.conversation(id: conversation.id, for: "bob"))
            #expect(empty.lastMessage == nil && empty.unreadCount == 0)
            let items = [
                Self.item(conversation: conversation.id, body: "a1"), Self.item(conversation: conversation.id, body: "a2"),
                Self.item(conversation: conversation.id, body: "a3"),
                Self.item(conversation: conversation.id, sender: "bob", device: "bob-phone", body: "b4"),
            ]
            #expect(Self.seqs(try await store.process(items)) == [1, 2, 3, 4])
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .read, upToSeq: 1)
            for (caller, unread) in [("bob", 2), ("alice", 1)] {
                let one = try #require(try await store.conversation(id: conversation.id, for: caller))
                #expect(one.lastMessage?.body == "b4" && one.lastMessage?.seq == 4, "\(caller)")
                #expect(one.unreadCount == unread, "\(caller): the others' messages above its read watermark")
                let listed = try await store.conversations(of: caller, before: nil, limit: 10).conversations.first { $0.id == conversation.id }
                #expect(listed == one, "\(caller): listed the same")
            }
        }
    }

    @Test(arguments: Kind.allCases) func seqIsGaplessPerConversationAndRedeliveryStoresNothing(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, sinks in
            let store = stores[0]
            let a = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let b = try await store.createConversation(creator: "alice", members: ["carol"], name: "b")
            let batch = [
                Self.item(conversation: a.id), Self.item(conversation: b.id), Self.item(conversation: a.id, body: "ü \"q\" 😀"),
                Self.item(conversation: a.id),
            ]
            #expect(Self.seqs(try await store.process(batch)) == [1, 1, 2, 3])
            // Handed out again (a crash before the buffer acknowledgement): recognised by serverId, nothing written.
            #expect(Self.seqs(try await store.process(batch)) == [-1, -1, -2, -3])
            #expect(Self.seqs(try await store.process([Self.item(conversation: a.id)])) == [4])
            let page = try await store.messages(conversationId: a.id, after: 0, before: nil, limit: 10)
            #expect(page.messages.map(\.seq) == [1, 2, 3, 4])
            #expect(page.messages[1].body == "ü \"q\" 😀")
            #expect(page.messages.map(\.serverId) == [batch[0], batch[2], batch[3]].map(\.entry.message.serverId) + [page.messages[3].serverId])
            #expect(try await store.conversation(id: a.id, for: "bob")?.lastSeq == 4)
            #expect(try await store.conversation(id: a.id, for: "carol") == nil)
            #expect(try await store.status(ofMessage: batch[2].entry.message.serverId)?.seq == 2)
            // Every event once, in each partition offsets 1, 2, 3 … in commit order.
            let events = try await sinks[0].wait { events in events.filter { $0.type == "message.new" }.count == 10 }
            Self.expectGaplessPartitions(events)
            #expect(try await store.headPosition() == Self.position(after: events, partitions: store.eventPartitions))
        }
    }

    @Test(arguments: Kind.allCases) func eventsFollowDeviceVisibility(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            _ = try await store.process([Self.item(conversation: conversation.id, device: "alice-phone")])
            let start = EventPosition.start(partitions: store.eventPartitions)
            let phone = try await store.events(for: DeviceIdentity(userId: "alice", deviceId: "alice-phone"), after: start, limit: 100)
            let laptop = try await store.events(for: DeviceIdentity(userId: "alice", deviceId: "alice-laptop"), after: start, limit: 100)
            let bob = try await store.events(for: DeviceIdentity(userId: "bob", deviceId: "bob-phone"), after: start, limit: 100)
            #expect(phone.map(\.type) == ["conversation.created", "message.stored"])
            #expect(laptop.map(\.type) == ["conversation.created", "message.new"])
            #expect(bob.map(\.type) == ["conversation.created", "message.new"])
            #expect(bob[1].payload.contains("\"seq\":1"))
            let after = try await store.events(
                for: DeviceIdentity(userId: "bob", deviceId: "bob-phone"), after: Self.position(after: [bob[0]], partitions: store.eventPartitions),
                limit: 100)
            #expect(after == [bob[1]])
        }
    }

    @Test(arguments: Kind.allCases) func watermarksOnlyMoveUpAndAreClamped(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            _ = try await store.process((0..<3).map { _ in Self.item(conversation: conversation.id) })
            var outcome = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .delivered, upToSeq: 99)
            #expect(outcome.watermarks == ReceiptResponse(deliveredSeq: 3, readSeq: 0))
            outcome = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .read, upToSeq: 2)
            #expect(outcome.watermarks == ReceiptResponse(deliveredSeq: 3, readSeq: 2))
            outcome = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .read, upToSeq: 1)
            #expect(outcome.watermarks == ReceiptResponse(deliveredSeq: 3, readSeq: 2))
            await #expect(throws: PigeonError.self) {
                _ = try await store.recordReceipt(conversationId: conversation.id, userId: "carol", kind: .read, upToSeq: 1)
            }
            let members = try await store.conversation(id: conversation.id, for: "alice")?.members
            #expect(members?.first { $0.userId == "bob" } == ConversationMember(userId: "bob", deliveredSeq: 3, readSeq: 2))
        }
    }

    /// The operator's view of a conversation (`GET /v1/admin/conversations/{id}`): every member's role, joinedSeq and
    /// watermarks and the last seq, whoever asks; no member's own view; nil for an unknown id.
    @Test(arguments: Kind.allCases) func anOperatorSeesEveryMembersWatermarksAndTheLastSeq(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: "ops")
            _ = try await store.process((0..<4).map { _ in Self.item(conversation: conversation.id) })
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "bob", kind: .delivered, upToSeq: 4)
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "carol", kind: .read, upToSeq: 2)
            let seen = try #require(try await store.conversation(id: conversation.id))
            #expect(seen.id == conversation.id && seen.kind == .group && seen.name == "ops")
            #expect(seen.lastSeq == 4)
            #expect(seen.members.map(\.userId) == ["alice", "bob", "carol"])
            #expect(seen.members.map(\.role) == [.owner, .member, .member])
            #expect(seen.members.map(\.deliveredSeq) == [0, 4, 2])
            #expect(seen.members.map(\.readSeq) == [0, 0, 2])
            #expect(seen.lastMessage == nil && seen.unreadCount == 0)
            #expect(try await store.conversation(id: UUID().uuidString.lowercased()) == nil)
        }
    }

    /// Many receipts at once (the PostgreSQL store writes them in groups): each answer is a watermark at least as
    /// high as its own request (clamped), and the final watermarks are the highest requested.
    @Test(arguments: Kind.allCases) func concurrentReceiptsEndAtTheHighestWatermarks(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let conversation = try await store.createConversation(creator: "alice", members: ["bob", "carol"], name: nil)
            _ = try await store.process((0..<20).map { _ in Self.item(conversation: conversation.id) })
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<60 {
                    group.addTask {
                        let user = index % 2 == 0 ? "bob" : "carol"
                        let upTo = Int64(index % 25)
                        let outcome = try await store.recordReceipt(
                            conversationId: conversation.id, userId: user, kind: index % 3 == 0 ? .read : .delivered, upToSeq: upTo)
                        #expect(outcome.watermarks.deliveredSeq >= min(upTo, 20))
                        #expect(outcome.watermarks.deliveredSeq >= outcome.watermarks.readSeq)
                    }
                }
                try await group.waitForAll()
            }
            let members = try await store.conversation(id: conversation.id, for: "alice")?.members ?? []
            // bob: even indexes; reads at 0, 6, …, 54 ask up to 0, 6, 12, 18, 24, 5, 11, 17, 23, 4: the highest, 24, clamps to 20.
            #expect(members.first { $0.userId == "bob" } == ConversationMember(userId: "bob", deliveredSeq: 20, readSeq: 20))
            // carol: odd indexes; reads at 3, 9, …, 57 ask up to 3, 9, 15, 21, 2, 8, 14, 20, 1, 7: 21 clamps to 20.
            #expect(members.first { $0.userId == "carol" } == ConversationMember(userId: "carol", deliveredSeq: 20, readSeq: 20))
        }
    }

    /// A failing message fails alone: later messages of its conversation wait, other conversations are stored; the
    /// final attempt dead-letters it with `message.failed` to its sender's device.
    @Test(arguments: Kind.allCases) func aFailingMessageFailsAloneAndIsDeadLetteredOnItsLastAttempt(_ kind: Kind) async throws {
        let injector: ProcessingFaultInjector = { message in if message.body == "poison" { throw TestFailure("injected") } }
        try await Self.withStores(kind, faultInjector: injector) { stores, _ in
            let store = stores[0]
            let a = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let b = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let poison = Self.item(conversation: a.id, body: "poison")
            let results = try await store.process([
                Self.item(conversation: a.id), poison, Self.item(conversation: a.id), Self.item(conversation: b.id),
            ])
            guard results.count == 4, case .stored(1) = results[0], case .failed = results[1], case .deferred = results[2],
                case .stored(1) = results[3]
            else {
                Issue.record("unexpected results \(results)")
                return
            }
            var last = poison
            last.isFinalAttempt = true
            let final = try await store.process([last])
            guard case .deadLettered = final.first else {
                Issue.record("unexpected \(final)")
                return
            }
            #expect(try await store.deadLetterCount() == 1)
            #expect(try await store.deadLetter(serverId: poison.entry.message.serverId) == poison.entry.message)
            #expect(try await store.status(ofMessage: poison.entry.message.serverId)?.status == .failed)
            let events = try await store.events(for: DeviceIdentity(userId: "alice", deviceId: "alice-phone"), after: .start(partitions: store.eventPartitions), limit: 100)
            #expect(events.last?.type == "message.failed")
            try await store.removeDeadLetter(serverId: poison.entry.message.serverId)
            #expect(try await store.deadLetterCount() == 0)
        }
    }

    /// PostgreSQL refuses some data the embedded store takes (U+0000 in text; ingest refuses it too, this is the
    /// second line): the refused message fails alone, the rest of its batch is stored.
    @Test func aMessageThePostgresStoreRefusesFailsAlone() async throws {
        try await Self.withStores(.postgres) { stores, _ in
            let store = stores[0]
            let a = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let b = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let refused = Self.item(conversation: a.id, body: "nul \u{0}")
            let results = try await store.process([Self.item(conversation: a.id), refused, Self.item(conversation: a.id), Self.item(conversation: b.id)])
            #expect(Self.seqs(results) == [1, nil, nil, 1])
            guard case .failed = results[1], case .deferred = results[2] else {
                Issue.record("unexpected results \(results)")
                return
            }
            var last = refused
            last.isFinalAttempt = true
            guard case .deadLettered = try await store.process([last]).first else {
                Issue.record("not dead-lettered")
                return
            }
            #expect(try await store.deadLetterCount() == 1)
        }
    }

    /// A resend whose buffer de-duplication record is gone (Redis keys expire) is recognised by
    /// (sender, device, clientMessageId) and not stored again; another user's device of the same id (JWT `did`
    /// claims are the identity provider's) with the same clientMessageId is another message.
    @Test(arguments: Kind.allCases) func theSameClientMessageIdIsStoredOnceEvenWithANewServerId(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            let a = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            let first = Self.item(conversation: a.id, device: "phone")
            var again = Self.item(conversation: a.id, device: "phone")
            again.entry.message.clientMessageId = first.entry.message.clientMessageId
            var bobs = Self.item(conversation: a.id, sender: "bob", device: "phone")
            bobs.entry.message.clientMessageId = first.entry.message.clientMessageId
            #expect(Self.seqs(try await store.process([first])) == [1])
            #expect(Self.seqs(try await store.process([again, Self.item(conversation: a.id)])) == [-1, 2])
            #expect(Self.seqs(try await store.process([bobs])) == [3])
            let page = try await store.messages(conversationId: a.id, after: 0, before: nil, limit: 10)
            #expect(page.messages.map(\.senderId) == ["alice", "alice", "bob"])
        }
    }

    /// Rows of the shared-payload table (`event_payloads`).
    static func sharedPayloadRows(_ store: any MessageStore) async throws -> Int {
        if let store = store as? SQLiteMessageStore {
            return try await store.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM event_payloads") ?? -1 }
        }
        guard let store = store as? PostgresMessageStore else { throw TestFailure("unknown store \(store)") }
        for try await count in try await store.client.query("SELECT COUNT(*) FROM event_payloads").decode(Int.self) { return count }
        return -1
    }

    /// `conversation.created` and `receipt` go to every member with one stored copy of their payload; every member
    /// reads them back exactly as they were published, and pruning their events removes the payload too.
    @Test(arguments: Kind.allCases) func perMemberPayloadsAreStoredOnceReadBackIdenticalAndPruned(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, sinks in
            let store = stores[0]
            let members = (1...50).map { "member-\($0)" }
            let conversation = try await store.createConversation(creator: "alice", members: members, name: "fifty")
            #expect(try await Self.sharedPayloadRows(store) == 1)
            _ = try await store.process([Self.item(conversation: conversation.id)])
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "member-7", kind: .read, upToSeq: 1)
            // delivered and read moved: two payloads, each once.
            #expect(try await Self.sharedPayloadRows(store) == 3)
            let published = try await sinks[0].wait { $0.filter { $0.type == "receipt" }.count == 2 * 51 }
            for userId in ["alice", "member-7", "member-50"] {
                let read = try await store.events(for: DeviceIdentity(userId: userId, deviceId: "tablet"), after: .start(partitions: store.eventPartitions), limit: 100)
                let expected = published.filter { $0.userId == userId && $0.isVisible(to: "tablet") }
                #expect(read == expected)
                #expect(read.map(\.type) == ["conversation.created", "message.new", "receipt", "receipt"])
            }
            let created = published.first { $0.type == "conversation.created" }
            struct Created: Decodable, Equatable {
                var type: String
                var conversation: Conversation
            }
            let decoded = try created.map { try JSONDecoder().decode(Created.self, from: Data($0.payload.utf8)) }
            #expect(decoded == Created(type: "conversation.created", conversation: conversation))
            // Pruning the creation's events (older) drops its payload; the receipts' payloads stay with theirs.
            try await Task.sleep(for: .milliseconds(5))
            let receiptsAt = WallClock.nowMillis()
            try await Task.sleep(for: .milliseconds(5))
            _ = try await store.recordReceipt(conversationId: conversation.id, userId: "member-8", kind: .delivered, upToSeq: 1)
            try await store.pruneEvents(olderThan: receiptsAt)
            #expect(try await Self.sharedPayloadRows(store) == 1)
            let left = try await store.events(for: DeviceIdentity(userId: "member-9", deviceId: "tablet"), after: .start(partitions: store.eventPartitions), limit: 100)
            #expect(left.map(\.type) == ["receipt"])
            #expect(left.first?.payload.contains("\"userId\":\"member-8\"") == true)
            try await store.pruneEvents(olderThan: WallClock.nowMillis() + 1)
            #expect(try await Self.sharedPayloadRows(store) == 0)
        }
    }

    /// The conversation list: newest activity first, conversations updated in the same millisecond ordered by id,
    /// pages that neither skip nor repeat one, and a stored message moving its conversation to the front.
    @Test(arguments: Kind.allCases) func conversationsArePagedByNewestActivity(_ kind: Kind) async throws {
        try await Self.withStores(kind) { stores, _ in
            let store = stores[0]
            var created: [Conversation] = []
            for index in 0..<7 {
                created.append(try await store.createConversation(creator: "alice", members: ["bob"], name: "c\(index)"))
            }
            func walk(limit: Int) async throws -> [Conversation] {
                var all: [Conversation] = []
                var before: ConversationCursor?
                while true {
                    let page = try await store.conversations(of: "bob", before: before, limit: limit)
                    all += page.conversations
                    #expect(page.conversations.count <= limit)
                    guard page.hasMore, let next = page.nextBefore else { return all }
                    before = try ConversationCursor(parameter: next)
                }
            }
            // One batch stores a message in six of them: six conversations updated in the same millisecond.
            _ = try await store.process(created[1...].map { Self.item(conversation: $0.id) })
            var current: [Conversation] = []
            for conversation in created { current.append(try await store.conversation(id: conversation.id, for: "bob")!) }
            #expect(Set(current[1...].map(\.updatedAt)).count == 1)
            #expect(current[0].updatedAt == current[0].createdAt)
            let expectedOrder = current.sorted { ($0.updatedAt, $0.id) > ($1.updatedAt, $1.id) }.map(\.id)
            #expect(expectedOrder.last == created[0].id)
            for limit in [1, 2, 3, 7, 100] {
                #expect(try await walk(limit: limit).map(\.id) == expectedOrder, "limit \(limit)")
            }
            // `before=<updatedAt>` alone: strictly older.
            let older = try await store.conversations(of: "bob", before: ConversationCursor(updatedAt: current[3].updatedAt, id: nil), limit: 100)
            #expect(older.conversations.map(\.id) == [created[0].id])
            _ = try await store.process([Self.item(conversation: created[0].id)])
            let first = try await store.conversations(of: "bob", before: nil, limit: 1)
            #expect(first.conversations.map(\.id) == [created[0].id])
            #expect(first.conversations[0].lastSeq == 1)
            #expect(first.conversations[0].updatedAt >= current.map(\.updatedAt).max()!)
            #expect(first.conversations[0].members.map(\.userId) == ["alice", "bob"])
            #expect(first.hasMore)
            #expect(try await store.conversations(of: "carol", before: nil, limit: 10) == ConversationList(conversations: []))
        }
    }

    /// Several nodes on one database: concurrent batches for the same conversations keep seq gapless, and every
    /// node's tail publishes every event exactly once, in id order, whichever node wrote it.
    @Test func nodesSharingTheDatabaseAgreeOnSeqAndSeeEveryEventInOrder() async throws {
        try await Self.withStores(.postgres, nodes: 3) { stores, sinks in
            let conversations = [
                try await stores[0].createConversation(creator: "alice", members: ["bob"], name: nil),
                try await stores[1].createConversation(creator: "bob", members: ["carol"], name: nil),
            ]
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, store) in stores.enumerated() {
                    group.addTask {
                        for round in 0..<20 {
                            let batch = (0..<5).map { i in
                                Self.item(
                                    conversation: conversations[(index + round + i) % 2].id, sender: (index + round + i) % 2 == 0 ? "alice" : "bob",
                                    device: "d\(index)")
                            }
                            _ = try await store.process(batch)
                        }
                    }
                }
                try await group.waitForAll()
            }
            for conversation in conversations {
                let page = try await stores[2].messages(conversationId: conversation.id, after: 0, before: nil, limit: 500)
                #expect(page.messages.map(\.seq) == Array(1...Int64(page.messages.count)))
            }
            let head = try await stores[0].headPosition()
            for sink in sinks {
                let events = try await sink.wait { Self.position(after: $0, partitions: head.offsets.count) == head }
                Self.expectGaplessPartitions(events)
                // 2 conversation.created × 2 members + 300 messages × (2 message.new + 1 message.stored).
                #expect(events.count == 4 + 300 * 3)
            }
        }
    }
}
