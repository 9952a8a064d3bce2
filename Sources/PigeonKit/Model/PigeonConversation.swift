import PigeonProtocol

/// A conversation as this device knows it, from the local database.
public struct PigeonConversation: Sendable, Equatable, Identifiable, Codable {
    /// The server's id of the conversation (a lowercase UUID).
    public var id: String
    /// Direct (two users, for good) or a group (API.md 1.1), as the server reports it.
    public var kind: ConversationKind
    /// The name given at creation, if any.
    public var name: String?
    /// Milliseconds since the epoch.
    public var createdAt: Int64
    /// The highest seq this device knows exists (it may still be fetching the messages up to it).
    public var lastSeq: Int64
    /// Every seq up to this one is on this device: the delivered watermark this device reports.
    public var contiguousSeq: Int64
    /// This user's read watermark (set by ``PigeonClient/markRead(conversationId:upToSeq:)`` on any of its devices).
    public var readSeq: Int64
    /// The members with their roles, the seq each joined at, and their delivered and read watermarks, as last reported
    /// by the server.
    public var members: [ConversationMember]
    /// Messages from other users with a seq above ``readSeq``.
    public var unreadCount: Int
    /// The newest message, unsent ones included (member changes count; edits and deletions do not).
    public var lastMessage: PigeonMessage?
    /// Set once this user is no longer a member (removed, or left from any of its devices): the seq of that change,
    /// or `0` when the server answered `404` without the change on this device. The conversation and its messages stay
    /// on the device, read-only: ``members`` is empty, sending is refused, nothing more arrives.
    public var leftAtSeq: Int64? = nil
    /// ``MembershipState/invited`` while this is an invitation of this user (API.md 1.2): listed by
    /// ``PigeonClient/invitations()``, not by ``PigeonClient/conversations()``; nothing can be sent until it is accepted.
    public var membership: MembershipState = .joined
    /// Who invited this user, while this is an invitation (``membership`` is ``MembershipState/invited``); else `nil`.
    public var invitedBy: String? = nil

    /// Whether this user is still a member (see ``leftAtSeq``); an invitation counts (see ``isInvitation``).
    public var isMember: Bool { leftAtSeq == nil }

    /// Whether this is an invitation this user has not accepted yet.
    public var isInvitation: Bool { membership == .invited }

    /// The role of `userId` in the conversation, `nil` when it is not a member.
    public func role(of userId: String) -> MemberRole? {
        members.first { $0.userId == userId }?.role
    }
}
