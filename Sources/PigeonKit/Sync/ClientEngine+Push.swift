import PigeonProtocol

extension ClientEngine {
    /// The conversation a push named, before everything else: read it again (its last seq, or this user's removal:
    /// then it is marked left), then fetch every message missing in it, page by page.
    func catchUp(conversationId: String) async throws {
        guard try await refreshConversation(conversationId) else { return }
        var rounds = 0
        while let after = try await store.gaps().first(where: { $0.conversationId == conversationId })?.after, rounds < 100_000 {
            rounds += 1
            let page: MessagePage
            do {
                page = try await transport.messages(conversationId: conversationId, after: after, limit: settings.fetchPageSize)
            } catch let error as PigeonClientError where error.serverError?.code == .notFound {
                try await markLeft(conversationId)
                return
            }
            try await apply([.history(conversationId: conversationId, page.messages)])
            // Nothing after `after`: the seq expected does not exist (yet).
            if page.messages.isEmpty { return }
        }
    }

    /// Closes the open stream, if any, and reconnects at once (without the backoff of a failed attempt): a push
    /// means the server saw no stream from this device, so a connection the engine still holds from before is
    /// presumed dead (a suspended app's socket, which would swallow sends and receipts until its liveness check).
    /// Whether there was one to close.
    @discardableResult
    func replaceConnection() -> Bool {
        let connection = slot.withLockedValue { $0.connection }
        guard let connection else { return false }
        connectionWake.signal()
        connection.close()
        return true
    }
}
