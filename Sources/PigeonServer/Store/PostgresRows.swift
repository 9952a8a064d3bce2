import Logging
import PigeonProtocol
import PostgresNIO

/// Messages to insert, column by column.
struct MessageRows {
    var serverIds: [String] = []
    var clientMessageIds: [String] = []
    var conversationIds: [String] = []
    var seqs: [Int64] = []
    var senderIds: [String] = []
    var senderDeviceIds: [String] = []
    var types: [String] = []
    var bodies: [String] = []
    var clientTimestamps: [Int64] = []
    var acceptedAt: [Int64] = []
    var storedAt: [Int64] = []

    mutating func append(_ message: Message) {
        serverIds.append(message.serverId)
        clientMessageIds.append(message.clientMessageId)
        conversationIds.append(message.conversationId)
        seqs.append(message.seq)
        senderIds.append(message.senderId)
        senderDeviceIds.append(message.senderDeviceId)
        types.append(message.type)
        bodies.append(message.body)
        clientTimestamps.append(message.clientTimestamp)
        acceptedAt.append(message.acceptedAt)
        storedAt.append(message.storedAt)
    }

    func insert(_ connection: PostgresConnection, logger: Logger) async throws {
        guard !serverIds.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO messages(server_id, client_message_id, conversation_id, seq, sender_id, sender_device_id, type, body,
                client_timestamp, accepted_at, stored_at)
            SELECT * FROM unnest(\(serverIds)::text[], \(clientMessageIds)::text[], \(conversationIds)::text[], \(seqs)::bigint[],
                \(senderIds)::text[], \(senderDeviceIds)::text[], \(types)::text[], \(bodies)::text[], \(clientTimestamps)::bigint[],
                \(acceptedAt)::bigint[], \(storedAt)::bigint[])
            """, logger: logger)
    }
}

/// Dead letters to insert, column by column.
struct DeadLetterRows {
    var messages: [BufferedMessage] = []
    var failedAt: [Int64] = []
    var codes: [String] = []
    var errors: [String] = []

    mutating func append(_ message: BufferedMessage, failedAt now: Int64, error: ErrorDetail) {
        messages.append(message)
        failedAt.append(now)
        codes.append(error.code.rawValue)
        errors.append(error.message)
    }

    func insert(_ connection: PostgresConnection, logger: Logger) async throws {
        guard !messages.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO dead_letters(server_id, conversation_id, client_message_id, sender_id, sender_device_id, type, body,
                client_timestamp, accepted_at, failed_at, error_code, error_message)
            SELECT * FROM unnest(\(messages.map(\.serverId))::text[], \(messages.map(\.conversationId))::text[],
                \(messages.map(\.clientMessageId))::text[], \(messages.map(\.senderId))::text[], \(messages.map(\.senderDeviceId))::text[],
                \(messages.map(\.type))::text[], \(messages.map(\.body))::text[], \(messages.map(\.clientTimestamp))::bigint[],
                \(messages.map(\.acceptedAt))::bigint[], \(failedAt)::bigint[], \(codes)::text[], \(errors)::text[])
            ON CONFLICT (server_id) DO UPDATE SET failed_at = excluded.failed_at, error_code = excluded.error_code,
                error_message = excluded.error_message
            """, logger: logger)
    }
}

/// Runs `operation`, throwing `CancellationError` if it takes longer than `timeout`.
func withTimeout<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw CancellationError()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
