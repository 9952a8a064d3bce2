import PigeonDomain
import PigeonProtocol

/// What a device may do in a conversation, the same over HTTP and over its WebSocket: find a conversation it is a
/// member of, record its receipts and reactions, update its typing state.
struct ConversationAccess: Sendable {
    let store: any ConversationStore & ReceiptStore & ReactionStore & BlockStore
    let abuse: AbuseGuard
    let metrics: PigeonMetrics
    let typing: TypingTracker
    let streamLimits: StreamLimits
    /// `--consent invites`: an invited member reads the conversation but acts in it only once it accepts.
    var invitesExist = false

    /// A conversation id from the path, checked to be a UUID (400) and the caller's (404).
    func memberConversation(_ rawId: String?, device: DeviceIdentity) async throws -> (id: String, members: [String]) {
        guard let rawId, let id = Validation.canonicalUUID(rawId) else { throw PigeonError.invalid("conversation id must be a UUID") }
        guard let members = try await store.members(of: id), members.contains(device.userId) else { throw PigeonError.conversationNotFound }
        return (id, members)
    }

    /// ``memberConversation(_:device:)`` for what only a joined member does (react, type): an invited one is refused
    /// until it accepts.
    func joinedConversation(_ rawId: String?, device: DeviceIdentity) async throws -> (id: String, members: [String]) {
        let conversation = try await memberConversation(rawId, device: device)
        if invitesExist, try await store.member(device.userId, of: conversation.id)?.membership == .invited {
            throw PigeonError.invitationPending
        }
        return conversation
    }

    /// Validates and records a receipt.
    func recordReceipt(_ receipt: ReceiptRequest, conversationId: String, device: DeviceIdentity) async throws -> ReceiptResponse {
        let conversation = try await memberConversation(conversationId, device: device)
        try checkReceipt(receipt, device: device)
        let outcome = try await store.recordReceipt(
            conversationId: conversation.id, userId: device.userId, kind: receipt.kind, upToSeq: receipt.upToSeq)
        return recorded(outcome, device: device, members: conversation.members.count)
    }

    /// ``recordReceipt(_:conversationId:device:)`` answered through `completion`, with no task when the members are
    /// in memory and the store writes with a callback (the embedded store): for the WebSocket's event loop.
    func recordReceipt(
        _ receipt: ReceiptRequest, conversationId rawId: String, device: DeviceIdentity,
        completion: @escaping @Sendable (Result<ReceiptResponse, any Error>) -> Void
    ) {
        guard let id = Validation.canonicalUUID(rawId), let members = store.cachedMembers(of: id) else {
            Task {
                do {
                    completion(.success(try await recordReceipt(receipt, conversationId: rawId, device: device)))
                } catch {
                    completion(.failure(error))
                }
            }
            return
        }
        do {
            guard members.contains(device.userId) else { throw PigeonError.conversationNotFound }
            try checkReceipt(receipt, device: device)
        } catch {
            return completion(.failure(error))
        }
        store.recordReceipt(conversationId: id, userId: device.userId, kind: receipt.kind, upToSeq: receipt.upToSeq) { [self] result in
            completion(result.map { recorded($0, device: device, members: members.count) })
        }
    }

    private func checkReceipt(_ receipt: ReceiptRequest, device: DeviceIdentity) throws {
        guard receipt.upToSeq >= 0 else { throw PigeonError.invalid("upToSeq must be 0 or more") }
        try abuse.checkStorage(of: device.userId)
    }

    /// Charges a recorded receipt to its user's stored bytes and counts a delivery it made; its answer.
    private func recorded(_ outcome: ReceiptOutcome, device: DeviceIdentity, members: Int) -> ReceiptResponse {
        // A receipt that moves a watermark writes an event row per member (two when read moves delivered too).
        abuse.chargeStorage(of: device.userId, bytes: abuse.storageCost(bytes: 128, members: 2 * members))
        if let storedAt = outcome.deliveredMessageStoredAt {
            metrics.messageDelivered(storedAt: storedAt, nowMillis: WallClock.nowMillis())
        }
        return outcome.watermarks
    }

    /// Validates and records a reaction (API.md 1.2): a conversation and message id that are UUIDs and a valid key
    /// (`400`), the caller's conversation (`404`); the store decides the rest (`404`, `409`). Charged to the caller's
    /// stored bytes like a receipt: a row, and an event row per member.
    func react(
        conversationId: String?, serverId rawServerId: String?, key rawKey: String?, action: ReactionAction, device: DeviceIdentity
    ) async throws -> ReactionsResponse {
        let conversation = try await joinedConversation(conversationId, device: device)
        guard let rawServerId, let serverId = Validation.canonicalUUID(rawServerId) else {
            throw PigeonError.invalid("the message's serverId must be a UUID")
        }
        guard let key = rawKey.flatMap(Validation.canonicalReactionKey) else {
            throw PigeonError.invalid(
                "a reaction key is one emoji or a token of 1-\(ReactionLimits.tokenLength) characters of [a-z0-9_:+-], at most \(ReactionLimits.keyBytes) bytes")
        }
        try abuse.checkStorage(of: device.userId)
        try abuse.admitReaction(by: device)
        let reactions = try await store.react(
            conversationId: conversation.id, serverId: serverId, userId: device.userId, key: key, action: action, at: WallClock.nowMillis())
        abuse.chargeStorage(of: device.userId, bytes: abuse.storageCost(bytes: 192 + key.utf8.count, members: conversation.members.count))
        return ReactionsResponse(serverId: serverId, reactions: reactions)
    }

    /// Validates and pushes a typing change (rate-limited per device).
    func recordTyping(active: Bool, conversationId: String, device: DeviceIdentity) async throws {
        if let wait = typing.admit(device, rate: streamLimits.typingPerSecond, burst: streamLimits.typingBurst) {
            metrics.limitHit("typing_rate")
            throw PigeonError(.rateLimited, "too many typing updates from this device; retry in \(wait) s", retryAfter: wait)
        }
        let conversation = try await joinedConversation(conversationId, device: device)
        // A member who blocks the typist sees none of it (the block set is cached, forgotten on every node when it changes).
        let blockers = try await store.blockers(of: device.userId)
        var members = blockers.isEmpty ? conversation.members : conversation.members.filter { !blockers.contains($0) }
        // An invited member gets only its invitation until it accepts: no typing.
        if invitesExist, let full = try await store.conversation(id: conversation.id) {
            let invited = Set(full.members.filter { $0.membership == .invited }.map(\.userId))
            if !invited.isEmpty { members = members.filter { !invited.contains($0) } }
        }
        typing.update(conversationId: conversation.id, device: device, active: active, members: members)
    }
}
