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
    case connectionStateChanged(ConnectionState)
    /// A member of a conversation started or stopped typing (ephemeral, never stored).
    case typing(conversationId: String, userId: String, active: Bool)
    /// The local database could not be opened and was rebuilt; see ``LocalDatabaseRecovery``.
    case localDatabaseRebuilt(LocalDatabaseRecovery)
}

/// Delegate-style observation (seed 002's listener). Methods are called after the local database write, in
/// order, on an internal executor: hop to the main actor yourself to touch UI. The default implementations do
/// nothing, so a listener implements only what it needs.
public protocol PigeonListener: AnyObject, Sendable {
    func onMessageReceived(_ message: PigeonMessage)
    func onMessageStatusChanged(_ message: PigeonMessage)
    func onConnectionStateChanged(_ state: ConnectionState)
    func onConversationUpdated(_ conversation: PigeonConversation)
    func onLocalDatabaseRebuilt(_ recovery: LocalDatabaseRecovery)
}

extension PigeonListener {
    public func onMessageReceived(_ message: PigeonMessage) {}
    public func onMessageStatusChanged(_ message: PigeonMessage) {}
    public func onConnectionStateChanged(_ state: ConnectionState) {}
    public func onConversationUpdated(_ conversation: PigeonConversation) {}
    public func onLocalDatabaseRebuilt(_ recovery: LocalDatabaseRecovery) {}
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
