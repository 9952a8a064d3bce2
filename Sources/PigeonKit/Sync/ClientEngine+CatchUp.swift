import PigeonProtocol

extension ClientEngine {
    /// Fetches every missing range at once (`messages?after=` the contiguous seq, page by page). The messages
    /// after a gap stay persisted meanwhile; a failed fetch is retried, never given up.
    func gapLoop() async {
        while !Task.isCancelled {
            await gapWake.wait()
            guard onlineConnection != nil else { continue }
            do {
                try await fillGaps()
            } catch {
                logger.debug("gap fetch failed; retrying", metadata: ["error": "\(error)"])
                try? await clock.sleep(for: settings.reconnectBaseDelay)
                gapWake.notify()
            }
        }
    }

    /// Also reads the conversations the database asks for first (one this user was added to: its members, and
    /// the seq it joined at, where its history starts). A `404` for a conversation means this user is no longer in
    /// it: it is marked left and no longer fetched.
    func fillGaps() async throws {
        try await fetchConversations()
        try await fetchMissingMessages()
    }

    /// Fetches the messages missing in `conversationId` (nil: in every conversation), page by page from each gap's
    /// contiguous seq. A `404` for a conversation means this user is no longer in it: it is marked left and no longer
    /// fetched. Returns when nothing is missing, or when the server has nothing after a gap: the seq expected does not
    /// exist (yet); a later event or catch-up asks again.
    ///
    /// A page lists every message this user may see after the seq it was asked from, in order: the seqs it skips are
    /// ones this user never sees (a blocked user's messages, API.md 1.2), and the last page (`hasMore` false) also
    /// proves that nothing visible is missing up to the last seq known before it was asked for (a stored seq is
    /// never followed by an earlier one). The contiguous seq passes over those seqs, so they hold up neither the
    /// announcements nor the delivered receipts.
    func fetchMissingMessages(in conversationId: String? = nil) async throws {
        var rounds = 0
        while let (gapConversationId, after, lastSeq) = try await store.gaps().first(where: { conversationId == nil || $0.conversationId == conversationId }),
            rounds < 100_000
        {
            rounds += 1
            let page: MessagePage
            do {
                page = try await transport.messages(conversationId: gapConversationId, after: after, limit: settings.fetchPageSize)
            } catch let error as PigeonClientError where error.serverError?.code == .notFound {
                try await markLeft(gapConversationId)
                continue
            }
            let highest = page.messages.map(\.seq).max()
            let covered = page.hasMore ? highest : max(highest ?? after, lastSeq)
            try await apply([.history(conversationId: gapConversationId, page.messages, after: after, coveredThrough: covered)])
            if page.messages.isEmpty { return }
        }
    }

    /// Periodic and on-demand catch-up: every conversation with its members' watermarks, then every message
    /// missing up to each conversation's last seq. Covers a stream that stalled silently, a `reset`, a new or
    /// rebuilt database.
    func catchUpLoop() async {
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
        try await confirmMemberships(listed: conversations)
        try await fillGaps()
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

    /// Creates the conversation on the server and saves it locally before returning it.
    func createConversation(_ request: CreateConversationRequest) async throws -> Conversation {
        let conversation = try await transport.createConversation(request)
        try await apply([.conversations([conversation])])
        return conversation
    }
}
