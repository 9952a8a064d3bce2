import PigeonProtocol

/// What a ``PigeonClient`` tells the app, in the order it happened. Every event follows the local database write it
/// describes, so reading the database after an event always shows at least that change.
public enum PigeonEvent: Sendable, Equatable {
    /// A message from someone else (or from another of this user's devices) is now on this device. Within a
    /// conversation, messages are announced in seq order: a message that arrived after a gap is announced once the
    /// gap is filled.
    case messageReceived(PigeonMessage)
    /// An outgoing message's status (or delivery path) changed; the message carries its new state.
    case messageStatusChanged(PigeonMessage)
    /// A conversation was created, its members' watermarks moved, or its unread count changed.
    case conversationUpdated(PigeonConversation)
    /// The connection moved to a new state (sent only on a change, never twice in a row for one state).
    case connectionStateChanged(ConnectionState)
    /// A member of a conversation started or stopped typing (ephemeral, never stored).
    case typing(conversationId: String, userId: String, active: Bool)
    /// The local database could not be opened and was rebuilt; see ``LocalDatabaseRecovery``.
    case localDatabaseRebuilt(LocalDatabaseRecovery)
    /// The server refused this device's token (revoked, or no longer valid): the client stopped connecting and
    /// sending for good (``ConnectionState/signedOut``); the error is the server's answer. Sent once.
    case signedOut(PigeonClientError)

    // Group chats and the message lifecycle (API.md 1.1).

    /// Members were added, removed, or left a group (a `pigeon.members` message, also announced in its place by
    /// ``messageReceived(_:)``); the conversation is as it is now.
    case membersChanged(PigeonConversation, MembersChange)
    /// A member's role changed (set by the owner, or the new owner after the owner left).
    case roleChanged(PigeonConversation, MembersChange)
    /// The group was renamed (``PigeonConversation/name``; `nil`: it has none).
    case conversationRenamed(PigeonConversation, MembersChange)
    /// This user was removed from the conversation, or left it (from any of its devices): it stays on the device,
    /// read-only (``PigeonConversation/leftAtSeq``), and nothing more arrives from it.
    case leftConversation(PigeonConversation, MembersChange)
    /// A message now reads a new text (``PigeonMessage/body``, ``PigeonMessage/editedAt``): an edit made here
    /// (at once, before the server has it), or on another device, or by its sender.
    case messageEdited(PigeonMessage)
    /// A message is deleted (``PigeonMessage/deletedAt``; its body is `""`): made here (at once) or elsewhere.
    case messageDeleted(PigeonMessage)
    /// An edit or deletion made on this device failed (`change` is ⚠️ with its ``PigeonMessage/failure``): `message`,
    /// the message it would have changed, reads as it did without it. ``PigeonClient/retry(localId:)`` on the change
    /// tries again.
    case messageChangeFailed(change: PigeonMessage, message: PigeonMessage)
    /// How many members have one of this user's messages changed (``PigeonMessage/recipients``: a group's "delivered
    /// to 3 of 5, read by 2"). A change that also moves the status is announced by ``messageStatusChanged(_:)`` too.
    case recipientsChanged(PigeonMessage)

    // Reactions, replies and threads (API.md 1.2).

    /// A message's reactions read differently (``PigeonMessage/reactions``): a reaction made here (at once, before
    /// the server has it), or the server's aggregate heard (an answer, another member's reaction, a read).
    case reactionsChanged(PigeonMessage)
    /// A reaction made here could not be made (`error`: the server's refusal, such as `conflict` for a deleted
    /// message or a limit, or the message it was for was never sent): it is dropped, and `message` reads as without it.
    case reactionFailed(message: PigeonMessage, key: String, action: ReactionAction, error: ErrorDetail)
    /// A thread's root has a new summary (``PigeonMessage/thread``): a reply arrived or was deleted, or a read
    /// corrected it.
    case threadUpdated(PigeonMessage)

    // Attachments (API.md 1.2).

    /// An attachment of the message `localId`, saved on this device, is being uploaded: `sent` of its `total` bytes
    /// are on their way (`attachmentIndex` is its place in ``PigeonMessage/attachments``). Sent as the bytes go, and
    /// once with `sent == total` when all of them went; an upload tried again starts again from 0. The message stays
    /// ⏰ until every attachment is uploaded and the server accepted the message.
    case uploadProgress(localId: Int64, attachmentIndex: Int, sent: Int64, total: Int64)

    // Consent (API.md 1.2).

    /// This user was invited to a conversation (added by someone it shares no joined conversation with, on a server
    /// that asks for consent): it is in ``PigeonClient/invitations()`` (not in ``PigeonClient/conversations()``), with
    /// ``PigeonConversation/invitedBy``, until ``PigeonClient/acceptInvitation(_:)`` or
    /// ``PigeonClient/declineInvitation(_:)``.
    case invitationReceived(PigeonConversation)
    /// An invitation was accepted (here or on another device of this user): the conversation is an ordinary one now,
    /// and its history is on its way.
    case invitationAccepted(PigeonConversation)
    /// An invitation is gone from the device, with what it held: declined (here or on another device of this user),
    /// or withdrawn (the inviter removed this user before it accepted).
    case invitationRemoved(conversationId: String)
}

/// Delegate-style observation (a listener with `onMessageReceived`-style callbacks). Methods are called after the local database write, in
/// order, on an internal executor: hop to the main actor yourself to touch UI. The default implementations do
/// nothing, so a listener implements only what it needs.
public protocol PigeonListener: AnyObject, Sendable {
    /// ``PigeonEvent/messageReceived(_:)``: a message from someone else is on this device, in seq order per
    /// conversation.
    func onMessageReceived(_ message: PigeonMessage)
    /// ``PigeonEvent/messageStatusChanged(_:)``: an outgoing message's status (or delivery path) moved forward.
    func onMessageStatusChanged(_ message: PigeonMessage)
    /// ``PigeonEvent/connectionStateChanged(_:)``.
    func onConnectionStateChanged(_ state: ConnectionState)
    /// ``PigeonEvent/conversationUpdated(_:)``: created, watermarks moved, or unread count changed.
    func onConversationUpdated(_ conversation: PigeonConversation)
    /// ``PigeonEvent/localDatabaseRebuilt(_:)``: sent once, first, by the run after a rebuild.
    func onLocalDatabaseRebuilt(_ recovery: LocalDatabaseRecovery)
    /// ``PigeonEvent/signedOut(_:)``: the server refused this device's token; the client stopped for good.
    func onSignedOut(_ error: PigeonClientError)
    /// ``PigeonEvent/membersChanged(_:_:)``, ``PigeonEvent/roleChanged(_:_:)``, ``PigeonEvent/conversationRenamed(_:_:)``
    /// and ``PigeonEvent/leftConversation(_:_:)``: a member change, with the conversation as it is now.
    func onMembersChanged(_ conversation: PigeonConversation, _ change: MembersChange)
    /// ``PigeonEvent/messageEdited(_:)`` and ``PigeonEvent/messageDeleted(_:)``: a message reads differently now.
    func onMessageChanged(_ message: PigeonMessage)
    /// ``PigeonEvent/messageChangeFailed(change:message:)``: an edit or deletion made here failed and was undone.
    func onMessageChangeFailed(_ change: PigeonMessage, message: PigeonMessage)
    /// ``PigeonEvent/recipientsChanged(_:)``: the per-member counts of one of this user's messages moved.
    func onRecipientsChanged(_ message: PigeonMessage)
    /// ``PigeonEvent/reactionsChanged(_:)``: a message's reactions read differently.
    func onReactionsChanged(_ message: PigeonMessage)
    /// ``PigeonEvent/reactionFailed(message:key:action:error:)``: a reaction made here was dropped.
    func onReactionFailed(_ message: PigeonMessage, key: String, action: ReactionAction, error: ErrorDetail)
    /// ``PigeonEvent/threadUpdated(_:)``: a thread's root has a new summary.
    func onThreadUpdated(_ root: PigeonMessage)
    /// ``PigeonEvent/uploadProgress(localId:attachmentIndex:sent:total:)``: an attachment of a message saved here is
    /// being uploaded.
    func onUploadProgress(localId: Int64, attachmentIndex: Int, sent: Int64, total: Int64)
    /// ``PigeonEvent/invitationReceived(_:)``: this user was invited to a conversation.
    func onInvitationReceived(_ conversation: PigeonConversation)
    /// ``PigeonEvent/invitationAccepted(_:)``: an invitation was accepted; the conversation is an ordinary one now.
    func onInvitationAccepted(_ conversation: PigeonConversation)
    /// ``PigeonEvent/invitationRemoved(conversationId:)``: an invitation was declined or withdrawn.
    func onInvitationRemoved(conversationId: String)
}

extension PigeonListener {
    /// Does nothing.
    public func onMessageReceived(_ message: PigeonMessage) {}
    /// Does nothing.
    public func onMessageStatusChanged(_ message: PigeonMessage) {}
    /// Does nothing.
    public func onConnectionStateChanged(_ state: ConnectionState) {}
    /// Does nothing.
    public func onConversationUpdated(_ conversation: PigeonConversation) {}
    /// Does nothing.
    public func onLocalDatabaseRebuilt(_ recovery: LocalDatabaseRecovery) {}
    /// Does nothing.
    public func onSignedOut(_ error: PigeonClientError) {}
    /// Does nothing.
    public func onMembersChanged(_ conversation: PigeonConversation, _ change: MembersChange) {}
    /// Does nothing.
    public func onMessageChanged(_ message: PigeonMessage) {}
    /// Does nothing.
    public func onMessageChangeFailed(_ change: PigeonMessage, message: PigeonMessage) {}
    /// Does nothing.
    public func onRecipientsChanged(_ message: PigeonMessage) {}
    /// Does nothing.
    public func onReactionsChanged(_ message: PigeonMessage) {}
    /// Does nothing.
    public func onReactionFailed(_ message: PigeonMessage, key: String, action: ReactionAction, error: ErrorDetail) {}
    /// Does nothing.
    public func onThreadUpdated(_ root: PigeonMessage) {}
    /// Does nothing.
    public func onUploadProgress(localId: Int64, attachmentIndex: Int, sent: Int64, total: Int64) {}
    /// Does nothing.
    public func onInvitationReceived(_ conversation: PigeonConversation) {}
    /// Does nothing.
    public func onInvitationAccepted(_ conversation: PigeonConversation) {}
    /// Does nothing.
    public func onInvitationRemoved(conversationId: String) {}
}

/// What happened when the local database could not be opened (corrupt, not a database, or from a newer version
/// of the SDK): the file was moved aside and a new one is rebuilt from the server.
public struct LocalDatabaseRecovery: Sendable, Equatable, Codable {
    /// Where the unreadable database was moved (with its `-wal` and `-shm` files).
    public var movedTo: String
    /// Why it could not be opened.
    public var reason: String
    /// Unsent messages read back from the old file and queued again (they keep their clientMessageId, so a
    /// message the server already had is not stored twice).
    public var recoveredOutboxItems: Int
    /// Unsent messages that could not be read back, or `nil` when the old outbox was unreadable and how many it
    /// held is unknown. `0` means nothing unsent was lost.
    public var lostOutboxItems: Int?
}
