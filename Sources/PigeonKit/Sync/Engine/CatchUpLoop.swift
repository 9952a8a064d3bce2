import PigeonProtocol

/// Periodic and on-demand catch-up: the conversation list, the missing messages, the blocked users.
struct CatchUpLoop: EnginePart {
    let shared: EngineShared
    let gaps: GapFiller
    /// Periodic and on-demand catch-up: every conversation with its members' watermarks, then every message
    /// missing up to each conversation's last seq. Covers a stream that stalled silently, a `reset`, a new or
    /// rebuilt database.
    func run() async {
        while !Task.isCancelled {
            await catchUpWake.wait(timeout: settings.catchUpInterval)
            guard !Task.isCancelled, onlineConnection != nil else { continue }
            do {
                try await catchUp()
            } catch {
                logger.debug("catch-up failed; retrying", metadata: ["error": "\(error)"])
                try? await clock.sleep(for: settings.reconnectBaseDelay)
                catchUpWake.notify()
            }
        }
    }

    func catchUp() async throws {
        let conversations = try await transport.conversations()
        try await apply([.conversations(conversations)])
        try await gaps.confirmMemberships(listed: conversations)
        try await gaps.fillGaps()
        await refreshBlockedUsers()
        try await store.setNeedsFullSync(false)
    }

    /// Keeps the local list of blocked users as the server has it (a block made on another device of this user
    /// shows here at the next catch-up). Best effort: a server before API 1.2 has no such list.
    func refreshBlockedUsers() async {
        do {
            try await store.replaceBlockedUsers(try await transport.blockedUsers())
        } catch {
            logger.debug("reading the blocked users failed", metadata: ["error": "\(error)"])
        }
    }

}
