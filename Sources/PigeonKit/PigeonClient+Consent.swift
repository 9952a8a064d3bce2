import Foundation
import PigeonProtocol

/// Blocking (API.md 1.2). Once this user blocks someone, the server keeps that user's messages, reactions and typing
/// from this user's devices (so nothing needs hiding here; a seq held back is passed over, see
/// ``PigeonClient/catchUp()``), refuses its attempts to add this user to a conversation, and never shows it ✓✓ from
/// this user. Nothing announces the block to the blocked user. Unblocking shows what it sends from then on, not what
/// was held back. Each call needs the network; ``blockedUsers()`` reads this device's copy of the list, refreshed by
/// each call here and each catch-up.
///
/// Errors: ``PigeonClientError/Code-swift.struct/invalidArgument`` for a user id refused before anything is sent (not
/// `[A-Za-z0-9._@-]{1,64}`, or this user itself) or by the server (`400`); the server's and the network's otherwise.
extension PigeonClient {
    /// Blocks `userId` (blocking a user blocked already changes nothing) and returns the blocked users after it.
    @discardableResult
    public func block(_ userId: String) async throws -> [BlockedUser] {
        try validateBlockTarget(userId)
        try await consentCall { try await self.accountTransport.block(userId) }
        return try await fetchBlockedUsers()
    }

    /// Unblocks `userId` (a user not blocked changes nothing) and returns the blocked users after it.
    @discardableResult
    public func unblock(_ userId: String) async throws -> [BlockedUser] {
        try validateBlockTarget(userId)
        try await consentCall { try await self.accountTransport.unblock(userId) }
        return try await fetchBlockedUsers()
    }

    /// The users this user blocked, by user id, as this device last read them from the server (no network).
    public func blockedUsers() throws -> [BlockedUser] {
        try store.blockedUsers()
    }

    /// Reads the blocked users from the server, keeps them on the device and returns them. Needs the network.
    public func fetchBlockedUsers() async throws -> [BlockedUser] {
        let users = try await consentCall { try await self.accountTransport.blockedUsers() }
        try await store.replaceBlockedUsers(users)
        return try store.blockedUsers()
    }

    private func validateBlockTarget(_ userId: String) throws {
        guard Validation.isValidUserId(userId) else { throw PigeonClientError.invalid("\"\(userId)\" is not a user id (1–64 characters of [A-Za-z0-9._@-])") }
        guard userId != self.userId else { throw PigeonClientError.invalid("\(userId) cannot block itself") }
    }
}

/// Invitations (API.md 1.2, on a server started with `--consent invites`): a user added to a conversation by someone
/// it shares no joined conversation with is invited, not joined. The device records the invitation as it arrives
/// (``PigeonEvent/invitationReceived(_:)``, also after a catch-up for one made while it was offline) and keeps it out
/// of ``conversations()``: ``invitations()`` lists them, each with ``PigeonConversation/invitedBy``. Nothing is
/// fetched, counted unread or acknowledged for it, and nothing can be sent there
/// (``PigeonClientError/Code-swift.struct/invitationPending``), until it is accepted.
extension PigeonClient {
    /// This user's invitations on this device, newest first (no network).
    public func invitations() throws -> [PigeonConversation] {
        try store.invitations()
    }

    /// Accepts an invitation: from then on this user is a member like any, the conversation is listed by
    /// ``conversations()``, and its history is fetched now (what a failed fetch misses comes with the next
    /// catch-up). Returns the conversation; ``PigeonEvent/invitationAccepted(_:)`` announces it (on every device of
    /// this user). Needs the network.
    ///
    /// Throws ``PigeonClientError/Code-swift.struct/unknownConversation`` for a conversation not on this device,
    /// ``PigeonClientError/Code-swift.struct/invalidArgument`` for one that is no invitation,
    /// ``PigeonClientError/Code-swift.struct/notMember`` when the invitation is gone on the server (withdrawn, or
    /// declined on another device: it is then removed here too).
    @discardableResult
    public func acceptInvitation(_ conversationId: String) async throws -> PigeonConversation {
        let id = try localInvitation(conversationId)
        _ = try await engine.changeConversation(id) { try await self.accountTransport.acceptInvitation(conversationId: id) }
        do {
            try await engine.fetchMissingMessages(in: id)
        } catch {
            configuration.logger.debug("fetching an accepted conversation's history failed; the next catch-up does", metadata: ["error": "\(error)"])
        }
        engine.gapWake.notify()
        engine.receiptsChanged()
        guard let local = try await store.conversation(id: id) else {
            throw PigeonClientError(.localDatabase, "conversation \(id) was not saved")
        }
        return local
    }

    /// Declines an invitation: this user leaves the conversation (the others see that it left) and the invitation
    /// is removed from this device with all it held (``PigeonEvent/invitationRemoved(conversationId:)``, on every
    /// device of this user). An invitation already gone on the server is removed all the same. Needs the network.
    /// Throws like ``acceptInvitation(_:)``.
    public func declineInvitation(_ conversationId: String) async throws {
        let id = try localInvitation(conversationId)
        do {
            try await consentCall { try await self.accountTransport.declineInvitation(conversationId: id) }
        } catch let error as PigeonClientError where error.serverError?.code == .notFound {
            configuration.logger.debug("declining: the invitation was gone already", metadata: ["conversation": "\(id)"])
        }
        if try await store.removeInvitation(conversationId: id) { hub.emit(.invitationRemoved(conversationId: id)) }
    }

    /// The canonical id of an invitation of this user on this device.
    private func localInvitation(_ conversationId: String) throws -> String {
        guard let id = Validation.canonicalUUID(conversationId) else { throw PigeonClientError.invalid("\"\(conversationId)\" is not a conversation id") }
        guard let local = try conversation(id: id) else {
            throw PigeonClientError(.unknownConversation, "conversation \(id) is not on this device")
        }
        guard local.isMember, local.isInvitation else {
            throw PigeonClientError.invalid("conversation \(id) is not an invitation of \(userId)")
        }
        return id
    }

    /// A consent call, its server errors in the terms of the call: `400` is ``PigeonClientError/Code-swift.struct/invalidArgument``,
    /// `403` ``PigeonClientError/Code-swift.struct/forbidden``.
    private func consentCall<T>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch let error as PigeonClientError where error.code == .server && error.serverError != nil {
            let detail = error.serverError!
            switch detail.code {
            case .invalidRequest: throw PigeonClientError(.invalidArgument, detail.message, serverError: detail, httpStatus: error.httpStatus)
            case .forbidden: throw PigeonClientError(.forbidden, detail.message, serverError: detail, httpStatus: error.httpStatus)
            default: throw error
            }
        }
    }
}
