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
}

/// Delegate-style observation (seed 002's listener). Methods are called after the local database write, in
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
