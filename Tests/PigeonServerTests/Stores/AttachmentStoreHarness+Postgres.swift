import Foundation
import Logging
import PigeonDomain
import PigeonPostgres
import PigeonTestSupport

/// The PostgreSQL part of the attachment stores' harness: `nodes` message stores on one fresh schema, each with its
/// attachment store, run while the body runs; the schema is dropped after.
extension StoreContractTests {
    static func withPostgresAttachmentStores(
        nodes: Int, _ body: @Sendable ([any MessageStore], [any AttachmentStore]) async throws -> Void
    ) async throws {
        try await withPostgresAttachmentBackends(nodes: nodes) { stores, attachments in try await body(stores, attachments) }
    }

    /// The same with the concrete stores (the PostgreSQL tests look into the tables through the message store's pool),
    /// and `uploadConnections` connections in each node's pool of uploads.
    static func withPostgresAttachmentBackends(
        nodes: Int, uploadConnections: Int = 4, _ body: @Sendable ([PostgresMessageStore], [PostgresAttachmentStore]) async throws -> Void
    ) async throws {
        var logger = Logger(label: "attachment-store-contract")
        logger.logLevel = .error
        let schema = "pigeon_a_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        let url = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(schema)"
        var stores: [PostgresMessageStore] = []
        for _ in 0..<max(1, nodes) {
            stores.append(
                try await PostgresMessageStore.open(
                    url: url, local: LocalFanout(sink: RecordingSink()), logger: logger, maxConnections: 4, uploadConnections: uploadConnections))
        }
        let attachments = stores.map { PostgresAttachmentStore(messageStore: $0, logger: logger) }
        let running = stores
        let result = await Self.whileRunning(stores) { try await body(running, attachments) }
        try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schema) CASCADE")
        try result.get()
    }
}
