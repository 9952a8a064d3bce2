import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The partitioned event log: cursors that carry a position per partition, a device's events merged from many
/// partitions, and what a cursor means after the partition count changed.
@Suite struct EventPartitionTests {
    typealias Contract = StoreContractTests

    // MARK: Cursors

    @Test func cursorsRoundTripInBothForms() throws {
        let single = EventCursor(epoch: "ab12cd34", position: EventPosition(offsets: [42]))
        #expect(single.string == "ab12cd34-42")
        #expect(EventCursor(single.string, partitions: 1) == single)

        for offsets: [Int64] in [Array(repeating: 0, count: 16), (0..<16).map { Int64($0) * 1_000_003 }, [Int64.max, 1, 127, 128, 16_383, 16_384]] {
            let cursor = EventCursor(epoch: "e0", position: EventPosition(offsets: offsets))
            #expect(EventCursor(cursor.string, partitions: offsets.count) == cursor, "\(offsets)")
            #expect(!EventCursor.isMalformed(cursor.string))
            // Another partition count is not this layout's cursor.
            #expect(EventCursor(cursor.string, partitions: offsets.count + 1) == nil)
        }
        // 16 partitions at 2^28 events each stay compact.
        let busy = EventCursor(epoch: "ab12cd34", position: EventPosition(offsets: Array(repeating: (1 << 28) - 1, count: 16)))
        #expect(busy.string.utf8.count <= 9 + 86)
        // 64 partitions at 2^35 events each still fit the parameter limit.
        let largest = EventCursor(epoch: "ab12cd34", position: EventPosition(offsets: Array(repeating: (1 << 35) - 1, count: 64)))
        #expect(!EventCursor.isMalformed(largest.string))
    }

    @Test func foreignOrDamagedCursorsAreUnknown() {
        for text in ["e0.", "e0.A", "e0.////", "e0.gA", ".AAAA", "e0.AAAAAAAAAAAAAAAAAAAAAA==", "e0.gICAgICAgICAgIAB", "nodash", "e0-x", "-5"] {
            #expect(EventCursor(text, partitions: 16) == nil, "\(text)")
        }
        // A one-partition cursor in a log of several: that offset in partition 0, nothing read elsewhere.
        let honoured = EventCursor("e0-7", partitions: 4)
        #expect(honoured?.position == EventPosition(offsets: [7, 0, 0, 0]))
    }

    // MARK: One device, many partitions

    /// One user in 24 conversations spread over the partitions: paging through its events with small pages and the
    /// cursor of each page gives every event once, each conversation's in seq order, on both stores.
    @Test(arguments: Contract.Kind.allCases) func aUsersEventsFromManyPartitionsArriveOncePerConversationInOrder(_ kind: Contract.Kind) async throws {
        try await Contract.withStores(kind) { stores, _ in
            let store = stores[0]
            var conversations: [Conversation] = []
            for index in 0..<24 { conversations.append(try await store.createConversation(creator: "sender\(index)", members: ["bob"], name: nil)) }
            if kind == .postgres {
                let used = Set(conversations.map { EventPartitioning.partition(ofConversation: $0.id, partitions: store.eventPartitions) })
                #expect(used.count >= 8, "24 conversations fell in only \(used.count) of \(store.eventPartitions) partitions")
            }
            for round in 0..<5 {
                let batch = conversations.enumerated().map { index, conversation in
                    Contract.item(conversation: conversation.id, sender: "sender\(index)", device: "d\(index)", body: "r\(round)")
                }
                _ = try await store.process(batch)
            }
            let bob = DeviceIdentity(userId: "bob", deviceId: "bob-phone")
            var position = try await store.resolveStart(nil).after
            #expect(position == (try await store.headPosition()))
            position = EventPosition.start(partitions: store.eventPartitions)
            var received: [StoredEvent] = []
            for _ in 0..<100 {
                let page = try await store.events(for: bob, after: position, limit: 7)
                if page.isEmpty { break }
                for event in page {
                    #expect(position.precedes(event), "an event at or before the position came back")
                    position.advance(past: event)
                }
                received.append(contentsOf: page)
                // The cursor of the page resumes exactly where it ended.
                let resumed = try await store.resolveStart(store.cursor(position))
                #expect(!resumed.reset && resumed.after == position)
            }
            #expect(received.count == 24 * 6, "conversation.created + 5 messages in each of 24 conversations")
            #expect(Set(received.map { "\($0.partition)/\($0.id)" }).count == received.count, "an event came twice")
            let messages = received.filter { $0.type == "message.new" }.compactMap { event -> Message? in
                guard case .messageNew(_, let message)? = try? JSONDecoder().decode(ServerEvent.self, from: Data(event.frame(cursor: "c").utf8))
                else { return nil }
                return message
            }
            for conversation in conversations {
                #expect(messages.filter { $0.conversationId == conversation.id }.map(\.seq) == [1, 2, 3, 4, 5], "\(conversation.id)")
            }
        }
    }

    // MARK: Changing the partition count

    /// Opens the PostgreSQL store on `schema` with `partitions`, runs `body` while it runs, then stops it.
    static func withPostgresStore(
        schema: String, partitions: Int, nodeId: String = "node-" + Identifiers.randomHex(bytes: 4),
        _ body: @Sendable (PostgresMessageStore, Contract.RecordingSink) async throws -> Void
    ) async throws {
        var logger = Logger(label: "event-partitions")
        logger.logLevel = .error
        let url = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)&event_partitions=\(partitions)"
        let sink = Contract.RecordingSink()
        let store = try await PostgresMessageStore.open(url: url, local: LocalFanout(sink: sink), logger: logger, maxConnections: 4, nodeId: nodeId)
        try await Contract.whileRunning([store]) { try await body(store, sink) }.get()
    }

    static func newSchema() -> String {
        "pigeon_p_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
    }

    @Test func aCursorFromBeforeThePartitionCountChangedIsAnsweredReset() async throws {
        let schema = Self.newSchema()
        defer { Task { try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE") } }
        let node = "node-fixed"
        let saved = NIOLockedValueBox<(cursor: String, epoch: String)?>(nil)
        try await Self.withPostgresStore(schema: schema, partitions: 4, nodeId: node) { store, _ in
            #expect(store.eventPartitions == 4)
            for index in 0..<6 {
                let conversation = try await store.createConversation(creator: "alice\(index)", members: ["bob"], name: nil)
                _ = try await store.process([Contract.item(conversation: conversation.id, sender: "alice\(index)")])
            }
            let head = try await store.headPosition()
            #expect(head.offsets.count == 4 && head.offsets.contains { $0 > 0 })
            saved.withLockedValue { $0 = (store.cursor(head), store.epoch) }
        }
        let (cursor, oldEpoch) = try #require(saved.withLockedValue { $0 })
        try await Self.withPostgresStore(schema: schema, partitions: 8, nodeId: node) { store, _ in
            #expect(store.eventPartitions == 8)
            #expect(store.epoch != oldEpoch, "partitions 1-3 had events: the layout change must renew the epoch")
            let start = try await store.resolveStart(cursor)
            #expect(start.reset, "a cursor of the 4-partition layout was read against 8 partitions")
            #expect(start.after == (try await store.headPosition()))
            // The new layout works: a new conversation's events come after the new cursor.
            let conversation = try await store.createConversation(creator: "carol", members: ["bob"], name: nil)
            _ = try await store.process([Contract.item(conversation: conversation.id, sender: "carol")])
            let events = try await store.events(for: DeviceIdentity(userId: "bob", deviceId: "p"), after: start.after, limit: 10)
            #expect(events.map(\.type) == ["conversation.created", "message.new"])
        }
        // Back to 4: still a new epoch, the first layout's cursor stays unknown.
        try await Self.withPostgresStore(schema: schema, partitions: 4, nodeId: node) { store, _ in
            let start = try await store.resolveStart(cursor)
            #expect(start.reset)
        }
    }

    /// The single event log of before (one partition) moving to 16: its cursors are honoured exactly, since every
    /// event it had is in partition 0 and the other partitions start empty.
    @Test func aSingleLogCursorIsHonouredWhenTheLogGainsPartitions() async throws {
        let schema = Self.newSchema()
        defer { Task { try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE") } }
        let node = "node-fixed"
        let saved = NIOLockedValueBox<(cursor: String, epoch: String, conversation: String)?>(nil)
        try await Self.withPostgresStore(schema: schema, partitions: 1, nodeId: node) { store, _ in
            let conversation = try await store.createConversation(creator: "alice", members: ["bob"], name: nil)
            _ = try await store.process([Contract.item(conversation: conversation.id)])
            let cursor = store.cursor(try await store.headPosition())
            #expect(!cursor.contains("."), "a one-partition log keeps the old cursor form")
            saved.withLockedValue { $0 = (cursor, store.epoch, conversation.id) }
        }
        let (cursor, epoch, conversationId) = try #require(saved.withLockedValue { $0 })
        try await Self.withPostgresStore(schema: schema, partitions: 16, nodeId: node) { store, _ in
            #expect(store.epoch == epoch)
            let start = try await store.resolveStart(cursor)
            #expect(!start.reset)
            var conversations = [conversationId]
            for index in 0..<8 {
                conversations.append(try await store.createConversation(creator: "carol\(index)", members: ["bob"], name: nil).id)
            }
            _ = try await store.process(conversations.map { Contract.item(conversation: $0, sender: $0 == conversationId ? "alice" : "x") })
            let events = try await store.events(for: DeviceIdentity(userId: "bob", deviceId: "p"), after: start.after, limit: 100)
            // Exactly what came after the cursor: 8 conversation.created, then one message.new per conversation that
            // accepted its sender (the 8 new ones refuse "x", who is no member: those go to the dead letters).
            #expect(events.filter { $0.type == "conversation.created" }.count == 8)
            #expect(events.filter { $0.type == "message.new" }.count == 1)
        }
    }

    @Test func thePartitionCountDoesNotChangeUnderAnotherRunningNode() async throws {
        let schema = Self.newSchema()
        defer { Task { try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE") } }
        try await Self.withPostgresStore(schema: schema, partitions: 4, nodeId: "node-running") { store, _ in
            // The running node's heartbeat is written within a moment of start.
            let beating = try await eventually(within: .seconds(10)) {
                var count = 0
                for try await value in try await store.client.query("SELECT COUNT(*) FROM nodes WHERE node_id = 'node-running'").decode(Int.self) {
                    count = value
                }
                return count == 1
            }
            #expect(beating)
            await #expect(throws: PigeonError.self) {
                try await Self.withPostgresStore(schema: schema, partitions: 8, nodeId: "node-other") { _, _ in }
            }
            #expect(store.eventPartitions == 4)
            // The same count joins fine.
            try await Self.withPostgresStore(schema: schema, partitions: 4, nodeId: "node-other") { other, _ in
                #expect(other.epoch == store.epoch)
            }
        }
    }
}
