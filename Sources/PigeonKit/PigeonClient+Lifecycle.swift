import Foundation
import PigeonProtocol

/// Editing and deleting a message (API.md 1.1), through the outbox like a send.
///
/// An edit or a deletion is saved locally first (with its outbox item, in one transaction) and shows on the message
/// at once: its ``PigeonMessage/body`` is the new text (or `""`), with ``PigeonMessage/editedAt`` or
/// ``PigeonMessage/deletedAt``, and the full-text index follows. It goes out when the client is online, in the
/// conversation's sending order: after every message saved before it, so an edit of a message that is still waiting
/// goes right after that message has its serverId. It has a status of its own (⏰ pending, ✓ sent and stored, ⚠️
/// failed), retried with the same clientMessageId like a send. Once the server stores it (`message.stored`), the
/// message reads as confirmed; if it fails (the server refuses it, e.g. `forbidden` for another user's message, or
/// `message.failed` at processing), the message reads as before it again and
/// ``PigeonEvent/messageChangeFailed(change:message:)`` says so; ``PigeonClient/retry(localId:)`` on the change tries
/// again. The server decides who may edit: the SDK does not check the sender itself.
extension PigeonClient {
    /// Replaces the text of the message `localId` with `body`; returns the edit (its own message, ⏰ pending, kind
    /// ``PigeonMessage/Kind/edit(target:body:)``). The message shows the new text at once
    /// (``PigeonEvent/messageEdited(_:)``).
    ///
    /// Throws only local errors, and then writes nothing: ``PigeonClientError/Code-swift.struct/unknownMessage``,
    /// ``PigeonClientError/Code-swift.struct/invalidArgument`` (an empty or oversized body, U+0000, a deleted message, a
    /// member change, a message of this device that failed: retry it first),
    /// ``PigeonClientError/Code-swift.struct/notMember``, or a database error.
    @discardableResult
    public func edit(localId: Int64, body: String) throws -> PigeonMessage {
        guard !body.isEmpty else { throw PigeonClientError.invalid("the body is empty (to remove a message, delete it)") }
        guard body.utf8.count <= configuration.maxBodyBytes else {
            throw PigeonClientError.invalid("the body is \(body.utf8.count) bytes; the limit is \(configuration.maxBodyBytes)")
        }
        guard Validation.isStorableText(body) else { throw PigeonClientError.invalid("the body contains U+0000") }
        return try saveChange(of: localId, newBody: body)
    }

    /// Deletes the message `localId` for everyone: its text is erased here at once (``PigeonEvent/messageDeleted(_:)``)
    /// and from the server once it has the deletion. Returns the deletion (its own message, ⏰ pending, kind
    /// ``PigeonMessage/Kind/delete(target:)``). Throws like ``edit(localId:body:)``.
    @discardableResult
    public func delete(localId: Int64) throws -> PigeonMessage {
        try saveChange(of: localId, newBody: nil)
    }

    private func saveChange(of localId: Int64, newBody: String?) throws -> PigeonMessage {
        let (change, outcome) = try store.insertChange(
            targetLocalId: localId, newBody: newBody, clientMessageId: UUID().uuidString.lowercased(),
            clientTimestamp: Int64(Date().timeIntervalSince1970 * 1000))
        hub.emit(.messageStatusChanged(change))
        hub.emit(outcome)
        engine.enqueue(OutboxItem(localId: change.localId, conversationId: change.conversationId, clientMessageId: change.clientMessageId))
        return change
    }
}
