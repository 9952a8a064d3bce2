
import Foundation
import PigeonProtocol

/// Fetches what this device is missing: every gap in a conversation's seqs (page by page from the contiguous seq),
/// the conversations the database asks for, the senders of invitations, and a conversation named by a push.
struct GapFiller: EnginePart {
    let shared: EngineShared

    /// Fetches every missing range at once (`messages?after=` the contiguous seq, page by page). The messages
    /// after a gap stay persisted meanwhile; a failed fetch is retried, never given up.
    func run() async {
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



    /// Reads again the conversations the database asks for (``LocalStore/conversationsToFetch()``): one a message
    /// arrived in before it was known (this user was added to it), or whose member changes came out of order.
    func fetchConversations() async throws {
        for id in try await store.conversationsToFetch() { try await refreshConversation(id) }
        try await learnInvitationSenders()
    }

    /// Invitations whose sender this device did not see (the change that added this user came before a `reset`, or
    /// before this database): the change is the message at the seq this user joined at, readable by an invited user.
    func learnInvitationSenders() async throws {
        for (id, joinedSeq) in try await store.invitationsWithoutSender() where joinedSeq > 0 {
            let page: MessagePage
            do {
                page = try await transport.messages(conversationId: id, after: joinedSeq - 1, limit: 1)
            } catch let error as PigeonClientError where error.serverError?.code == .notFound {
                try await markLeft(id)
                continue
            }
            var sender: String?
            if let message = page.messages.first, message.seq == joinedSeq, message.type == ServerMessageType.members,
                let change = try? JSONDecoder().decode(MembersChange.self, from: Data(message.body.utf8)), change.action == .added
            {
                sender = change.by
            }
            // Not found where it should be: its owner speaks for the conversation (and it is not asked again).
            if sender == nil { sender = try await store.conversation(id: id)?.members.first { $0.role == .owner }?.userId }
            guard let sender else { continue }
            if let conversation = try await store.setInvitationSender(conversationId: id, userId: sender) {
                hub.emit(.conversationUpdated(conversation))
            }
        }
    }

    /// `GET /v1/conversations/{id}`, applied; a `404` means this user is no longer a member: the conversation is
    /// kept, marked left. Whether it is still a member.
    @discardableResult
    func refreshConversation(_ id: String) async throws -> Bool {
        do {
            try await apply([.conversations([try await transport.conversation(id: id)])])
            return true
        } catch let error as PigeonClientError where error.serverError?.code == .notFound {
            try await markLeft(id)
            return false
        }
    }

    /// The server answered `404` for a conversation on this device: left, or, for an invitation, gone (declined on
    /// another device, or withdrawn).
    func markLeft(_ id: String) async throws {
        if try await store.removeInvitation(conversationId: id) {
            hub.emit(.invitationRemoved(conversationId: id))
        } else if let conversation = try await store.markLeft(conversationId: id) {
            hub.emit(.conversationUpdated(conversation))
        }
    }

    /// Conversations this device takes itself to be a member of but the server's list leaves out: asked one by one
    /// (a conversation created while the list was read is there; one this user was removed from answers `404`).
    func confirmMemberships(listed: [Conversation]) async throws {
        let listedIds = Set(listed.map(\.id))
        for id in try await store.memberConversationIds() where !listedIds.contains(id) { try await refreshConversation(id) }
    }


    /// The conversation a push named, before everything else: read it again (its last seq, or this user's removal:
    /// then it is marked left), then fetch every message missing in it, page by page.
    func catchUp(conversationId: String) async throws {
        guard try await refreshConversation(conversationId) else { return }
        try await fetchMissingMessages(in: conversationId)
    }
}
