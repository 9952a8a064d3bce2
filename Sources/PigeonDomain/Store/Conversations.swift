import PigeonProtocol

/// A conversation about to be created, the same for every store: a time-ordered id, its kind (direct for two
/// members and no name, API.md 1.1), the creator among the members (sorted, without repeats) as the owner, every
/// founding member joined at seq 0, and the `conversation.created` payload each member's log gets.
package enum NewConversation {
    package static func make(creator: String, members: [String], name: String?) throws -> (Conversation, userIds: [String], payload: String) {
        let (conversation, userIds) = make(creator: creator, members: members, name: name, invited: [])
        return (conversation, userIds, try EventPayload().conversationCreated(conversation))
    }

    /// The conversation with the `invited` members (``ConsentCheck``) starting as invited, without its payload.
    package static func make(creator: String, members: [String], name: String?, invited: Set<String>) -> (Conversation, userIds: [String]) {
        let userIds = Array(Set(members + [creator])).sorted()
        let conversation = Conversation(
            id: Identifiers.uuidV7(), kind: Conversation.kind(name: name, memberCount: userIds.count), name: name,
            createdAt: WallClock.nowMillis(), lastSeq: 0,
            members: userIds.map {
                ConversationMember(
                    userId: $0, role: $0 == creator ? .owner : .member, joinedSeq: 0, deliveredSeq: 0, readSeq: 0,
                    membership: invited.contains($0) && $0 != creator ? .invited : .joined)
            })
        return (conversation, userIds)
    }

    /// The users a creation adds besides its creator, sorted, without repeats: whom the consent rules look at.
    package static func added(by creator: String, members: [String]) -> [String] {
        Array(Set(members).subtracting([creator])).sorted()
    }
}

/// Where a page of `GET /v1/conversations` starts: `before=<updatedAt>` (conversations updated strictly before it)
/// or `before=<updatedAt>:<id>` (strictly after that conversation in the list's order: older, or as old with a
/// smaller id), which pages through conversations updated in the same millisecond without skipping or repeating one.
public struct ConversationCursor: Sendable, Equatable {
    public var updatedAt: Int64
    public var id: String?

    public init(updatedAt: Int64, id: String?) {
        self.updatedAt = updatedAt
        self.id = id
    }

    /// Parses the `before` query parameter; a clear `400 invalid_request` for anything else.
    public init(parameter raw: String) throws {
        let parts = raw.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard let updatedAt = Int64(parts[0]), updatedAt >= 0 else {
            throw PigeonError.invalid("before must be <updatedAt> or <updatedAt>:<conversationId>, updatedAt an integer from 0")
        }
        if parts.count == 2 {
            let id = parts[1]
            guard !id.isEmpty, id.utf8.count <= 64, id.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) })
            else { throw PigeonError.invalid("before's conversationId is not a conversation id") }
            self.init(updatedAt: updatedAt, id: String(id))
        } else {
            self.init(updatedAt: updatedAt, id: nil)
        }
    }

    /// The `before` that continues after `conversation`.
    package init(after conversation: Conversation) {
        self.init(updatedAt: conversation.updatedAt, id: conversation.id)
    }

    public var parameter: String { id.map { "\(updatedAt):\($0)" } ?? String(updatedAt) }
}

extension ConversationList {
    /// A page from `limit + 1` conversations read in list order: the extra one only says that more follow.
    package init(page: [Conversation], limit: Int) {
        let hasMore = page.count > limit
        let conversations = Array(page.prefix(limit))
        self.init(
            conversations: conversations, hasMore: hasMore,
            nextBefore: hasMore ? conversations.last.map { ConversationCursor(after: $0).parameter } : nil)
    }
}
