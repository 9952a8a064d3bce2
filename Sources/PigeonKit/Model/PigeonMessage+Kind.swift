import Foundation
import PigeonProtocol

extension PigeonMessage {
    /// What a message is: one of the app's (its `type` is the app's: `text`, `reaction`, …) or one the server wrote
    /// into the conversation's order (API.md 1.1's `pigeon.*` types), decoded.
    ///
    /// ``PigeonClient/messages(in:before:limit:)`` lists app messages and member changes (a chat shows "alice added
    /// carol" in its place); edits and deletions are not listed: they are applied to the message they change (its
    /// ``PigeonMessage/body``, ``PigeonMessage/editedAt`` and ``PigeonMessage/deletedAt``). They are still messages
    /// with a status of their own (⏰ ✓ ⚠️), read with ``PigeonClient/message(localId:)`` and listed by
    /// ``PigeonClient/unsentMessages()`` while they wait.
    public enum Kind: Sendable, Equatable {
        /// One of the app's messages: ``PigeonMessage/body`` is its text as last edited (`""` once deleted).
        case message
        /// `pigeon.members`: a member change, in the conversation's order (who was added, removed or left, a role,
        /// a new name).
        case membersChange(MembersChange)
        /// `pigeon.edit`: `target` now reads `body`.
        case edit(target: MessageReference, body: String)
        /// `pigeon.delete`: `target` is deleted (its text erased).
        case delete(target: MessageReference)
        /// A server type this version does not know (a later `pigeon.*`), or a server body it could not read.
        case unknownServerType
    }

    /// The message an edit or a deletion changes.
    public struct MessageReference: Sendable, Equatable, Codable {
        /// The server's id of the target; `nil` while the target, sent from this device, waits for the server's
        /// accept answer (the edit goes out after it).
        public var serverId: String?
        /// The target's local id, when the target is on this device.
        public var localId: Int64?

        /// A reference by the server's id and, when known here, the local id.
        public init(serverId: String?, localId: Int64?) {
            self.serverId = serverId
            self.localId = localId
        }
    }

    /// What this message is, decoded from its ``type`` and ``body``.
    public var kind: Kind {
        guard Validation.isServerMessageType(type) else { return .message }
        let data = Data(body.utf8)
        let decoder = JSONDecoder()
        switch type {
        case ServerMessageType.members:
            guard let change = try? decoder.decode(MembersChange.self, from: data) else { return .unknownServerType }
            return .membersChange(change)
        case ServerMessageType.edit:
            guard let edit = try? decoder.decode(EditBody.self, from: data) else { return .unknownServerType }
            return .edit(target: MessageReference(serverId: targetServerId ?? Self.nonEmpty(edit.serverId), localId: targetLocalId), body: edit.body)
        case ServerMessageType.delete:
            guard let delete = try? decoder.decode(DeleteBody.self, from: data) else { return .unknownServerType }
            return .delete(target: MessageReference(serverId: targetServerId ?? Self.nonEmpty(delete.serverId), localId: targetLocalId))
        default:
            return .unknownServerType
        }
    }

    /// Whether this is an edit or a deletion of another message (not listed in a conversation's pages).
    public var isChange: Bool { type == ServerMessageType.edit || type == ServerMessageType.delete }

    private static func nonEmpty(_ value: String) -> String? { value.isEmpty ? nil : value }
}

/// How many members have one of this user's messages, for a group's "delivered to 3 of 5, read by 2".
///
/// The members counted are those who were members at the message's seq (their `joinedSeq` is at or before it) and
/// still are, other than its sender (API.md 1.1): a member added later does not count, a removed one no longer does.
/// ``MessageStatus/delivered`` is reached when ``delivered`` equals ``members``, ``MessageStatus/read`` when ``read``
/// does.
public struct RecipientCounts: Sendable, Equatable, Codable {
    /// The members the message counts.
    public var members: Int
    /// Those whose devices have it (their delivered watermark reached its seq).
    public var delivered: Int
    /// Those who have read it (their read watermark reached its seq).
    public var read: Int

    /// Counts as given (PigeonKit computes them from the members' watermarks).
    public init(members: Int, delivered: Int, read: Int) {
        self.members = members
        self.delivered = delivered
        self.read = read
    }

    /// Every counted member has it (and there is at least one).
    public var deliveredToAll: Bool { members > 0 && delivered == members }
    /// Every counted member has read it (and there is at least one).
    public var readByAll: Bool { members > 0 && read == members }

    /// The counts of a message at `seq` sent by `senderId`, from the members' watermarks and join seqs. Pure. A member
    /// it is `withheldFrom` (it blocks the sender) counts, but never as delivered or read: a watermark of its passing
    /// the seq says nothing of this message.
    package static func counting(seq: Int64, senderId: String, members: [ConversationMember], withheldFrom: Set<String> = []) -> RecipientCounts {
        var counts = RecipientCounts(members: 0, delivered: 0, read: 0)
        for member in members where member.userId != senderId && member.joinedSeq <= seq {
            counts.members += 1
            if withheldFrom.contains(member.userId) { continue }
            // Read implies delivered, even when a delivered receipt has not been seen yet.
            if max(member.deliveredSeq, member.readSeq) >= seq { counts.delivered += 1 }
            if member.readSeq >= seq { counts.read += 1 }
        }
        return counts
    }
}
