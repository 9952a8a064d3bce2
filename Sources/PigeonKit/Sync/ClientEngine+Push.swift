import PigeonProtocol

extension ClientEngine {
    /// The conversation a push named, before everything else: read it again (its last seq, or this user's removal:
    /// then it is marked left), then fetch every message missing in it, page by page.
    func catchUp(conversationId: String) async throws {
        guard try await refreshConversation(conversationId) else { return }
        try await fetchMissingMessages(in: conversationId)
    }

    /// Closes the open stream, if any, and reconnects at once (without the backoff of a failed attempt): a push
    /// means the server saw no stream from this device, so a connection the engine still holds from before is
    /// presumed dead (a suspended app's socket, which would swallow sends and receipts until its liveness check).
    /// Whether there was one to close.
    @discardableResult
    func replaceConnection() -> Bool {
        let connection = slot.withLockedValue { $0.connection }
        guard let connection else { return false }
        connectionWake.notify()
        connection.close()
        return true
    }
}
