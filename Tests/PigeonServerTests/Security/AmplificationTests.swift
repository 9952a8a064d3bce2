import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import PostgresNIO
import Testing

/// Issue 11, item 5: what one request makes the store write. A `conversation.created` payload (every member with
/// its watermarks) and a receipt's payload go to every member, but are stored once; each member's event row only
/// points at it.
@Suite struct AmplificationTests {
    /// 989 members besides the creator and the 10 readers: the default maximum of 1,000.
    static let members = (1...989).map { String(format: "m%04d", $0) }

    /// The conversations here have 999 members the creator shares no conversation with: the strangers limit is lifted.
    @Sendable static func liftStrangersLimit(_ configuration: inout ServerConfiguration) {
        configuration.appBackend.strangerAddsPerHour = 0
    }
    /// Readers with the longest userId allowed, so a receipt payload is longer than an event row pointing at it.
    static let readers = (1...10).map { "reader-\($0)-" + String(repeating: "r", count: 64 - "reader-\($0)-".count) }

    /// Bytes of the embedded data directory's files (the store, the buffer), measured with the server stopped: SQLite
    /// folds its write-ahead log into the database file when the last connection closes.
    /// Bytes of the files in `directory`, once every SQLite file's write-ahead log is checkpointed into it and
    /// truncated: what the data takes, not how far the WAL file grew while background checkpoints lagged (its size
    /// is a high-water mark, and it made this measure flaky on a loaded machine).
    static func directoryBytes(_ directory: String) throws -> Int64 {
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".sqlite") {
            let database = try SQLiteDatabase.open(path: directory + "/" + name, durable: false, readers: 1)
            try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        return try names.reduce(Int64(0)) { total, name in
            let size = try FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? Int64 ?? 0
            return total + size
        }
    }

    /// The PostgreSQL schema a test server of the production backends uses.
    static func schema(of configuration: ServerConfiguration) -> String? {
        guard case .postgres(let url) = configuration.store, let components = URLComponents(string: url) else { return nil }
        return components.queryItems?.first { $0.name == "schema" }?.value
    }

    /// Bytes of the event log's tables in `schema` (rows, TOAST and indexes).
    static func eventTableBytes(schema: String) async throws -> Int64 {
        let base = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL")
        guard let components = URLComponents(string: base), let host = components.host, let user = components.user else {
            throw TestFailure("PIGEON_TEST_POSTGRES_URL is not a postgres://user@host:port/db URL: \(base)")
        }
        var logger = Logger(label: "amplification-test")
        logger.logLevel = .error
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: host, port: components.port ?? 5432, username: user, password: components.password,
                database: components.path.isEmpty ? "postgres" : String(components.path.dropFirst()), tls: .disable),
            id: 1, logger: logger)
        defer { Task { try? await connection.close() } }
        var bytes: Int64 = 0
        for try await value in try await connection.query(
            """
            SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = \(schema) AND c.relkind = 'r' AND c.relname IN ('events', 'event_payloads')
            """, logger: logger
        ).decode(Int64.self) {
            bytes = value
        }
        return bytes
    }

    /// The length of `payload` (an event's JSON without its cursor) as stored.
    static func payloadBytes(ofType type: String, _ client: PigeonTestClient, _ device: TestDevice) async throws -> Int {
        // The device's newest events (a sync without a cursor starts now, at the head; event ids count every
        // user's events, a device's own are among the last 20,000 here).
        let head = try await client.headCursor(device)
        let answer = try await client.request(
            .GET, "/v1/sync?limit=1000&cursor=\(try TestCursor.moved(head) { max(0, $0 - 20_000) })", token: device.token)
        let events = answer.jsonObject?["events"] as? [[String: Any]] ?? []
        guard var event = events.last(where: { $0["type"] as? String == type }) else { throw TestFailure("no \(type) event: \(answer.text)") }
        event["cursor"] = nil
        return try JSONSerialization.data(withJSONObject: event).count
    }

    /// Ten conversations of 1,000 members, then ten read receipts in one of them (each moves delivered and read:
    /// two events per member). Measured on the embedded store, between restarts.
    @Test(.enabled(if: TestBackend.current == .embedded))
    func aLargeConversationAndItsReceiptsStoreEachPayloadOnceEmbedded() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let setup = try await withTestServer(dataDirectory: directory, configure: Self.liftStrangersLimit) { client in
            let alice = try await client.register("alice")
            var readers: [TestDevice] = []
            for reader in Self.readers { readers.append(try await client.register(reader)) }
            _ = try await client.createConversation(alice, members: ["warm-up"])
            return (alice, readers)
        }
        let (alice, readers) = setup
        let empty = try Self.directoryBytes(directory)
        let (conversation, conversationPayload) = try await withTestServer(dataDirectory: directory, configure: Self.liftStrangersLimit) { client in
            var last: Conversation?
            for _ in 0..<10 { last = try await client.createConversation(alice, members: Self.members + Self.readers) }
            return (last!, try await Self.payloadBytes(ofType: "conversation.created", client, alice))
        }
        let afterConversations = try Self.directoryBytes(directory)
        try await withTestServer(dataDirectory: directory, configure: Self.liftStrangersLimit) { client in
            for index in 0..<10 { try await client.sendAccepted(alice, to: conversation.id, body: "message \(index)") }
            _ = try await client.waitForCount(alice, conversation.id, 10)
        }
        let beforeReceipts = try Self.directoryBytes(directory)
        let receiptPayload = try await withTestServer(dataDirectory: directory, configure: Self.liftStrangersLimit) { client in
            for reader in readers {
                let answer = try await client.request(
                    .POST, "/v1/conversations/\(conversation.id)/receipts", token: reader.token, body: #"{"kind":"read","upToSeq":10}"#)
                #expect(answer.status == 200, "\(answer.text)")
            }
            return try await Self.payloadBytes(ofType: "receipt", client, alice)
        }
        let afterReceipts = try Self.directoryBytes(directory)
        try Self.check(
            conversations: afterConversations - empty, conversationPayload: conversationPayload,
            receipts: afterReceipts - beforeReceipts, receiptPayload: receiptPayload, backend: "embedded")
    }

    /// The same on PostgreSQL: the event tables' size (`pg_total_relation_size`, TOAST and indexes included).
    @Test(.enabled(if: TestBackend.current.usesPostgres))
    func aLargeConversationAndItsReceiptsStoreEachPayloadOncePostgres() async throws {
        let schemaOfServer = NIOLockedValueBox<String?>(nil)
        try await withTestServer(configure: { configuration in
            Self.liftStrangersLimit(&configuration)
            schemaOfServer.withLockedValue { $0 = Self.schema(of: configuration) }
        }) { client in
            guard let schema = schemaOfServer.withLockedValue({ $0 }) else { throw TestFailure("no PostgreSQL schema") }
            let alice = try await client.register("alice")
            var readers: [TestDevice] = []
            for reader in Self.readers { readers.append(try await client.register(reader)) }
            _ = try await client.createConversation(alice, members: ["warm-up"])
            let empty = try await Self.eventTableBytes(schema: schema)
            var conversation: Conversation?
            for _ in 0..<10 { conversation = try await client.createConversation(alice, members: Self.members + Self.readers) }
            let afterConversations = try await Self.eventTableBytes(schema: schema)
            let conversationPayload = try await Self.payloadBytes(ofType: "conversation.created", client, alice)
            for index in 0..<10 { try await client.sendAccepted(alice, to: conversation!.id, body: "message \(index)") }
            _ = try await client.waitForCount(alice, conversation!.id, 10)
            let beforeReceipts = try await Self.eventTableBytes(schema: schema)
            for reader in readers {
                let answer = try await client.request(
                    .POST, "/v1/conversations/\(conversation!.id)/receipts", token: reader.token, body: #"{"kind":"read","upToSeq":10}"#)
                #expect(answer.status == 200, "\(answer.text)")
            }
            let afterReceipts = try await Self.eventTableBytes(schema: schema)
            let receiptPayload = try await Self.payloadBytes(ofType: "receipt", client, alice)
            try Self.check(
                conversations: afterConversations - empty, conversationPayload: conversationPayload,
                receipts: afterReceipts - beforeReceipts, receiptPayload: receiptPayload, backend: "postgres")
        }
    }

    /// Each conversation: its payload about once plus a small row per member (the member and its event row), far
    /// from a copy per member; each receipt row: less than one copy of the receipt's payload.
    static func check(conversations: Int64, conversationPayload: Int, receipts: Int64, receiptPayload: Int, backend: String) throws {
        let memberCount = Int64(members.count + readers.count + 1)
        print("[\(backend)] 10 conversations of \(memberCount) members (payload \(conversationPayload) B): +\(conversations) B;"
            + " 10 read receipts (payload \(receiptPayload) B, \(20 * memberCount) event rows): +\(receipts) B")
        #expect(conversationPayload > 40_000)
        #expect(conversations < 10 * (3 * Int64(conversationPayload) + memberCount * 200), "\(conversations) bytes for 10 conversations")
        let perReceiptRow = Double(receipts) / Double(20 * memberCount)
        #expect(perReceiptRow < Double(receiptPayload), "\(perReceiptRow) bytes per receipt event row; the payload is \(receiptPayload)")
    }
}
