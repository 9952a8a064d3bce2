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
    /// The serverId a `pigeon.edit` / `pigeon.delete` names, `""` for other messages.
    var targetIds: [String] = []
    /// `edited_at` and `deleted_at`, 0 for NULL (set when a later message of the batch edits or deletes it).
    var editedAt: [Int64] = []
    var deletedAt: [Int64] = []

    mutating func append(_ message: Message, targetId: String? = nil) {
        targetIds.append(targetId ?? "")
        editedAt.append(message.editedAt ?? 0)
        deletedAt.append(message.deletedAt ?? 0)
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

    /// Where `serverId` is among these rows.
    func index(of serverId: String) -> Int? {
        serverIds.lastIndex(of: serverId)
    }
}

/// Edits and deletes to apply to messages stored before the batch, one per target (the batch's last wins; a delete
/// wins over an edit), column by column.
struct LifecycleRows {
    var targetIds: [String] = []
    /// The new text (`""` once deleted).
    var bodies: [String] = []
    /// When the batch last edited the target, 0 if it did not (the stored `edited_at` stays).
    var editedAt: [Int64] = []
    /// When the batch deleted the target, 0 if it did not. An edit then a delete in one batch set both, as two
    /// batches would.
    var deletedAt: [Int64] = []
    /// The erased body each earlier `pigeon.edit` of a deleted target gets (`""` for an edit).
    var erasedEdits: [String] = []

    func isDeleted(_ index: Int) -> Bool { deletedAt[index] != 0 }

    mutating func apply(targetId: String, newBody: String?, at now: Int64) {
        let index: Int
        if let found = targetIds.firstIndex(of: targetId) {
            index = found
        } else {
            index = targetIds.count
            targetIds.append(targetId)
            bodies.append("")
            editedAt.append(0)
            deletedAt.append(0)
            erasedEdits.append("")
        }
        bodies[index] = newBody ?? ""
        if newBody == nil {
            deletedAt[index] = now
            erasedEdits[index] = MessageLifecycle.editText(serverId: targetId, body: "")
        } else {
            editedAt[index] = now
        }
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
