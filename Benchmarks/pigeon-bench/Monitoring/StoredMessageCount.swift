import Foundation
import PigeonBenchSupport

/// How many messages a namespace's PostgreSQL store held at one instant: the rows of its `messages` table that were
/// committed when the counting statement started, with that statement's start on PostgreSQL's clock. Two counts
/// give the messages stored between them and the exact time between them, whenever `psql` got to run.
struct StoredMessageCount: Codable, Sendable {
    var messages: Int
    /// `statement_timestamp()` of the count, seconds since 1970.
    var at: Double

    /// Counts the rows of `namespace.messages` through `psql`.
    static func read(postgresURL: String, namespace: String) async throws -> StoredMessageCount {
        let output = try await ExternalCommand.output(
            of: "psql",
            [
                "-X", "-A", "-t", "-F", "|", "-v", "ON_ERROR_STOP=1", "-d", postgresURL, "-c",
                "SELECT count(*), extract(epoch FROM statement_timestamp()) FROM \(namespace).messages",
            ]
        )
        let fields = output.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|")
        guard fields.count == 2, let messages = Int(fields[0]), let at = Double(fields[1]) else {
            throw BenchError.commandFailed("counting \(namespace).messages: psql answered \(output)")
        }
        return StoredMessageCount(messages: messages, at: at)
    }

    /// Messages stored per second from `earlier` to this count.
    func rate(since earlier: StoredMessageCount) -> Double? {
        at > earlier.at ? Double(messages - earlier.messages) / (at - earlier.at) : nil
    }
}
