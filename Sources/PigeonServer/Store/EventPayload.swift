import Foundation
import PigeonProtocol

/// Encodes event payloads: `{"type": ..., <the body's fields>}`, without a cursor.
struct EventPayload {
    private let encoder = JSONEncoder()

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

    private struct MessageBody: Encodable { let message: Message }
    private struct ConversationBody: Encodable { let conversation: Conversation }

    func encode<Body: Encodable>(type: String, _ body: Body) throws -> String {
        String(decoding: try encoder.encode(Typed(type: type, body: body)), as: UTF8.self)
    }

    func messageNew(_ message: Message) throws -> String { try encode(type: "message.new", MessageBody(message: message)) }
    func messageStored(_ event: MessageStoredEvent) throws -> String { try encode(type: "message.stored", event) }
    func messageFailed(_ event: MessageFailedEvent) throws -> String { try encode(type: "message.failed", event) }
    func receipt(_ event: ReceiptEvent) throws -> String { try encode(type: "receipt", event) }
    func conversationCreated(_ conversation: Conversation) throws -> String {
        try encode(type: "conversation.created", ConversationBody(conversation: conversation))
    }
}
