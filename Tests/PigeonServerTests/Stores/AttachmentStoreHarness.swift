import PigeonDomain

/// Attachment stores beside the message stores of the same backend, for `AttachmentStoreContractTests` and the
/// multi-node attachment tests: each backend's part lives in its own file (`+SQLite`, `+Postgres`).
extension StoreContractTests {
    static func withAttachmentStores(
        _ kind: Kind, nodes: Int = 1, _ body: @Sendable ([any MessageStore], [any AttachmentStore]) async throws -> Void
    ) async throws {
        switch kind {
        case .sqlite: try await withSQLiteAttachmentStores(body)
        case .postgres: try await withPostgresAttachmentStores(nodes: nodes, body)
        }
    }
}
