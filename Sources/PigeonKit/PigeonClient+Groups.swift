import Foundation
import PigeonProtocol

/// Group chats (API.md 1.1): members, roles, names, leaving. Each call needs the network (it does not wait in the
/// outbox: the server decides at once whether this user's role allows it) and saves the server's answer locally
/// before it returns. The change itself reaches every member's devices, this one included, as a `pigeon.members`
/// message in the conversation's order (``PigeonMessage/Kind/membersChange(_:)``), announced with
/// ``PigeonEvent/membersChanged(_:_:)``, ``PigeonEvent/roleChanged(_:_:)``, ``PigeonEvent/conversationRenamed(_:_:)``
/// or ``PigeonEvent/leftConversation(_:_:)``.
///
/// Errors: ``PigeonClientError/Code-swift.struct/invalidArgument`` for input refused before anything is sent (a bad
/// user id, the owner role, a direct conversation, which never gains members) or by the server (`400`);
/// ``PigeonClientError/Code-swift.struct/forbidden`` when this user's role does not allow it (`403`: only the owner and
/// admins add, remove and rename, only the owner sets roles, an admin cannot remove the owner);
/// ``PigeonClientError/Code-swift.struct/notMember`` when this user is no longer a member (the conversation is then
/// marked left on this device); ``PigeonClientError/Code-swift.struct/unknownConversation`` for a conversation this
/// device does not have; the network's errors otherwise.
extension PigeonClient {
    /// Adds `userIds` to a group with `role` (``MemberRole/member`` or ``MemberRole/admin``); users already in it are
    /// left as they are. Returns the conversation after the change. Owner and admins only.
    @discardableResult
    public func addMembers(_ userIds: [String], to conversationId: String, role: MemberRole = .member) async throws -> PigeonConversation {
        guard !userIds.isEmpty else { throw PigeonClientError.invalid("name at least one user to add") }
        for user in userIds where !Validation.isValidUserId(user) {
            throw PigeonClientError.invalid("\"\(user)\" is not a user id (1–64 characters of [A-Za-z0-9._@-])")
        }
        guard role != .owner else { throw PigeonClientError.invalid("a member is added as member or admin; the owner is whoever created the group") }
        let id = try localMemberConversation(conversationId)
        if try conversation(id: id)?.kind == .direct {
            throw PigeonClientError.invalid("conversation \(id) is a direct conversation: it never gains members (create a group instead)")
        }
        return try await conversationAfter(id) { try await self.engine.transport.addMembers(conversationId: id, AddMembersRequest(userIds: userIds, role: role)) }
    }

    /// Removes `userId` from a group (owner and admins; an admin cannot remove the owner). Returns the conversation
    /// after the change. To remove this user itself, use ``leave(_:)``.
    @discardableResult
    public func removeMember(_ userId: String, from conversationId: String) async throws -> PigeonConversation {
        guard Validation.isValidUserId(userId) else { throw PigeonClientError.invalid("\"\(userId)\" is not a user id") }
        guard userId != self.userId else { throw PigeonClientError.invalid("to remove yourself, leave the conversation (leave(_:))") }
        let id = try localMemberConversation(conversationId)
        return try await conversationAfter(id) { try await self.engine.transport.removeMember(conversationId: id, userId: userId) }
    }

    /// Leaves a conversation (for every device of this user). When the owner leaves, the longest-standing admin,
    /// else member, becomes owner. The conversation stays on the device, read-only, with its messages; the returned
    /// conversation has ``PigeonConversation/leftAtSeq`` set and no members.
    @discardableResult
    public func leave(_ conversationId: String) async throws -> PigeonConversation {
        let id = try localMemberConversation(conversationId)
        return try await conversationAfter(id) { try await self.engine.transport.removeMember(conversationId: id, userId: self.userId) }
    }

    /// Makes `userId` an ``MemberRole/admin`` or a plain ``MemberRole/member`` (owner only). Returns the conversation
    /// after the change.
    @discardableResult
    public func setRole(_ role: MemberRole, for userId: String, in conversationId: String) async throws -> PigeonConversation {
        guard role != .owner else { throw PigeonClientError.invalid("the owner role is not given: it passes on when the owner leaves") }
        guard Validation.isValidUserId(userId) else { throw PigeonClientError.invalid("\"\(userId)\" is not a user id") }
        let id = try localMemberConversation(conversationId)
        return try await conversationAfter(id) { try await self.engine.transport.setRole(conversationId: id, userId: userId, SetRoleRequest(role: role)) }
    }

    /// Renames a conversation (`nil` removes its name; owner and admins). Returns the conversation after the change.
    @discardableResult
    public func rename(_ conversationId: String, to name: String?) async throws -> PigeonConversation {
        if let name {
            guard Validation.isStorableText(name) else { throw PigeonClientError.invalid("the name contains U+0000") }
            guard name.count <= 256 else { throw PigeonClientError.invalid("a name is at most 256 characters") }
        }
        let id = try localMemberConversation(conversationId)
        return try await conversationAfter(id) { try await self.engine.transport.renameConversation(conversationId: id, RenameConversationRequest(name: name)) }
    }

    /// The canonical id of a conversation on this device that this user is a member of.
    private func localMemberConversation(_ conversationId: String) throws -> String {
        guard let id = Validation.canonicalUUID(conversationId) else { throw PigeonClientError.invalid("\"\(conversationId)\" is not a conversation id") }
        guard let local = try conversation(id: id) else {
            throw PigeonClientError(.unknownConversation, "conversation \(id) is not on this device")
        }
        guard local.isMember else { throw PigeonClientError(.notMember, "\(userId) is no longer a member of conversation \(id)") }
        return id
    }

    private func conversationAfter(_ id: String, _ call: () async throws -> Conversation) async throws -> PigeonConversation {
        _ = try await engine.changeConversation(id, call)
        guard let local = try await store.conversation(id: id) else {
            throw PigeonClientError(.localDatabase, "conversation \(id) was not saved")
        }
        return local
    }
}

extension PigeonClient {
    /// Reads a conversation from the server now (its members, roles and watermarks) and saves it; returns it as this
    /// device has it then. Throws ``PigeonClientError/Code-swift.struct/notMember`` (and marks it left) when this user
    /// is no longer a member. Needs the network.
    @discardableResult
    public func fetchConversation(_ conversationId: String) async throws -> PigeonConversation {
        guard let id = Validation.canonicalUUID(conversationId) else { throw PigeonClientError.invalid("\"\(conversationId)\" is not a conversation id") }
        let isMember = try await engine.refreshConversation(id)
        guard let local = try await store.conversation(id: id) else { throw PigeonClientError(.unknownConversation, "conversation \(id) is unknown") }
        guard isMember else { throw PigeonClientError(.notMember, "\(userId) is not a member of conversation \(id)") }
        return local
    }
}
