import PigeonProtocol

/// One of this device's reactions that the server has not answered yet (``PigeonClient/pendingReactions()``). It
/// already shows in its message's ``PigeonMessage/reactions``.
public struct PendingReaction: Sendable, Equatable, Codable {
    /// The local id of the message reacted to.
    public var messageLocalId: Int64
    public var key: String
    public var action: ReactionAction

    public init(messageLocalId: Int64, key: String, action: ReactionAction) {
        self.messageLocalId = messageLocalId
        self.key = key
        self.action = action
    }
}
