import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Messages to insert, column by column.
package struct MessageRows {
    package var serverIds: [String] = []
    package var clientMessageIds: [String] = []
    package var conversationIds: [String] = []
    package var seqs: [Int64] = []
    package var senderIds: [String] = []
    package var senderDeviceIds: [String] = []
    package var types: [String] = []
    package var bodies: [String] = []
    package var clientTimestamps: [Int64] = []
    package var acceptedAt: [Int64] = []
    package var storedAt: [Int64] = []
    /// The serverId a `pigeon.edit` / `pigeon.delete` names, `""` for other messages.
    package var targetIds: [String] = []
    /// `edited_at` and `deleted_at`, 0 for NULL (set when a later message of the batch edits or deletes it).
    package var editedAt: [Int64] = []
    package var deletedAt: [Int64] = []
    /// The serverId it quotes and the thread root it is in, `""` for none.
    package var replyTos: [String] = []
    package var threadRoots: [String] = []
    /// The attachments each message carries (none once deleted: see ``attachmentColumns`` and ``links``).
    package var attachments: [[Attachment]] = []

    package mutating func append(_ message: Message, targetId: String? = nil) {
        attachments.append(message.attachments)
        targetIds.append(targetId ?? "")
        replyTos.append(message.replyTo ?? "")
        threadRoots.append(message.threadRoot ?? "")
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
    package func index(of serverId: String) -> Int? {
        serverIds.lastIndex(of: serverId)
    }

    /// Each message's `attachments` column (`""` for NULL): erased when the batch deleted it, like its body.
    package var attachmentColumns: [String] {
        attachments.indices.map { deletedAt[$0] != 0 ? "" : AttachmentColumn.encode(attachments[$0]) ?? "" }
    }

    /// The uploads the messages carry, each once: all marked as linked (a message carried them, even one the batch
    /// deleted since).
    package var attachmentIds: [String] {
        Set(attachments.joined().map(\.id)).sorted()
    }

    /// One row per (upload, message) for the messages not deleted by the batch.
    package var links: (attachmentIds: [String], conversationIds: [String], seqs: [Int64]) {
        var links: (attachmentIds: [String], conversationIds: [String], seqs: [Int64]) = ([], [], [])
        for index in attachments.indices where deletedAt[index] == 0 {
            for attachment in attachments[index] {
                links.attachmentIds.append(attachment.id)
                links.conversationIds.append(conversationIds[index])
                links.seqs.append(seqs[index])
            }
        }
        return links
    }
}

/// Edits and deletes to apply to messages stored before the batch, one per target (the batch's last wins; a delete
/// wins over an edit), column by column.
package struct LifecycleRows {
    package var targetIds: [String] = []
    /// The new text (`""` once deleted).
    package var bodies: [String] = []
    /// When the batch last edited the target, 0 if it did not (the stored `edited_at` stays).
    package var editedAt: [Int64] = []
    /// When the batch deleted the target, 0 if it did not. An edit then a delete in one batch set both, as two
    /// batches would.
    package var deletedAt: [Int64] = []
    /// The erased body each earlier `pigeon.edit` of a deleted target gets (`""` for an edit).
    package var erasedEdits: [String] = []

    package func isDeleted(_ index: Int) -> Bool { deletedAt[index] != 0 }

    package mutating func apply(targetId: String, newBody: String?, at now: Int64) {
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

/// What a batch does to thread roots' summaries (written after its messages, in the same transaction).
package struct ThreadRows {
    /// The summary after the batch's new replies, by root serverId: roots none of whose replies the batch deletes.
    package var summaries: [String: ThreadSummary] = [:]
    /// Roots one of whose replies the batch deletes: their summary is recomputed from the replies left.
    package var recomputed = Set<String>()

    package var isEmpty: Bool { summaries.isEmpty && recomputed.isEmpty }

    /// Counts a new reply by `sender` at `at` in the thread of `root`, whose summary before the batch is `before`.
    package mutating func addReply(to root: String, by sender: String, at: Int64, before: ThreadSummary?) {
        guard !recomputed.contains(root) else { return }
        let current = summaries[root] ?? before ?? ThreadSummary(replyCount: 0, lastReplyAt: 0, lastReplySenders: [])
        summaries[root] = current.adding(replyBy: sender, at: at)
    }

    /// A reply of `root` was deleted: its summary is recomputed after the batch's writes.
    package mutating func replyDeleted(in root: String) {
        summaries[root] = nil
        recomputed.insert(root)
    }
}

/// Dead letters to insert, column by column.
package struct DeadLetterRows {
    package var messages: [BufferedMessage] = []
    package var failedAt: [Int64] = []
    package var codes: [String] = []
    package var errors: [String] = []

    package mutating func append(_ message: BufferedMessage, failedAt now: Int64, error: ErrorDetail) {
        messages.append(message)
        failedAt.append(now)
        codes.append(error.code.rawValue)
        errors.append(error.message)
    }
}

/// Runs `operation`, throwing `CancellationError` if it takes longer than `timeout`.
package func withTimeout<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
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
