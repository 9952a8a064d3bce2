import Foundation
import PigeonProtocol

/// Reactions (API.md 1.2), through the outbox like a send.
///
/// A reaction is this user's: one key (an emoji, or an app token such as `+1` or `party:parrot`) added to a message
/// or removed from it. ``react(_:to:)`` and ``unreact(_:from:)`` save it locally and show it at once in the message's
/// ``PigeonMessage/reactions`` (``PigeonEvent/reactionsChanged(_:)``); it goes out when the client is online, in the
/// order it was made, after the messages of the conversation saved before it (a reaction to a message that still waits
/// goes once that message has its serverId). An add and a remove of the same key that both still wait cancel out:
/// nothing is sent for them.
///
/// Counts are the server's: each answer (over HTTP), each `reaction` event (another member's, or this user's from any
/// device) and each read from the server replaces the message's aggregate whole, and this device's waiting reactions
/// show on top of it. Nothing counts another user's reaction locally, so an event heard twice (a stream resumed
/// after a reconnect, a catch-up) changes nothing the second time. A reaction the server refuses (`conflict`: a
/// deleted message, or a limit of 50 keys per message or 20 per user; `not_found`: a message this user cannot see) is
/// dropped and undone, and ``PigeonEvent/reactionFailed(message:key:action:error:)`` says why; so is one whose message
/// was never sent, or whose tries ran out.
extension PigeonClient {
    /// Adds this user's reaction `key` to `message` and returns the message as it shows now (with the reaction).
    ///
    /// Throws only local errors, and then writes nothing: ``PigeonClientError/Code-swift.struct/invalidArgument`` (a
    /// key that is not one emoji nor a token of 1–32 characters of `[a-z0-9_:+-]`, a deleted message, a `pigeon.*`
    /// message, a message of this device that failed: retry it first), ``PigeonClientError/Code-swift.struct/unknownMessage``,
    /// ``PigeonClientError/Code-swift.struct/notMember``, or a database error.
    @discardableResult
    public func react(_ key: String, to message: PigeonMessage) throws -> PigeonMessage {
        try saveReaction(key, .add, localId: message.localId)
    }

    /// ``react(_:to:)`` for the message with this serverId on this device.
    @discardableResult
    public func react(_ key: String, toServerId serverId: String) throws -> PigeonMessage {
        try saveReaction(key, .add, localId: localId(serverId: serverId))
    }

    /// Removes this user's reaction `key` from `message` and returns the message as it shows now. Throws like
    /// ``react(_:to:)``.
    @discardableResult
    public func unreact(_ key: String, from message: PigeonMessage) throws -> PigeonMessage {
        try saveReaction(key, .remove, localId: message.localId)
    }

    /// ``unreact(_:from:)`` for the message with this serverId on this device.
    @discardableResult
    public func unreact(_ key: String, fromServerId serverId: String) throws -> PigeonMessage {
        try saveReaction(key, .remove, localId: localId(serverId: serverId))
    }

    /// This device's reactions that wait for the server, oldest first.
    public func pendingReactions() throws -> [PendingReaction] {
        try store.pendingReactions()
    }

    /// Who reacted to `message` (with `key`: who reacted with it), a page at a time from the server, ascending by user
    /// id: pass the last user id of a page as `after` for the next. Needs the network, and a message the server has.
    public func reactionUsers(of message: PigeonMessage, key: String? = nil, after: String? = nil, limit: Int = 100) async throws -> ReactionUsersPage {
        let canonical = try key.map { key in
            guard let canonical = Validation.canonicalReactionKey(key) else { throw PigeonClientError.invalid(Self.invalidKey(key)) }
            return canonical
        }
        guard let serverId = message.serverId else { throw PigeonClientError.invalid("message \(message.localId) is not on the server yet") }
        return try await engine.transport.reactionUsers(
            conversationId: message.conversationId, serverId: serverId, key: canonical, after: after, limit: limit)
    }

    private func localId(serverId: String) throws -> Int64 {
        guard let localId = try store.localId(serverId: serverId) else {
            throw PigeonClientError(.unknownMessage, "no message with serverId \(serverId) on this device")
        }
        return localId
    }

    private func saveReaction(_ given: String, _ action: ReactionAction, localId: Int64) throws -> PigeonMessage {
        // The server's form of the key (❤ and ❤️ are one key), so that the local aggregate matches its answer.
        guard let key = Validation.canonicalReactionKey(given) else { throw PigeonClientError.invalid(Self.invalidKey(given)) }
        // One at a time, from saving to queueing, so that an add and a remove of one key always see each other.
        return try reactionLock.withLock {
            let (message, item, outcome) = try store.saveReaction(
                targetLocalId: localId, key: key, action: action, clientMessageId: UUID().uuidString.lowercased()
            ) { self.engine.cancelQueued($0) }
            hub.emit(outcome)
            if let item { engine.enqueue(item) }
            return message
        }
    }

    private static func invalidKey(_ key: String) -> String {
        "\"\(key)\" is not a reaction key: one emoji, or a token of 1–32 characters of [a-z0-9_:+-]"
    }
}
