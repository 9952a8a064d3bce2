import PigeonProtocol

/// The processing policy every store applies to a batch, message by message in buffer order, without I/O: the
/// stores keep only their SQL and report what each message came to.
///
/// - A message behind a failure of its conversation in this batch is not attempted (`deferred`): its conversation's
///   order holds.
/// - A failed message on its final attempt, or one that can never succeed (``PigeonError/isPermanent``), is
///   dead-lettered (`message.failed` goes to its sender) and its conversation flows on; any other failure is retried
///   later and blocks the rest of its conversation in this batch.
/// - A message stored before (same serverId, or same sender, device and clientMessageId) is `alreadyStored`.
///
/// A store asks ``shouldAttempt(_:)`` before a message, then reports ``stored(seq:)``, ``alreadyStored(seq:)`` or
/// ``failed(_:error:)``, and performs the ``FailureAction`` it gets back.
package struct BatchPlan {
    /// What a store does with a message that failed.
    package enum FailureAction: Equatable {
        /// Write it to the dead letters with this detail and send `message.failed` to its sender.
        case deadLetter(ErrorDetail)
        /// Leave it in the buffer for a later attempt.
        case retryLater
    }

    /// One result per message reported so far, in the batch's order.
    package private(set) var results: [ProcessingResult] = []
    private var blocked = Set<String>()

    package init(capacity: Int = 0) {
        results.reserveCapacity(capacity)
    }

    /// Whether to attempt `item`; when not (an earlier message of its conversation failed in this batch), its result
    /// is recorded as `deferred`.
    package mutating func shouldAttempt(_ item: ProcessingItem) -> Bool {
        guard blocked.contains(item.entry.message.conversationId) else { return true }
        results.append(.deferred)
        return false
    }

    package mutating func stored(seq: Int64) {
        results.append(.stored(seq: seq))
    }

    package mutating func alreadyStored(seq: Int64) {
        results.append(.alreadyStored(seq: seq))
    }

    /// Records `item`'s failure and says what to do with it. `refusal` is the store's own words when its database
    /// refused the message's data (it becomes the dead letter's `invalid_request` message).
    package mutating func failed(_ item: ProcessingItem, error: any Error, refusal: String? = nil) -> FailureAction {
        let permanent = (error as? PigeonError)?.isPermanent ?? false
        if item.isFinalAttempt || permanent {
            results.append(.deadLettered(error))
            return .deadLetter(Self.deadLetterDetail(error, refusal: refusal))
        }
        blocked.insert(item.entry.message.conversationId)
        results.append(.failed(error))
        return .retryLater
    }

    /// The error a dead letter and its `message.failed` carry: a ``PigeonError``'s own; the database's words for data
    /// it refused; otherwise an internal error naming what failed.
    package static func deadLetterDetail(_ error: any Error, refusal: String? = nil) -> ErrorDetail {
        if let error = error as? PigeonError { return error.detail }
        if let refusal { return ErrorDetail(code: .invalidRequest, message: "the store refused the message: \(refusal)") }
        return ErrorDetail(code: .internalError, message: "processing failed: \(error)")
    }
}

/// Who is shown a quoted message otherwise than as it is stored: the members who may not read it (it is hidden from
/// them by a block, or older than their membership) get its ``ReplyPreview/unavailableForm``; the members from whom an
/// edit of it was hidden get the text they were last shown (`message_views`).
package struct QuoteViews: Sendable, Equatable {
    package var blind: Set<String> = []
    /// userId → the body that member is shown.
    package var bodies: [String: String] = [:]

    package init(blind: Set<String> = [], bodies: [String: String] = [:]) {
        self.blind = blind
        self.bodies = bodies
    }

    package var isEmpty: Bool { blind.isEmpty && bodies.isEmpty }

    /// `preview` as `userId` is shown it; nil when as stored.
    package func preview(of preview: ReplyPreview, for userId: String) -> ReplyPreview? {
        if blind.contains(userId) { return preview.unavailableForm }
        guard let body = bodies[userId] else { return nil }
        return ReplyPreview(serverId: preview.serverId, senderId: preview.senderId, type: preview.type, body: body, deleted: preview.deleted)
    }
}

/// The events a processed message produces, the same in every store (which only writes them).
package enum MessageEvents {
    /// What storing a message writes besides its row, the same in every store: one `message.new` payload for every
    /// recipient (``newMessageRecipients(of:members:)``), and `message.stored` for the sending device.
    package struct Writes {
        package var newPayload: String
        package var newRecipients: [(userId: String, excludedDeviceId: String?)]
        package var storedPayload: String
        /// The recipients who are shown the quoted message otherwise than the others (``QuoteViews``), and the
        /// `message.new` each of them gets instead.
        package var quotePayloads: [String: String] = [:]

        /// The `message.new` payload `userId` gets.
        package func newPayload(for userId: String) -> String {
            quotePayloads[userId] ?? newPayload
        }
    }

    /// The members of `message`'s conversation as the store read them in its transaction (`nil`: the conversation is
    /// gone), when the sender is one of them or a system sender of the server API (``SystemSender``, no member);
    /// otherwise `conversation_not_found`, which fails the message.
    package static func members(_ members: [String]?, admitting message: BufferedMessage) throws -> [String] {
        guard let members, members.contains(message.senderId) || SystemSender.isSystem(message.senderId) else { throw PigeonError.conversationNotFound }
        return members
    }

    /// The events of `message` stored as `stored` in a conversation of `members`; the `withheld` members (who block
    /// the sender, or are invited and not joined yet) get no `message.new` and do not count in `recipientsOnline`.
    /// The members `quotes` names are shown the message `stored` quotes otherwise (``QuoteViews``): their
    /// `message.new` carries their own quote. The sender's copies (its `message.stored`, and the `message.new` of its
    /// other devices) name the members it is `hidden` from (`withheldFrom`).
    package static func writes(
        of message: BufferedMessage, stored: Message, members: [String], withheld: Set<String> = [], hidden: [String] = [],
        quotes: QuoteViews = QuoteViews(), presence: any Presence, payloads: EventPayload
    ) -> Writes {
        let receiving = withheld.isEmpty ? members : members.filter { !withheld.contains($0) }
        var storedEvent = Self.stored(message, seq: stored.seq, storedAt: stored.storedAt, members: receiving, presence: presence)
        storedEvent.withheldFrom = hidden.isEmpty ? nil : hidden.sorted()
        var writes = Writes(
            newPayload: payloads.messageNew(stored), newRecipients: newMessageRecipients(of: message, members: receiving),
            storedPayload: payloads.messageStored(storedEvent))
        if let preview = stored.replyPreview, !quotes.isEmpty {
            var rendered: [ReplyPreview: String] = [:]
            for userId in receiving where userId != message.senderId {
                guard let own = quotes.preview(of: preview, for: userId) else { continue }
                if rendered[own] == nil {
                    var copy = stored
                    copy.replyPreview = own
                    rendered[own] = payloads.messageNew(copy)
                }
                writes.quotePayloads[userId] = rendered[own]
            }
        }
        let senderQuote = stored.replyPreview.flatMap { quotes.preview(of: $0, for: message.senderId) }
        if !hidden.isEmpty || senderQuote != nil {
            var own = stored
            own.withheldFrom = hidden.isEmpty ? nil : hidden.sorted()
            if let senderQuote { own.replyPreview = senderQuote }
            writes.quotePayloads[message.senderId] = payloads.messageNew(own)
        }
        return writes
    }

    /// Of the members who block a message's sender (`blockers`), those it is hidden from: all of them, except for the
    /// server's `pigeon.members` changes, which every member sees (who is in the room is no one's to hide).
    package static func hiddenFrom(_ message: BufferedMessage, blockers: Set<String>, members: [String]) -> [String] {
        guard !blockers.isEmpty, message.type != ServerMessageType.members else { return [] }
        return members.filter { blockers.contains($0) && $0 != message.senderId }
    }

    /// Who gets `message.new` for a stored message: every member of the conversation, the sender's own user
    /// included (its other devices), never the sending device itself.
    package static func newMessageRecipients(of message: BufferedMessage, members: [String]) -> [(userId: String, excludedDeviceId: String?)] {
        members.map { userId in (userId, userId == message.senderId ? message.senderDeviceId : nil) }
    }

    /// The `message.stored` event for the sending device; `recipientsOnline` counts the devices of the other
    /// members that have a stream open on any node, as `presence` knows them.
    package static func stored(_ message: BufferedMessage, seq: Int64, storedAt: Int64, members: [String], presence: any Presence) -> MessageStoredEvent {
        let recipients = members.filter { $0 != message.senderId }
        let online = presence.onlineDeviceCount(of: recipients, excluding: DeviceIdentity(userId: message.senderId, deviceId: message.senderDeviceId))
        return MessageStoredEvent(
            conversationId: message.conversationId, serverId: message.serverId, clientMessageId: message.clientMessageId, seq: seq,
            storedAt: storedAt, recipientsOnline: online)
    }

    /// The `message.failed` event for the sending device of a dead-lettered message.
    package static func failed(_ message: BufferedMessage, error: ErrorDetail) -> MessageFailedEvent {
        MessageFailedEvent(
            conversationId: message.conversationId, serverId: message.serverId, clientMessageId: message.clientMessageId, error: error)
    }

    /// The stored form of a message given its seq.
    package static func stored(_ message: BufferedMessage, seq: Int64, storedAt: Int64) -> Message {
        Message(
            serverId: message.serverId, clientMessageId: message.clientMessageId, conversationId: message.conversationId, seq: seq,
            senderId: message.senderId, senderDeviceId: message.senderDeviceId, type: message.type, body: message.body,
            clientTimestamp: message.clientTimestamp, acceptedAt: message.acceptedAt, storedAt: storedAt, replyTo: message.replyTo,
            threadRoot: message.threadRoot, attachments: message.attachments)
    }
}
