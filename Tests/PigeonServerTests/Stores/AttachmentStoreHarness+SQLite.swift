import Foundation
import Logging
import PigeonDomain
import PigeonSQLite
import PigeonTestSupport

extension StoreContractTests {
    /// A fresh embedded message store in a temporary directory and its attachment store beside it (bytes under
    /// `attachments/` of the same directory), as the server composes them; one node.
    static func withSQLiteAttachmentStores(_ body: @Sendable ([any MessageStore], [any AttachmentStore]) async throws -> Void) async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var logger = Logger(label: "attachment-contract")
        logger.logLevel = .error
        let store = try SQLiteMessageStore(path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: RecordingSink()))
        let attachments = try SQLiteAttachmentStore(
            messageStore: store, directory: URL(fileURLWithPath: directory + "/attachments"), durable: false, logger: logger)
        try await body([store], [attachments])
    }
}
