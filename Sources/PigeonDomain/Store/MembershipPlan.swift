import Foundation
import PigeonProtocol

/// A change of a conversation's members, roles or name that a member asks for (API.md 1.1, "Group chats").
public enum MembershipOperation: Sendable, Equatable {
    case add(userIds: [String], role: MemberRole)
    /// Removes `userId`; the actor's own id means leaving.
    case remove(userId: String)
    case setRole(userId: String, role: MemberRole)
    case rename(name: String?)
}

/// What a membership change does, the same in every store (which only writes it): the rules of API.md 1.1 applied
/// to the conversation as it is under its lock, without I/O.
///
/// - Roles rank owner > admin > member. Adding members and renaming are for the owner and admins (`403` otherwise);
///   one removes only those ranked below oneself (an admin removes members, never another admin or the owner), and
///   granting a role above `member` is the owner's alone, by any route: `PATCH` or an add with `"role": "admin"`.
///   Otherwise an admin could remove a member, re-add it as admin, and be removed by it. Any member may leave.
/// - A direct conversation never gains members and is never renamed (`400`).
/// - Each change is a `pigeon.members` message with the next seq, sent as `message.new` to every device of every
///   member of the conversation before the change and of every member it added (so the removed member gets the
///   message that removed it, the added ones the message that added them).
/// - When the owner leaves, the longest-standing admin (else member) becomes owner: a second message, `role`.
/// - An added member joins at the seq of the message that added it; its watermarks start just below it.
/// - A change that changes nothing (adding members already in, a role or name it already has) writes nothing.
package struct MembershipPlan: Equatable {
    /// One `pigeon.members` message to write.
    package struct Change: Equatable {
        package var seq: Int64
        package var body: MembersChange
        /// Whose devices get it as `message.new`.
        package var recipients: [String]
    }

    package var changes: [Change] = []
    /// Members to insert, joining at `joinedSeq` with both watermarks at `joinedSeq - 1`.
    package var added: [ConversationMember] = []
    package var removed: [String] = []
    /// Members whose role changes.
    package var roles: [(userId: String, role: MemberRole)] = []
    /// Set when the name changes (the inner optional: the new name, nil to remove it).
    package var name: String??
    /// The conversation's members after the change, sorted by user id.
    package var membersAfter: [ConversationMember] = []
    package var lastSeq: Int64

    package static func == (lhs: MembershipPlan, rhs: MembershipPlan) -> Bool {
        lhs.changes == rhs.changes && lhs.added == rhs.added && lhs.removed == rhs.removed
            && lhs.roles.map(\.userId) == rhs.roles.map(\.userId) && lhs.roles.map(\.role) == rhs.roles.map(\.role)
            && lhs.name == rhs.name && lhs.membersAfter == rhs.membersAfter && lhs.lastSeq == rhs.lastSeq
    }

    package var isEmpty: Bool { changes.isEmpty }

    /// Plans `operation` by `actor` on a conversation of `kind` and `name` whose members are `members` and whose last
    /// seq is `lastSeq`. Throws `not_found` when the actor is not a member (never reveal more), `forbidden` for a role
    /// that does not allow it, `invalid_request` for what no role allows.
    ///
    /// The server API's actor (``SystemSender/service``) is no member and acts with the owner's rights, and more: it
    /// may remove the owner (whose heir then becomes owner, as when an owner leaves). Its changes read `"by": "service"`.
    package init(
        _ operation: MembershipOperation, by actor: String, kind: ConversationKind, name currentName: String?,
        members: [ConversationMember], lastSeq: Int64, maxMembers: Int
    ) throws {
        self.lastSeq = lastSeq
        let isService = actor == SystemSender.service
        guard let me = members.first(where: { $0.userId == actor }) ?? (isService ? Self.serviceMember : nil) else {
            throw PigeonError.conversationNotFound
        }
        let by = isService ? SystemSender.serviceActor : actor
        let before = members.map(\.userId)
        var after = members
        switch operation {
        case .add(let userIds, let role):
            guard me.role != .member else { throw PigeonError(.forbidden, "only the owner and admins add members") }
            guard kind == .group else { throw PigeonError.invalid("a direct conversation never gains members; create a group") }
            guard role != .owner else { throw PigeonError.invalid("a conversation has one owner; add members as member or admin") }
            guard role == .member || me.role == .owner else { throw PigeonError(.forbidden, "only the owner adds members as admin") }
            var seen = Set(before)
            let new = userIds.filter { seen.insert($0).inserted }
            guard !new.isEmpty else { break }
            guard members.count + new.count <= maxMembers else {
                throw PigeonError.invalid("a conversation has at most \(maxMembers) members; it has \(members.count)")
            }
            let seq = next()
            let joined = new.map { ConversationMember(userId: $0, role: role, joinedSeq: seq, deliveredSeq: seq - 1, readSeq: seq - 1) }
            added = joined
            after += joined
            changes.append(Change(seq: seq, body: MembersChange(action: .added, userIds: new, role: role, by: by), recipients: (before + new).sorted()))
        case .remove(let userId) where userId == actor:
            after.removeAll { $0.userId == actor }
            removed = [actor]
            changes.append(Change(seq: next(), body: MembersChange(action: .left, userIds: [actor], by: by), recipients: before))
            if me.role == .owner, let heir = Self.heir(among: after) {
                roles.append((heir.userId, .owner))
                after = after.map { $0.userId == heir.userId ? Self.with($0, role: .owner) : $0 }
                changes.append(
                    Change(
                        seq: next(), body: MembersChange(action: .role, userIds: [heir.userId], role: .owner, by: by),
                        recipients: after.map(\.userId)))
            }
        case .remove(let userId):
            guard me.role != .member else { throw PigeonError(.forbidden, "only the owner and admins remove others; a member may only leave") }
            guard let target = members.first(where: { $0.userId == userId }) else {
                throw PigeonError(.notFound, "\(userId) is not a member of this conversation")
            }
            guard target.role != .owner || isService else { throw PigeonError(.forbidden, "the owner cannot be removed; it may leave") }
            guard isService || Self.rank(me.role) > Self.rank(target.role) else {
                throw PigeonError(.forbidden, "an admin removes only members; only the owner removes an admin")
            }
            after.removeAll { $0.userId == userId }
            removed = [userId]
            changes.append(Change(seq: next(), body: MembersChange(action: .removed, userIds: [userId], by: by), recipients: before))
            if target.role == .owner, let heir = Self.heir(among: after) {
                roles.append((heir.userId, .owner))
                after = after.map { $0.userId == heir.userId ? Self.with($0, role: .owner) : $0 }
                changes.append(
                    Change(seq: next(), body: MembersChange(action: .role, userIds: [heir.userId], role: .owner, by: by), recipients: after.map(\.userId)))
            }
        case .setRole(let userId, let role):
            guard me.role == .owner else { throw PigeonError(.forbidden, "only the owner changes roles") }
            guard role != .owner else { throw PigeonError.invalid("role must be admin or member (the owner passes ownership on by leaving)") }
            guard let target = members.first(where: { $0.userId == userId }) else {
                throw PigeonError(.notFound, "\(userId) is not a member of this conversation")
            }
            guard target.role != .owner else { throw PigeonError.invalid("the owner's role cannot be changed") }
            guard target.role != role else { break }
            roles = [(userId, role)]
            after = after.map { $0.userId == userId ? Self.with($0, role: role) : $0 }
            changes.append(Change(seq: next(), body: MembersChange(action: .role, userIds: [userId], role: role, by: by), recipients: before))
        case .rename(let newName):
            guard me.role != .member else { throw PigeonError(.forbidden, "only the owner and admins rename a conversation") }
            guard kind == .group else { throw PigeonError.invalid("a direct conversation has no name") }
            if let newName {
                guard !newName.isEmpty, newName.count <= 256 else { throw PigeonError.invalid("name must be 1-256 characters (null removes it)") }
                guard Validation.isStorableText(newName) else { throw PigeonError.invalid("name must not contain the character U+0000") }
            }
            guard newName != currentName else { break }
            name = .some(newName)
            changes.append(Change(seq: next(), body: MembersChange(action: .renamed, userIds: [], name: newName, by: by), recipients: before))
        }
        membersAfter = after.sorted { $0.userId < $1.userId }
    }

    /// How the server API's actor counts in the rules: as an owner.
    private static let serviceMember = ConversationMember(userId: SystemSender.service, role: .owner, joinedSeq: 0, deliveredSeq: 0, readSeq: 0)

    /// Applies the consent decision of the members this change adds (``ConsentCheck``): the invited ones start
    /// invited. Members still invited before the change (`members`) get none of its messages, unless it removes them:
    /// an invitation brings `conversation.created` or the `added` message, then nothing until it is accepted.
    package mutating func admit(_ admission: ConsentCheck.Admission, before members: [ConversationMember]) {
        if !admission.invited.isEmpty {
            for index in added.indices where admission.invited.contains(added[index].userId) { added[index].membership = .invited }
            for index in membersAfter.indices where admission.invited.contains(membersAfter[index].userId) {
                membersAfter[index].membership = .invited
            }
        }
        let invitedBefore = Set(members.filter { $0.membership == .invited }.map(\.userId)).subtracting(removed)
        guard !invitedBefore.isEmpty else { return }
        for index in changes.indices { changes[index].recipients.removeAll { invitedBefore.contains($0) } }
    }

    private mutating func next() -> Int64 {
        lastSeq += 1
        return lastSeq
    }

    /// A role's rank: one acts on (removes, demotes) only those ranked below itself.
    private static func rank(_ role: MemberRole) -> Int {
        switch role {
        case .owner: 2
        case .admin: 1
        case .member: 0
        }
    }

    /// Who becomes owner when the owner leaves: the longest-standing admin, else the longest-standing member
    /// (earliest `joinedSeq`; founding members by user id).
    package static func heir(among members: [ConversationMember]) -> ConversationMember? {
        let byTenure = members.sorted { ($0.joinedSeq, $0.userId) < ($1.joinedSeq, $1.userId) }
        return byTenure.first { $0.role == .admin } ?? byTenure.first
    }

    private static func with(_ member: ConversationMember, role: MemberRole) -> ConversationMember {
        var member = member
        member.role = role
        return member
    }

    /// The stored messages of the changes, written by `actor` (its device is the messages' sender device).
    package func messages(conversationId: String, actor: DeviceIdentity, now: Int64) -> [Message] {
        changes.map { change in
            Message(
                serverId: Identifiers.uuidV7(nowMillis: now), clientMessageId: Identifiers.uuidV4(), conversationId: conversationId,
                seq: change.seq, senderId: actor.userId, senderDeviceId: actor.deviceId, type: ServerMessageType.members,
                body: Self.bodyText(change.body), clientTimestamp: now, acceptedAt: now, storedAt: now)
        }
    }

    package static func bodyText(_ change: MembersChange) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(change)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }
}

/// An edit or a delete's body as the server writes it (`pigeon.edit` / `pigeon.delete`), and what processing needs
/// of its target.
package enum MessageLifecycle {
    /// The target a buffered `pigeon.edit` (with its new text) or `pigeon.delete` (nil text) names, or nil for any
    /// other message; `invalid_request` for a body the server would not have written (a replayed dead letter).
    package static func target(of message: BufferedMessage) throws -> (serverId: String, newBody: String?)? {
        switch message.type {
        case ServerMessageType.edit:
            guard let body = try? JSONDecoder().decode(EditBody.self, from: Data(message.body.utf8)) else {
                throw PigeonError.invalid("a pigeon.edit body is {\"serverId\", \"body\"}")
            }
            return (body.serverId, body.body)
        case ServerMessageType.delete:
            guard let body = try? JSONDecoder().decode(DeleteBody.self, from: Data(message.body.utf8)) else {
                throw PigeonError.invalid("a pigeon.delete body is {\"serverId\"}")
            }
            return (body.serverId, nil)
        default:
            return nil
        }
    }

    package static func editText(serverId: String, body: String) -> String {
        var json = JSONText(capacity: 64 + body.utf8.count)
        json.beginObject()
        json.member("serverId", serverId)
        json.member("body", body)
        json.endObject()
        return json.string
    }

    /// `by`: the deleting user, or ``SystemSender/serviceActor`` for a deletion by moderation.
    package static func deleteText(serverId: String, by: String? = nil) -> String {
        var json = JSONText(capacity: 96)
        json.beginObject()
        json.member("serverId", serverId)
        if let by { json.member("by", by) }
        json.endObject()
        return json.string
    }

    /// Who deleted a stored `pigeon.delete`'s target: the `by` its body records, else its sender.
    package static func deletedBy(_ message: BufferedMessage) -> String {
        (try? JSONDecoder().decode(DeleteBody.self, from: Data(message.body.utf8)))?.by ?? message.senderId
    }

    /// Why `message` (an edit or delete by its sender) may not apply to `target` (nil: not in the conversation), or nil.
    /// A delete by the server API (moderation, sent as ``SystemSender/service``) may delete any message but the server's own.
    package static func refusal(_ message: BufferedMessage, target: MessageTarget?) -> PigeonError? {
        let verb = message.type == ServerMessageType.edit ? "edit" : "delete"
        guard let target else { return PigeonError(.notFound, "the message to \(verb) is not in this conversation") }
        let moderation = message.senderId == SystemSender.service && message.type == ServerMessageType.delete
        if target.senderId != message.senderId, !moderation { return PigeonError(.forbidden, "only its sender may \(verb) a message") }
        if Validation.isServerMessageType(target.type) { return PigeonError.invalid("the server's own \(target.type) messages cannot be changed") }
        if target.deleted { return PigeonError.invalid("the message was deleted; it cannot be \(verb == "edit" ? "edited" : "deleted") again") }
        return nil
    }
}
