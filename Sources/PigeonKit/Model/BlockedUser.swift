/// A user this user blocked (API.md 1.2): its messages, reactions and typing no longer reach this user's devices,
/// and it can no longer add this user to a conversation.
public struct BlockedUser: Sendable, Equatable, Hashable, Codable {
    /// The blocked user.
    public var userId: String
    /// When the block was made, in milliseconds since the epoch (the server's clock).
    public var blockedAt: Int64

    public init(userId: String, blockedAt: Int64) {
        self.userId = userId
        self.blockedAt = blockedAt
    }
}
