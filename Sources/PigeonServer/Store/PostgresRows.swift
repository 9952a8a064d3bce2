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
