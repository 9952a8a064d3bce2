import PigeonProtocol

/// The request bodies of the server API (API.md 1.2, "The server API: the app's backend acts"); its answers are the
/// schemas the same user actions answer with.
extension ContractSchemas {
    private static let systemSender = Schema.string(
        "A member's userId, or system:<name> (name: 1-64 characters of [A-Za-z0-9._-]), a sender that needs no membership.",
        pattern: "^([A-Za-z0-9._@-]{1,64}|system:[A-Za-z0-9._-]{1,64})$")

    static var serviceSchemas: [(String, JSONNode)] {
        [
            (
                "ServiceCreateConversationRequest",
                Schema.object(
                    "Every member is joined at once.",
                    required: ["members"],
                    [
                        ("members", Schema.array(userId, "Repeats are merged; at most 1,000 members with the owner (--max-members).", minItems: 1)),
                        ("name", Schema.nullable(Schema.string("1-256 characters, no U+0000.", pattern: noNul, minLength: 1, maxLength: 256))),
                        ("owner", Schema.nullable(Schema.described(userId, "The owner, a member whether listed or not; absent: the first member listed."))),
                    ])
            ),
            (
                "ServiceSendMessageRequest",
                Schema.object(
                    "A send in the name of senderId: SendMessageRequest's fields and senderId. Idempotent per (senderId, clientMessageId).",
                    required: ["senderId", "clientMessageId", "type", "body", "clientTimestamp"],
                    [
                        ("senderId", systemSender), ("clientMessageId", uuid), ("type", clientMessageType), ("body", messageBody),
                        ("clientTimestamp", clientTimestamp),
                        ("replyTo", Schema.nullable(Schema.described(uuid, "As in SendMessageRequest."))),
                        ("threadRoot", Schema.nullable(Schema.described(uuid, "As in SendMessageRequest."))),
                        (
                            "attachments",
                            Schema.array(
                                Schema.ref("AttachmentReference"), "Uploads of the sender's user (a system sender has none).",
                                maxItems: AttachmentLimits.perMessage)
                        ),
                    ])
            ),
            (
                "ServiceDeleteMessageRequest",
                Schema.object(
                    "Optional, as is the whole body.",
                    required: [],
                    [
                        (
                            "clientMessageId",
                            Schema.described(uuid, "The idempotency key; absent: one derived from the target, so a second deletion answers 200 with the first.")
                        ),
                        ("clientTimestamp", Schema.described(clientTimestamp, "Absent: the server's clock.")),
                    ])
            ),
        ]
    }
}
