import PigeonProtocol

/// How a sent message reached the other members: the two delivery paths, direct and through the mailbox.
///
/// Known once the server has stored the message (`message.stored` tells how many of the other members' devices
/// were connected at that moment):
/// - ``direct``: at least one was online, the message was pushed to it at once
///   (CONNECTING → SENT → ACK_RECEIVED in the usual state names, where ACK_RECEIVED is the message reaching ``MessageStatus/delivered``).
/// - ``mailbox``: nobody was online, the message waits in their mailbox on the server
///   (TRY_ADD_TO_MAILBOX → ADDED_TO_MAILBOX; MAILBOX_MSG_RECEIVED is the message reaching ``MessageStatus/delivered``
///   when an offline member comes back and acknowledges it).
public enum DeliveryPath: String, Sendable, Codable, Equatable {
    /// At least one other member's device was connected when the message was stored.
    case direct
    /// No other member's device was connected: the message waits on the server until one fetches it.
    case mailbox
}

/// A message as this device knows it: read from the local database, never from the network.
///
/// Messages this user sent (from this device or another of the user's devices) are *outgoing*; their ``status`` is
/// the sender status of docs/ARCHITECTURE.md's status model (⏰ … blue ✓✓, ⚠️). An incoming message has the status
/// ``MessageStatus/delivered`` once it is on this device, and ``MessageStatus/read`` once this user has read it (on any
/// of the user's devices).
public struct PigeonMessage: Sendable, Equatable, Identifiable, Codable {
    /// This device's id for the message, assigned when it was saved here. Stable for the life of the database.
    public var localId: Int64
    /// The conversation it belongs to.
    public var conversationId: String
    /// The sender's idempotency key (the server de-duplicates resends by it).
    public var clientMessageId: String
    /// The server's id, known once the server accepted the message.
    public var serverId: String?
    /// The position in the conversation (1, 2, 3 … with no gaps), known once the server stored it.
    public var seq: Int64?
    /// The user who sent it.
    public var senderId: String
    /// The device it was sent from.
    public var senderDeviceId: String
    /// App-defined kind (`text`, `reaction`, …).
    public var type: String
    /// The content, as sent (at most ``PigeonClient/Configuration-swift.struct/maxBodyBytes`` of UTF-8).
    public var body: String
    /// The sender's clock when the message was sent, milliseconds since the epoch.
    public var clientTimestamp: Int64
    /// When the server accepted it (milliseconds since the epoch), once known.
    public var acceptedAt: Int64?
    /// When the server stored it (milliseconds since the epoch), once known.
    public var storedAt: Int64?
    /// Whether this user sent it (from this or another of the user's devices).
    public var isOutgoing: Bool
    /// Where the message stands; for an outgoing message it only moves forward, each step on the server's
    /// evidence (see ``MessageStatus``), except that ``PigeonClient/retry(localId:)`` takes a failed one back to
    /// pending.
    public var status: MessageStatus
    /// For outgoing messages, once stored: direct or mailbox (see ``DeliveryPath``).
    public var deliveryPath: DeliveryPath?
    /// For outgoing messages, once stored: the other members' devices connected when it was stored.
    public var recipientsOnline: Int?
    /// Why the message failed, when ``status`` is ``MessageStatus/failed``.
    public var failure: ErrorDetail?
    /// When the message was last edited (the server's time once the edit is stored; this device's clock while an
    /// edit made here waits), `nil` when never. ``body`` is then the new text.
    public var editedAt: Int64? = nil
    /// When the message was deleted (the server's time once stored; this device's clock while a deletion made here
    /// waits), `nil` when it is not. ``body`` is then `""`: the text is erased, here as on the server.
    public var deletedAt: Int64? = nil
    /// For an edit or a deletion (see ``kind``): the server's id of the message it changes, once known.
    public var targetServerId: String? = nil
    /// For an edit or a deletion: the local id of the message it changes, when that message is on this device.
    public var targetLocalId: Int64? = nil
    /// For this user's stored messages: how many of the members it counts have it and have read it (a group's
    /// "delivered to 3 of 5, read by 2"); `nil` before the message has its seq, and for others' messages.
    public var recipients: RecipientCounts? = nil
    /// Its reactions as this device shows them, keys in order of first use (API.md 1.2): the server's aggregate as
    /// last heard (an answer, a `reaction` event, a read), with this device's reactions that the server has not
    /// answered yet on top (``PigeonClient/react(_:to:)``). ``Reaction/me`` is this user's. Empty on a deleted message.
    @EmptyIfAbsent public var reactions: [Reaction] = []
    /// The message this one quotes (``PigeonClient/send(_:type:to:replyTo:threadRoot:attachments:)``), or `nil`. Its serverId is
    /// `nil` while the quoted message, sent from this device, waits for the server's accept answer.
    public var replyTo: MessageReference? = nil
    /// The quote to draw, without reading the quoted message: its sender, type, the first 100 characters of its body
    /// (`""` once deleted). Built from this device's copy when the reply is written here, else the server's.
    public var replyPreview: ReplyPreview? = nil
    /// The thread this message is in (the root's reference), or `nil`.
    public var threadRoot: MessageReference? = nil
    /// On a thread's root: how many replies it has, the newest one's time and its newest senders; `nil` when it has
    /// none. Kept current from the stream as replies arrive and are deleted, and corrected by every read from the
    /// server (see ``PigeonClient/fetchThread(of:after:before:limit:)``).
    public var thread: ThreadSummary? = nil
    /// The files it carries, in the sender's order (API.md 1.2); empty when none, and on a deleted message. On a
    /// message this device sent, each has its ``PigeonAttachment/localPath`` from the moment it is saved, and its
    /// ``PigeonAttachment/id`` once uploaded.
    @EmptyIfAbsent public var attachments: [PigeonAttachment] = []

    /// ``localId``, for `Identifiable`.
    public var id: Int64 { localId }

    /// Whether this device sent it (only those can be retried).
    public func isSent(byDevice deviceId: String) -> Bool { isOutgoing && senderDeviceId == deviceId }
}
