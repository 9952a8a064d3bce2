import Foundation
import PigeonProtocol

/// Encodes event payloads: `{"type": ..., <the body's fields>}`, without a cursor. The per-message ones
/// (`message.new`, `message.stored`) are written by hand: they are on the processing hot path.
package struct EventPayload {
    package init() {}

    private struct Typed<Body: Encodable>: Encodable {
        let type: String
        let body: Body

        private enum Keys: String, CodingKey { case type }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(type, forKey: .type)
            try body.encode(to: encoder)
        }
    }

    private struct ConversationBody: Encodable { let conversation: Conversation }

    package func encode<Body: Encodable>(type: String, _ body: Body) throws -> String {
        String(decoding: try JSONEncoder().encode(Typed(type: type, body: body)), as: UTF8.self)
    }

    package func messageNew(_ message: Message) -> String {
        var json = JSONText(capacity: 384 + message.body.utf8.count)
        json.beginObject()
        json.member("type", "message.new")
        json.key("message")
        Self.message(message, into: &json)
        json.endObject()
        return json.string
    }

    /// A `Message` object as the wire has it (the `message` of `message.new`, of a history page).
    package static func message(_ message: Message, into json: inout JSONText) {
        json.beginObject()
        json.member("serverId", message.serverId)
        json.member("clientMessageId", message.clientMessageId)
        json.member("conversationId", message.conversationId)
        json.member("seq", message.seq)
        json.member("senderId", message.senderId)
        json.member("senderDeviceId", message.senderDeviceId)
        json.member("type", message.type)
        json.member("body", message.body)
        json.member("clientTimestamp", message.clientTimestamp)
        json.member("acceptedAt", message.acceptedAt)
        json.member("storedAt", message.storedAt)
        if let editedAt = message.editedAt { json.member("editedAt", editedAt) }
        if let deletedAt = message.deletedAt { json.member("deletedAt", deletedAt) }
        json.key("reactions")
        Self.reactions(message.reactions, into: &json)
        json.optionalMember("replyTo", message.replyTo)
        json.key("replyPreview")
        if let preview = message.replyPreview {
            json.beginObject()
            json.member("serverId", preview.serverId)
            json.member("senderId", preview.senderId)
            json.member("type", preview.type)
            json.member("body", preview.body)
            json.member("deleted", preview.deleted)
            if preview.unavailable { json.member("unavailable", true) }
            json.endObject()
        } else {
            json.null()
        }
        json.optionalMember("threadRoot", message.threadRoot)
        json.key("thread")
        if let thread = message.thread {
            json.beginObject()
            json.member("replyCount", thread.replyCount)
            json.member("lastReplyAt", thread.lastReplyAt)
            json.key("lastReplySenders")
            json.beginArray()
            for sender in thread.lastReplySenders { json.string(sender) }
            json.endArray()
            json.endObject()
        } else {
            json.null()
        }
        json.key("attachments")
        Self.attachments(message.attachments, into: &json)
        if let withheldFrom = message.withheldFrom, !withheldFrom.isEmpty {
            json.key("withheldFrom")
            json.beginArray()
            for userId in withheldFrom { json.string(userId) }
            json.endArray()
        }
        json.endObject()
    }

    /// `[Attachment]` as the wire has it, every field present.
    package static func attachments(_ attachments: [Attachment], into json: inout JSONText) {
        json.beginArray()
        for attachment in attachments {
            json.beginObject()
            json.member("id", attachment.id)
            json.member("name", attachment.name)
            json.member("size", attachment.size)
            json.member("contentType", attachment.contentType)
            json.member("sha256", attachment.sha256)
            json.optionalMember("width", attachment.width.map(Int64.init))
            json.optionalMember("height", attachment.height.map(Int64.init))
            json.optionalMember("durationMs", attachment.durationMs)
            json.endObject()
        }
        json.endArray()
    }

    private static func reactions(_ reactions: [Reaction], into json: inout JSONText) {
        json.beginArray()
        for reaction in reactions {
            json.beginObject()
            json.member("key", reaction.key)
            json.member("count", reaction.count)
            json.member("me", reaction.me)
            json.endObject()
        }
        json.endArray()
    }

    /// `reaction`, as one member sees it.
    package func reaction(_ event: ReactionEvent) -> String {
        var json = JSONText(capacity: 256)
        json.beginObject()
        json.member("type", "reaction")
        json.member("conversationId", event.conversationId)
        json.member("serverId", event.serverId)
        json.member("key", event.key)
        json.member("userId", event.userId)
        json.member("action", event.action.rawValue)
        json.key("reactions")
        Self.reactions(event.reactions, into: &json)
        json.member("at", event.at)
        json.endObject()
        return json.string
    }

    package func messageStored(_ event: MessageStoredEvent) -> String {
        var json = JSONText()
        json.beginObject()
        json.member("type", "message.stored")
        json.member("conversationId", event.conversationId)
        json.member("serverId", event.serverId)
        json.member("clientMessageId", event.clientMessageId)
        json.member("seq", event.seq)
        json.member("storedAt", event.storedAt)
        json.member("recipientsOnline", event.recipientsOnline)
        if let withheldFrom = event.withheldFrom, !withheldFrom.isEmpty {
            json.key("withheldFrom")
            json.beginArray()
            for userId in withheldFrom { json.string(userId) }
            json.endArray()
        }
        json.endObject()
        return json.string
    }
    package func messageFailed(_ event: MessageFailedEvent) throws -> String { try encode(type: "message.failed", event) }
    /// `receipt`, written by hand: one per member for every watermark a receipt moves.
    package func receipt(_ event: ReceiptEvent) throws -> String {
        var json = JSONText(capacity: 192)
        json.beginObject()
        json.member("type", "receipt")
        json.member("conversationId", event.conversationId)
        json.member("userId", event.userId)
        json.member("kind", event.kind.rawValue)
        json.member("upToSeq", event.upToSeq)
        json.member("at", event.at)
        json.endObject()
        return json.string
    }
    package func conversationCreated(_ conversation: Conversation) throws -> String {
        try encode(type: "conversation.created", ConversationBody(conversation: conversation))
    }
}
