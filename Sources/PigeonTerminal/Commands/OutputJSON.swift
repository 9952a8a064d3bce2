import Foundation
import PigeonKit
import PigeonProtocol

/// A message as `--json` prints it: the status by its wire name ("pending", "sending", "sent", "stored",
/// "delivered", "read", "failed").
struct MessageJSON: Encodable {
    var localId: Int64
    var conversationId: String
    var clientMessageId: String
    var serverId: String?
    var seq: Int64?
    var senderId: String
    var senderDeviceId: String
    var type: String
    var body: String
    var clientTimestamp: Int64
    var acceptedAt: Int64?
    var storedAt: Int64?
    var outgoing: Bool
    var status: String
    var tick: String
    var deliveryPath: String?
    var failure: String?
    var editedAt: Int64?
    var deletedAt: Int64?
    /// For this user's stored messages: how many of the members it counts have it and have read it.
    var recipients: RecipientCounts?
    /// A `pigeon.members` message: the change.
    var membersChange: MembersChange?
    /// An edit or deletion: the serverId of the message it changes.
    var targetServerId: String?
    /// Its reactions (`me`: this user's), keys in order of first use.
    var reactions: [Reaction]
    /// A reply: the serverId of the message it quotes (`null` while that one waits to be sent) and the quote.
    var replyTo: String?
    var replyPreview: ReplyPreview?
    /// A thread reply: its root's serverId.
    var threadRoot: String?
    /// A thread's root: its summary.
    var thread: ThreadSummary?
    /// Its attachments, in order (`label`: "📎 name (size)", as `ls` shows it).
    var attachments: [AttachmentJSON]

    init(_ message: PigeonMessage) {
        localId = message.localId
        conversationId = message.conversationId
        clientMessageId = message.clientMessageId
        serverId = message.serverId
        seq = message.seq
        senderId = message.senderId
        senderDeviceId = message.senderDeviceId
        type = message.type
        body = message.body
        clientTimestamp = message.clientTimestamp
        acceptedAt = message.acceptedAt
        storedAt = message.storedAt
        outgoing = message.isOutgoing
        status = message.status.rawValue
        tick = message.isOutgoing ? Ticks.symbol(for: message.status) : ""
        deliveryPath = message.deliveryPath?.rawValue
        failure = message.failure?.message
        editedAt = message.editedAt
        deletedAt = message.deletedAt
        recipients = message.recipients
        if case .membersChange(let change) = message.kind { membersChange = change }
        targetServerId = message.targetServerId
        reactions = message.reactions
        replyTo = message.replyTo?.serverId
        replyPreview = message.replyPreview
        threadRoot = message.threadRoot?.serverId
        thread = message.thread
        attachments = message.attachments.map(AttachmentJSON.init)
    }
}

/// An attachment as `--json` prints it: the message's metadata, this device's copy of what it sent (`localPath`), and
/// the line `ls` shows (`label`).
struct AttachmentJSON: Encodable {
    /// `null` while this device has not uploaded it yet.
    var id: String?
    var name: String
    var size: Int64
    var contentType: String
    var sha256: String?
    var width: Int?
    var height: Int?
    var durationMs: Int64?
    var localPath: String?
    var label: String

    init(_ attachment: PigeonAttachment) {
        id = attachment.id
        name = attachment.name
        size = attachment.size
        contentType = attachment.contentType
        sha256 = attachment.sha256
        width = attachment.width
        height = attachment.height
        durationMs = attachment.durationMs
        localPath = attachment.localPath
        label = MessageFormat.label(of: attachment)
    }
}

struct ConversationJSON: Encodable {
    struct Member: Encodable {
        var userId: String
        var role: String
        var joinedSeq: Int64
        var deliveredSeq: Int64
        var readSeq: Int64
    }

    var id: String
    var kind: String
    /// Whether this user is still a member (false once removed or left).
    var member: Bool
    /// "invited" while this is an invitation not yet accepted, else "joined".
    var membership: String
    /// Who sent the invitation (while it is one).
    var invitedBy: String?
    var leftAtSeq: Int64?
    var name: String?
    var title: String
    var members: [Member]
    var unreadCount: Int
    var lastSeq: Int64
    var readSeq: Int64
    var lastMessage: MessageJSON?

    init(_ conversation: PigeonConversation, me: String) {
        id = conversation.id
        kind = conversation.kind.rawValue
        member = conversation.isMember
        membership = conversation.membership.rawValue
        invitedBy = conversation.invitedBy
        leftAtSeq = conversation.leftAtSeq
        name = conversation.name
        title = MessageFormat.title(of: conversation, me: me)
        members = conversation.members.map {
            Member(userId: $0.userId, role: $0.role.rawValue, joinedSeq: $0.joinedSeq, deliveredSeq: $0.deliveredSeq, readSeq: $0.readSeq)
        }
        unreadCount = conversation.unreadCount
        lastSeq = conversation.lastSeq
        readSeq = conversation.readSeq
        lastMessage = conversation.lastMessage.map(MessageJSON.init)
    }
}

func printJSON(_ value: some Encodable) throws {
    let data = try JSONEncoder.pretty.encode(value)
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}
