import PigeonProtocol

/// The wire types of PigeonProtocol as JSON Schemas: the `components.schemas` shared by the OpenAPI document (HTTP
/// bodies, `/v1/sync`'s events) and the AsyncAPI document (WebSocket frames, server-sent events), so the two cannot
/// describe an event differently.
///
/// Unions (`Event`, `ClientOperation`, `ServerFrame`) are `oneOf` whose branches fix `type` or `op` with `const`, with
/// no `discriminator` (OpenAPI's and AsyncAPI's disagree on its shape).
///
/// Requests are described as strictly as the server checks them (a request the schema allows is not refused `400`);
/// what JSON Schema cannot say (byte limits, a limit counted after merging duplicates) is in the descriptions.
package enum ContractSchemas {
    // MARK: Fields

    package static let uuid = Schema.string("A UUID (any case in requests; lowercase in answers).", format: "uuid")
    package static let userId = Schema.string("1-64 characters of [A-Za-z0-9._@-].", pattern: "^[A-Za-z0-9._@-]{1,64}$")
    package static let deviceId = Schema.string(
        "A device id: a UUID for a registered device, the JWT's device claim (1-128 printable ASCII characters without spaces) for a JWT device.",
        pattern: "^[!-~]{1,128}$")
    package static let millis = Schema.integer("Milliseconds since the Unix epoch.")
    package static let seq = Schema.integer("A seq of the conversation (1, 2, 3 ...); 0 is before the first.", minimum: 0)
    package static let cursor = Schema.string("An opaque position in the device's event log: 1-512 printable ASCII characters (U+0021-U+007E).", pattern: "^[!-~]{1,512}$")
    /// Free text that is stored: anything but U+0000.
    package static let noNul = "^[^\\u0000]*$"
    package static let messageType = Schema.string(
        "App-defined, 1-32 characters of [a-z0-9._-]; types beginning with `pigeon.` are the server's (`pigeon.members`, `pigeon.edit`, `pigeon.delete`).",
        pattern: "^[a-z0-9._-]{1,32}$")
    package static let clientMessageType = Schema.string(
        "App-defined, 1-32 characters of [a-z0-9._-], not beginning with `pigeon.` (the server's own types).",
        pattern: "^(?!pigeon\\.)[a-z0-9._-]{1,32}$")
    package static let messageBody = Schema.string(
        "Opaque to the server; any text without U+0000, at most 65,536 bytes of UTF-8 (413 payload_too_large), and the whole request at most 65,536 bytes.",
        pattern: noNul)
    package static let clientTimestamp = Schema.integer("The sender's clock when the user pressed send (ms since the epoch).")
    package static let upToSeq = Schema.integer("The watermark to move to; beyond the conversation's lastSeq it is clamped.", minimum: 0)
    package static let errorCodes = [
        "invalid_request", "unauthorized", "forbidden", "rejected", "not_found", "method_not_allowed", "request_timeout", "conflict",
        "payload_too_large", "rate_limited", "internal", "overloaded",
    ]
    /// A reaction key in a request, as the server takes it (``Validation/isValidReactionKey(_:)``): an app token, or an
    /// emoji of the forms a pattern can hold to one grapheme cluster (an emoji scalar alone, with a presentation
    /// selector or with a skin tone, a keycap), so that a key it allows is never refused `400`. The server also takes
    /// the emoji sequences the pattern leaves out (flags, ZWJ and tag sequences), which the description names: schema
    /// generators (Hypothesis) fail on a class of regional indicators alone, and a pattern cannot bound the others to
    /// one grapheme cluster.
    package static let reactionKey = Schema.string(
        "An app token of 1-32 characters of [a-z0-9_:+-], or one emoji: a single extended grapheme cluster of emoji, at most 64 bytes of UTF-8; anything else is 400. The pattern holds the tokens and the emoji of one scalar, alone, with U+FE0F or with a skin tone, and keycaps; the server also takes the other emoji sequences that form one grapheme cluster (flags, ZWJ and tag sequences).",
        pattern: "^([a-z0-9_:+-]{1,32}|[\(singleScalarEmoji)](\\uFE0F|[🏻-🏿])?|[0-9#*]\\uFE0F?\\u20E3)$")
    /// A reaction key in an answer: whatever the server took (``reactionKey``).
    private static let storedReactionKey = Schema.string(
        "A reaction key the server took: an app token or one emoji (see the key parameter of the reaction routes).", minLength: 1)
    /// A serverId or `null` in a request. The pattern repeats `format: uuid`, which generators drop from a schema of
    /// two types.
    private static func nullableServerId(_ description: String) -> JSONNode {
        Schema.nullable(Schema.string(description, format: "uuid", pattern: "^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"))
    }
    /// A file name. The server takes 1-255 bytes of UTF-8 without a control character, `/` or `\`, other than `.` and
    /// `..`; a pattern counts characters, not bytes, so the schema holds the names of at most 63 characters (63 × 4
    /// bytes ≤ 255) that do not start with a dot, all of which the server takes.
    package static let attachmentName = Schema.string(
        "The file name given with the upload: the server takes 1-255 bytes of UTF-8 without a control character (U+0000-U+001F, U+007F), / or \\, other than . and ..; the pattern holds names of at most 63 characters not starting with a dot.",
        pattern: "^[^\\u0000-\\u001F\\u007F/\\\\.][^\\u0000-\\u001F\\u007F/\\\\]{0,62}$")
    private static let sha256 = Schema.string("The bytes' SHA-256, lowercase hex; also the download's ETag.", pattern: "^[0-9a-f]{64}$")
    private static let replyTo = nullableServerId(
        "An earlier message of the conversation this one quotes, visible to the sender (404 otherwise; 409 when deleted or a pigeon.* message).")
    private static let threadRoot = nullableServerId(
        "The message whose thread this one goes in: of the conversation and visible to the sender (404 otherwise; 409 when deleted or a pigeon.* message; 400 when it is itself in a thread).")
    /// The attachments a send names: uploads of the sender's user, each once.
    private static let attachmentReferences = Schema.array(
        Schema.ref("AttachmentReference"),
        "Uploads of the sender's user that the message carries (400 for an id that is not one, or named twice).", maxItems: AttachmentLimits.perMessage)
    private static let reactions = Schema.array(
        Schema.ref("Reaction"), "As the reader sees them: keys in order of their first use, none with count 0; [] when none.")

    /// The emoji of one Unicode scalar the server takes as a reaction key, as the ranges of a regular expression's
    /// character class: read from ``Validation/isValidReactionKey(_:)`` itself (over the blocks that hold emoji), so the
    /// pattern never allows a key the server refuses.
    private static var singleScalarEmoji: String {
        let blocks: [ClosedRange<UInt32>] = [0x100...0x33FF, 0x1F000...0x1FBFF]
        var ranges: [ClosedRange<UInt32>] = []
        for value in blocks.joined() {
            guard let scalar = Unicode.Scalar(value), Validation.isValidReactionKey(String(Character(scalar))) else { continue }
            if let last = ranges.last, last.upperBound + 1 == value {
                ranges[ranges.count - 1] = last.lowerBound...value
            } else {
                ranges.append(value...value)
            }
        }
        return ranges.map { range in
            let first = String(Character(Unicode.Scalar(range.lowerBound)!))
            return range.count == 1 ? first : first + "-" + String(Character(Unicode.Scalar(range.upperBound)!))
        }.joined()
    }

    // MARK: Named schemas

    /// Every named schema, in document order.
    package static var components: [(String, JSONNode)] {
        base + ServerEvent.Kind.allCases.map { (eventName($0), event($0)) }
            + [("Event", eventUnion), ("ServerSentEvent", serverSentEvent)]
            + ClientOperation.Op.allCases.map { (operationName($0), operation($0)) }
            + [("ClientOperation", operationUnion), ("AckFrame", ackFrame), ("ErrorFrame", errorFrame), ("ServerFrame", serverFrameUnion)]
            + serviceSchemas
    }

    private static var base: [(String, JSONNode)] {
        [
            ("ErrorCode", Schema.enumeration(errorCodes, "The error codes of API.md and docs/API.md, each with its HTTP status.")),
            (
                "ErrorDetail",
                Schema.object(
                    required: ["code", "message"], [("code", Schema.ref("ErrorCode")), ("message", Schema.string("For humans; may change."))])
            ),
            ("Error", Schema.object("Every error answer.", required: ["error"], [("error", Schema.ref("ErrorDetail"))])),
            (
                "RegisterDeviceRequest",
                Schema.object(
                    required: ["userId"],
                    [
                        ("userId", userId),
                        ("deviceName", Schema.nullable(Schema.string("At most 128 characters, no U+0000.", pattern: noNul, maxLength: 128))),
                    ])
            ),
            (
                "DeviceRegistration",
                Schema.object(
                    required: ["userId", "deviceId", "token"],
                    [
                        ("userId", userId), ("deviceId", uuid),
                        ("token", Schema.string("The device's bearer token, shown once.", pattern: "^pgn_[A-Za-z0-9_-]{43}$")),
                    ])
            ),
            (
                "DeviceInfo",
                Schema.object(
                    required: ["deviceId", "deviceName", "createdAt", "lastSeenAt", "current"],
                    [
                        ("deviceId", deviceId), ("deviceName", Schema.nullable(Schema.string())), ("createdAt", millis),
                        ("lastSeenAt", Schema.described(millis, "Its latest authenticated request, to about a minute.")),
                        ("current", Schema.described(Schema.boolean, "Whether it is the calling device.")),
                    ])
            ),
            ("DeviceList", Schema.object(required: ["devices"], [("devices", Schema.array(Schema.ref("DeviceInfo"), "Oldest first."))])),
            ("PushKind", Schema.enumeration(PushKind.allCases.map(\.rawValue))),
            (
                "PushRegistrationRequest",
                Schema.object(
                    required: ["kind", "appId", "pushkey"],
                    [
                        ("kind", Schema.ref("PushKind")),
                        ("appId", Schema.string("The app's id at the push gateway.", pattern: "^[A-Za-z0-9._-]{1,64}$")),
                        ("pushkey", Schema.string("The provider's token: 1-512 printable ASCII characters without spaces.", pattern: "^[!-~]{1,512}$")),
                        ("data", Schema.nullable(["type": "object", "description": "Passed to the gateway; at most 2,048 bytes of JSON."])),
                    ])
            ),
            (
                "PushRegistrationInfo",
                Schema.object(
                    required: ["kind", "appId", "pushkey", "data", "updatedAt", "lastPushedAt", "pending"],
                    [
                        ("kind", Schema.ref("PushKind")), ("appId", Schema.string()), ("pushkey", Schema.string()),
                        ("data", Schema.nullable(["type": "object"])), ("updatedAt", millis),
                        ("lastPushedAt", Schema.nullable(Schema.integer("When the gateway last accepted a push for this device; null: never."))),
                        ("pending", Schema.described(Schema.boolean, "Whether a push is owed to this device now.")),
                    ])
            ),
            ("MemberRole", Schema.enumeration(MemberRole.allCases.map(\.rawValue))),
            ("MembershipState", Schema.enumeration(MembershipState.allCases.map(\.rawValue))),
            (
                "Block",
                Schema.object(
                    "A user the caller blocks.", required: ["userId", "at"],
                    [("userId", userId), ("at", Schema.described(millis, "When the block was made (a repeated PUT keeps it)."))])
            ),
            ("BlockList", Schema.object(required: ["blocks"], [("blocks", Schema.array(Schema.ref("Block"), "Oldest block first."))])),
            (
                "ConversationMember",
                Schema.object(
                    required: ["userId", "role", "membership", "joinedSeq", "deliveredSeq", "readSeq"],
                    [
                        ("userId", userId), ("role", Schema.ref("MemberRole")),
                        (
                            "membership",
                            Schema.described(
                                Schema.ref("MembershipState"),
                                "invited: added by a stranger under --consent invites, not accepted yet (no message.new, push or unread count); joined otherwise."
                            )
                        ),
                        ("joinedSeq", Schema.described(seq, "The seq of the change that added it; 0 for a founding member.")),
                        (
                            "deliveredSeq",
                            Schema.described(
                                seq, "As the caller is shown it: below the caller's first message this member's block hid from it, if any.")
                        ),
                        ("readSeq", Schema.described(seq, "As deliveredSeq is shown.")),
                    ])
            ),
            (
                "Reaction",
                Schema.object(
                    "One reaction key on a message, as the reader sees it.",
                    required: ["key", "count", "me"],
                    [
                        ("key", storedReactionKey), ("count", Schema.integer("How many users hold the key.", minimum: 1)),
                        ("me", Schema.described(Schema.boolean, "Whether the reader's user holds it.")),
                    ])
            ),
            (
                "ReplyPreview",
                Schema.object(
                    "The quoted message as of the read, so that a client draws the quote without fetching it.",
                    required: ["serverId", "senderId", "type", "body", "deleted"],
                    [
                        ("serverId", uuid), ("senderId", userId), ("type", messageType),
                        ("body", Schema.string("At most the first 100 characters (extended grapheme clusters) of its body; \"\" once deleted, and when unavailable.")),
                        ("deleted", Schema.boolean),
                        (
                            "unavailable",
                            Schema.described(
                                Schema.boolean,
                                "Present (true) when the reader may not read the quoted message: hidden from it by a block, or older than its membership. Its body is then \"\"."
                            )
                        ),
                    ])
            ),
            (
                "ThreadSummary",
                Schema.object(
                    "On a message with replies in its thread, as of the read.",
                    required: ["replyCount", "lastReplyAt", "lastReplySenders"],
                    [
                        ("replyCount", Schema.integer("Its thread's replies that are not deleted.", minimum: 1)),
                        ("lastReplyAt", Schema.described(millis, "When the newest of them was stored.")),
                        ("lastReplySenders", Schema.array(userId, "The senders of the newest replies, newest first, each once.", minItems: 1, maxItems: 3)),
                    ])
            ),
            (
                "AttachmentUpload",
                Schema.object(
                    "An upload, durable: its id goes in a send's attachments.",
                    required: ["id", "name", "size", "contentType", "sha256"],
                    [
                        ("id", uuid), ("name", attachmentName), ("size", Schema.integer("Bytes.", minimum: 1)),
                        ("contentType", Schema.string("The media type given with the upload (type and subtype lowercased); application/octet-stream when none.")),
                        ("sha256", sha256),
                    ])
            ),
            (
                "AttachmentReference",
                Schema.object(
                    "An upload a send carries, with the sender's dimensions (stored as given).",
                    required: ["id"],
                    [
                        ("id", uuid),
                        ("width", Schema.nullable(Schema.integer("Pixels.", minimum: 0, maximum: Int64(AttachmentLimits.maxDimension)))),
                        ("height", Schema.nullable(Schema.integer("Pixels.", minimum: 0, maximum: Int64(AttachmentLimits.maxDimension)))),
                        ("durationMs", Schema.nullable(Schema.integer("Milliseconds.", minimum: 0, maximum: AttachmentLimits.maxDurationMs))),
                    ])
            ),
            (
                "Attachment",
                Schema.object(
                    "An attachment as a message carries it: the upload's metadata and the sender's dimensions; GET /v1/attachments/{id} reads its bytes.",
                    required: ["id", "name", "size", "contentType", "sha256", "width", "height", "durationMs"],
                    [
                        ("id", uuid), ("name", attachmentName), ("size", Schema.integer("Bytes.", minimum: 1)),
                        ("contentType", Schema.string("The media type given with the upload.")), ("sha256", sha256),
                        ("width", Schema.nullable(Schema.integer("Pixels, as the sender gave them.", minimum: 0))),
                        ("height", Schema.nullable(Schema.integer("Pixels, as the sender gave them.", minimum: 0))),
                        ("durationMs", Schema.nullable(Schema.integer("Milliseconds, as the sender gave them.", minimum: 0))),
                    ])
            ),
            (
                "Message",
                Schema.object(
                    required: [
                        "serverId", "clientMessageId", "conversationId", "seq", "senderId", "senderDeviceId", "type", "body", "clientTimestamp",
                        "acceptedAt", "storedAt", "reactions", "replyTo", "replyPreview", "threadRoot", "thread", "attachments",
                    ],
                    [
                        ("serverId", uuid), ("clientMessageId", uuid), ("conversationId", uuid),
                        ("seq", Schema.described(seq, "0 only in a dead letter (never stored).")), ("senderId", userId), ("senderDeviceId", deviceId),
                        ("type", messageType), ("body", Schema.string("The latest text; \"\" once deleted.")), ("clientTimestamp", clientTimestamp),
                        ("acceptedAt", millis), ("storedAt", Schema.described(millis, "0 only in a dead letter.")),
                        ("editedAt", Schema.described(millis, "Present once edited.")), ("deletedAt", Schema.described(millis, "Present once deleted.")),
                        ("reactions", reactions),
                        ("replyTo", Schema.nullable(Schema.string("The serverId of the message it quotes; null when it quotes none.", format: "uuid"))),
                        ("replyPreview", Schema.nullable(Schema.ref("ReplyPreview"))),
                        ("threadRoot", Schema.nullable(Schema.string("The serverId of the message whose thread it is in; null when in none.", format: "uuid"))),
                        ("thread", Schema.nullable(Schema.ref("ThreadSummary"))),
                        ("attachments", Schema.array(Schema.ref("Attachment"), "In the sender's order; [] when none, and once deleted.")),
                        (
                            "withheldFrom",
                            Schema.array(
                                userId,
                                "On the sender's own copies only, present when not empty: the members it is withheld from for good (they block the sender). Its ticks never count them as delivered or read.")
                        ),
                    ])
            ),
            (
                "Conversation",
                Schema.object(
                    required: ["id", "kind", "name", "createdAt", "lastSeq", "updatedAt", "members", "lastMessage", "unreadCount"],
                    [
                        ("id", uuid), ("kind", Schema.enumeration(["direct", "group"])), ("name", Schema.nullable(Schema.string())),
                        ("createdAt", millis), ("lastSeq", seq), ("updatedAt", Schema.described(millis, "Its newest message's store time, else createdAt.")),
                        ("members", Schema.array(Schema.ref("ConversationMember"))),
                        ("lastMessage", Schema.nullable(Schema.ref("Message"))),
                        ("unreadCount", Schema.integer("The caller's unread messages (null and 0 in a conversation.created event).", minimum: 0)),
                    ])
            ),
            (
                "ConversationList",
                Schema.object(
                    required: ["conversations", "hasMore", "nextBefore"],
                    [
                        ("conversations", Schema.array(Schema.ref("Conversation"), "Newest activity first.")), ("hasMore", Schema.boolean),
                        ("nextBefore", Schema.nullable(Schema.string("The `before` of the next page."))),
                    ])
            ),
            (
                "CreateConversationRequest",
                Schema.object(
                    required: ["members"],
                    [
                        (
                            "members",
                            Schema.array(userId, "The other members; repeats and the caller are merged; at most 1,000 members with the caller (--max-members).")
                        ),
                        ("name", Schema.nullable(Schema.string("At most 256 characters, no U+0000.", pattern: noNul, maxLength: 256))),
                    ])
            ),
            (
                "RenameConversationRequest",
                Schema.object(
                    required: ["name"],
                    [("name", Schema.nullable(Schema.string("1-256 characters, no U+0000; null removes the name.", pattern: noNul, minLength: 1, maxLength: 256)))])
            ),
            (
                "AddMembersRequest",
                Schema.object(
                    required: ["userIds"],
                    [
                        ("userIds", Schema.array(userId, "Repeats and current members are ignored.", minItems: 1, maxItems: 1000)),
                        ("role", Schema.nullable(Schema.enumeration(["member", "admin"], "Default member; never owner."))),
                    ])
            ),
            ("SetRoleRequest", Schema.object(required: ["role"], [("role", Schema.enumeration(["admin", "member"]))])),
            (
                "SendMessageRequest",
                Schema.object(
                    required: ["clientMessageId", "type", "body", "clientTimestamp"],
                    [
                        ("clientMessageId", Schema.described(uuid, "The sender's idempotency key, unique per device.")), ("type", clientMessageType),
                        ("body", messageBody), ("clientTimestamp", clientTimestamp), ("replyTo", replyTo), ("threadRoot", threadRoot),
                        ("attachments", attachmentReferences),
                    ])
            ),
            ("MessageStatus", Schema.enumeration(["queued", "stored", "failed"])),
            (
                "SendMessageResponse",
                Schema.object(
                    "The accept answer: 202 for a new message, 200 for a resend (with seq once stored).",
                    required: ["serverId", "clientMessageId", "status", "acceptedAt"],
                    [
                        ("serverId", uuid), ("clientMessageId", uuid), ("status", Schema.ref("MessageStatus")), ("acceptedAt", millis),
                        ("seq", Schema.described(seq, "Present once stored, on a resend's answer.")), ("bodyReplaced", bodyReplaced), ("body", replacedBody),
                    ])
            ),
            (
                "EditMessageRequest",
                Schema.object(
                    required: ["clientMessageId", "body", "clientTimestamp"],
                    [("clientMessageId", uuid), ("body", messageBody), ("clientTimestamp", clientTimestamp)])
            ),
            (
                "DeleteMessageRequest",
                Schema.object(required: ["clientMessageId", "clientTimestamp"], [("clientMessageId", uuid), ("clientTimestamp", clientTimestamp)])
            ),
            (
                "MessagePage",
                Schema.object(
                    required: ["messages", "hasMore"],
                    [("messages", Schema.array(Schema.ref("Message"), "Ascending seq.")), ("hasMore", Schema.boolean)])
            ),
            (
                "ThreadPage",
                Schema.object(
                    required: ["root", "messages", "hasMore"],
                    [
                        ("root", Schema.ref("Message")), ("messages", Schema.array(Schema.ref("Message"), "The thread's replies, ascending seq (deleted ones too).")),
                        ("hasMore", Schema.boolean),
                    ])
            ),
            ("ReactionAction", Schema.enumeration(ReactionAction.allCases.map(\.rawValue))),
            (
                "ReactionsResponse",
                Schema.object(
                    "The message's reactions after the call, as the caller sees them.", required: ["serverId", "reactions"],
                    [("serverId", uuid), ("reactions", reactions)])
            ),
            (
                "ReactionUser",
                Schema.object(
                    required: ["userId", "key", "at"],
                    [("userId", userId), ("key", storedReactionKey), ("at", Schema.described(millis, "When the user added it."))])
            ),
            (
                "ReactionUsersPage",
                Schema.object(
                    required: ["users", "hasMore"],
                    [
                        (
                            "users",
                            Schema.array(Schema.ref("ReactionUser"), "Ascending by userId, then key; whole users: each user's every key (of the asked key only, with key).")
                        ),
                        ("hasMore", Schema.described(Schema.boolean, "More users follow: ask again with after = the last userId.")),
                    ])
            ),
            ("ReceiptKind", Schema.enumeration(ReceiptKind.allCases.map(\.rawValue))),
            (
                "ReceiptRequest",
                Schema.object(required: ["kind", "upToSeq"], [("kind", Schema.ref("ReceiptKind")), ("upToSeq", upToSeq)])
            ),
            ("ReceiptResponse", Schema.object(required: ["deliveredSeq", "readSeq"], [("deliveredSeq", seq), ("readSeq", seq)])),
            ("TypingRequest", Schema.object(required: ["active"], [("active", Schema.boolean)])),
            (
                "SyncResponse",
                Schema.object(
                    required: ["events", "cursor", "hasMore"],
                    [
                        ("events", Schema.array(Schema.ref("Event"), "The stream's events, in order (a reset first for an unknown cursor).")),
                        ("cursor", Schema.described(cursor, "Where to continue.")), ("hasMore", Schema.boolean),
                    ])
            ),
            (
                "DeadLetter",
                Schema.object(
                    required: ["message", "failedAt", "error"], [("message", Schema.ref("Message")), ("failedAt", millis), ("error", Schema.ref("ErrorDetail"))])
            ),
            ("DeadLetterList", Schema.object(required: ["deadLetters"], [("deadLetters", Schema.array(Schema.ref("DeadLetter"), "Oldest first."))])),
            ("Health", Schema.object(required: ["status"], [("status", Schema.constant("ok"))])),
        ] + adminSchemas + webhookSchemas + [
            ("Ready", Schema.object(required: ["status"], [("status", Schema.constant("ready"))])),
        ]
    }

    // MARK: The operator's page (docs/API.md "The operator's page")

    private static let count = Schema.integer(nil, minimum: 0)
    private static let perSecond = Schema.number("Per second, to a tenth.", minimum: 0)
    private static let streams = Schema.object(
        required: ["websocket", "sse"], [("websocket", count), ("sse", count)])
    private static let quantiles = Schema.object(
        "Whole milliseconds, each the upper bound of the histogram bucket the quantile falls in; null when count is 0.",
        required: ["count", "p50", "p90", "p99"],
        [
            ("count", count), ("p50", Schema.nullable(Schema.integer(minimum: 0))), ("p90", Schema.nullable(Schema.integer(minimum: 0))),
            ("p99", Schema.nullable(Schema.integer(minimum: 0))),
        ])

    private static let adminSchemas: [(String, JSONNode)] = [
        ("LatencyQuantiles", quantiles),
        (
            "AdminStatsSample",
            Schema.object(
                required: [
                    "at", "accepted", "stored", "delivered", "deadLettered", "bufferDepth", "openStreams", "acceptToStored", "storedToDelivered",
                ],
                [
                    ("at", millis), ("accepted", perSecond), ("stored", perSecond), ("delivered", perSecond), ("deadLettered", perSecond),
                    ("bufferDepth", count), ("openStreams", streams), ("acceptToStored", Schema.ref("LatencyQuantiles")),
                    ("storedToDelivered", Schema.ref("LatencyQuantiles")),
                ])
        ),
        (
            "AdminStats",
            Schema.object(
                "This node's counts, rates, depth, streams and latencies (docs/API.md, \"The operator's page\").",
                required: [
                    "serverTime", "nodeId", "startedAt", "totals", "rates", "bufferDepth", "openStreams", "deadLetters", "nodes", "latency",
                    "sampleIntervalSeconds", "samples",
                ],
                [
                    ("serverTime", millis), ("nodeId", Schema.string()), ("startedAt", millis),
                    (
                        "totals",
                        Schema.object(
                            required: ["accepted", "stored", "delivered", "deadLettered", "retried", "rejected"],
                            [
                                ("accepted", count), ("stored", count), ("delivered", count), ("deadLettered", count), ("retried", count),
                                ("rejected", count),
                            ])
                    ),
                    (
                        "rates",
                        Schema.object(
                            required: ["accepted", "stored", "delivered", "deadLettered"],
                            [("accepted", perSecond), ("stored", perSecond), ("delivered", perSecond), ("deadLettered", perSecond)])
                    ),
                    ("bufferDepth", count), ("openStreams", streams),
                    ("deadLetters", Schema.nullable(Schema.integer("Dead letters in the store; null when the store did not answer.", minimum: 0))),
                    (
                        "nodes",
                        Schema.array(
                            Schema.object(
                                required: ["nodeId", "lastHeartbeatAt", "thisNode"],
                                [("nodeId", Schema.string()), ("lastHeartbeatAt", millis), ("thisNode", Schema.boolean)]),
                            "Sorted by nodeId.")
                    ),
                    (
                        "latency",
                        Schema.object(
                            required: ["windowSeconds", "acceptToStored", "storedToDelivered"],
                            [
                                ("windowSeconds", count), ("acceptToStored", Schema.ref("LatencyQuantiles")),
                                ("storedToDelivered", Schema.ref("LatencyQuantiles")),
                            ])
                    ),
                    ("sampleIntervalSeconds", Schema.integer(minimum: 1)),
                    ("samples", Schema.array(Schema.ref("AdminStatsSample"), "The last five minutes (at most 300), oldest first.", maxItems: 300)),
                ])
        ),
        (
            "AdminConversation",
            Schema.object(
                "One conversation's delivery state, for the operator.",
                required: ["conversationId", "kind", "name", "createdAt", "updatedAt", "lastSeq", "members", "behind", "serverTime"],
                [
                    ("conversationId", uuid), ("kind", Schema.enumeration(["direct", "group"])), ("name", Schema.nullable(Schema.string())),
                    ("createdAt", millis), ("updatedAt", millis), ("lastSeq", seq),
                    (
                        "members",
                        Schema.array(
                            Schema.object(
                                required: ["userId", "role", "joinedSeq", "deliveredSeq", "readSeq", "undelivered", "behind", "devices"],
                                [
                                    ("userId", userId), ("role", Schema.ref("MemberRole")), ("joinedSeq", seq), ("deliveredSeq", seq), ("readSeq", seq),
                                    ("undelivered", Schema.integer("lastSeq - deliveredSeq.", minimum: 0)),
                                    ("behind", Schema.described(Schema.boolean, "deliveredSeq < lastSeq.")),
                                    (
                                        "devices",
                                        Schema.array(
                                            Schema.object(
                                                required: ["deviceId", "name", "lastSeenAt", "online"],
                                                [
                                                    ("deviceId", deviceId), ("name", Schema.nullable(Schema.string())),
                                                    ("lastSeenAt", millis),
                                                    ("online", Schema.described(Schema.boolean, "A stream of the device is open on some node.")),
                                                ]))
                                    ),
                                ]),
                            "Sorted by userId.")
                    ),
                    ("behind", Schema.array(userId, "The members that are behind, sorted.")), ("serverTime", millis),
                ])
        ),
    ]

    // MARK: Events (API.md "Events"): one schema per kind, shared by /v1/sync, the WebSocket and SSE

    package static func eventName(_ kind: ServerEvent.Kind) -> String {
        switch kind {
        case .messageNew: "MessageNewEvent"
        case .messageStored: "MessageStoredEvent"
        case .messageFailed: "MessageFailedEvent"
        case .receipt: "ReceiptEvent"
        case .conversationCreated: "ConversationCreatedEvent"
        case .typing: "TypingEvent"
        case .reaction: "ReactionEvent"
        case .reset: "ResetEvent"
        }
    }

    /// What the event says, for the documents' descriptions.
    package static func eventSummary(_ kind: ServerEvent.Kind) -> String {
        switch kind {
        case .messageNew: "A message stored in one of the device's conversations (every member device but the sending one)."
        case .messageStored: "The device's message is stored with its seq (the sending device)."
        case .messageFailed: "Processing gave up on the device's message; it is dead-lettered (the sending device)."
        case .receipt: "A member's delivered or read watermark moved up (every member device)."
        case .conversationCreated: "The device's user was made a member of a new conversation (every member device)."
        case .typing: "A member is typing or stopped (the other members' connected devices). Ephemeral: never stored or replayed, no cursor."
        case .reaction:
            "A member added or removed a reaction (every member device, the reacting one too); reactions is the message's aggregate after it, as the receiving device's user sees it. Not a message: no seq, no unread, no push."
        case .reset: "The cursor was unknown or expired: catch up each conversation through its history, then go on from this cursor."
        }
    }

    package static func event(_ kind: ServerEvent.Kind) -> JSONNode {
        let type = ("type", Schema.constant(kind.rawValue))
        let cursor = ("cursor", Schema.described(cursor, "Resume after this event with it."))
        let description = eventSummary(kind)
        switch kind {
        case .messageNew:
            return Schema.object(description, required: ["type", "cursor", "message"], [type, cursor, ("message", Schema.ref("Message"))])
        case .messageStored:
            return Schema.object(
                description, required: ["type", "cursor", "conversationId", "serverId", "clientMessageId", "seq", "storedAt", "recipientsOnline"],
                [
                    type, cursor, ("conversationId", uuid), ("serverId", uuid), ("clientMessageId", uuid), ("seq", seq), ("storedAt", millis),
                    ("recipientsOnline", Schema.integer("Devices of other members with a stream open when it was stored; 0: it waits in their mailbox.", minimum: 0)),
                    (
                        "withheldFrom",
                        Schema.array(userId, "Present when not empty: the members it is withheld from for good (they block the sender); its ticks never count them.")
                    ),
                ])
        case .messageFailed:
            return Schema.object(
                description, required: ["type", "cursor", "conversationId", "serverId", "clientMessageId", "error"],
                [type, cursor, ("conversationId", uuid), ("serverId", uuid), ("clientMessageId", uuid), ("error", Schema.ref("ErrorDetail"))])
        case .receipt:
            return Schema.object(
                description, required: ["type", "cursor", "conversationId", "userId", "kind", "upToSeq", "at"],
                [type, cursor, ("conversationId", uuid), ("userId", userId), ("kind", Schema.ref("ReceiptKind")), ("upToSeq", seq), ("at", millis)])
        case .conversationCreated:
            return Schema.object(description, required: ["type", "cursor", "conversation"], [type, cursor, ("conversation", Schema.ref("Conversation"))])
        case .typing:
            return Schema.object(
                description, required: ["type", "conversationId", "userId", "active"],
                [type, ("conversationId", uuid), ("userId", userId), ("active", Schema.boolean)])
        case .reaction:
            return Schema.object(
                description, required: ["type", "cursor", "conversationId", "serverId", "key", "userId", "action", "reactions", "at"],
                [
                    type, cursor, ("conversationId", uuid), ("serverId", Schema.described(uuid, "The message reacted to.")), ("key", storedReactionKey),
                    ("userId", Schema.described(userId, "Who reacted.")), ("action", Schema.ref("ReactionAction")), ("reactions", reactions),
                    ("at", millis),
                ])
        case .reset:
            return Schema.object(description, required: ["type", "cursor"], [type, cursor])
        }
    }

    private static var eventUnion: JSONNode {
        [
            "description": "One event of a device's stream: `type` says which.",
            "oneOf": .array(ServerEvent.Kind.allCases.map { Schema.ref(eventName($0)) }),
        ]
    }

    /// One event of `GET /v1/events` as its SSE framing carries it, with `data` the JSON text of an ``Event``
    /// (`contentMediaType` and `contentSchema`). OpenAPI 3.1 has no schema for the items of a stream: tools that check
    /// server-sent events (schemathesis) read a `text/event-stream` answer's schema as the schema of each event, so the
    /// answer names this one (as OpenAPI 3.2's `itemSchema` would).
    private static var serverSentEvent: JSONNode {
        Schema.object(
            "One server-sent event of GET /v1/events, its fields as the framing carries them: `id: <id>`, `event: <event>`, `data: <data as one line of JSON>`, then a blank line. The stream is a sequence of these (after `retry: 1000` and a comment; `: keep-alive` comments between them).",
            required: ["event", "data"],
            [
                ("id", Schema.described(cursor, "The event's cursor (absent on typing: a client keeps the last one it saw): resume after it with cursor or Last-Event-ID.")),
                ("event", Schema.enumeration(ServerEvent.Kind.allCases.map(\.rawValue), "The event's type, the same as its data's type.")),
                (
                    "data",
                    [
                        "type": "string",
                        "description": "The event as one line of JSON (the Event schema).",
                        "contentMediaType": "application/json",
                        "contentSchema": Schema.ref("Event"),
                    ]
                ),
                ("retry", Schema.integer("The reconnection delay in milliseconds (1000, before the first event).", minimum: 0)),
            ])
    }

    // MARK: WebSocket operations and answers

    package static func operationName(_ op: ClientOperation.Op) -> String {
        switch op {
        case .send: "SendOperation"
        case .receipt: "ReceiptOperation"
        case .typing: "TypingOperation"
        case .edit: "EditOperation"
        case .delete: "DeleteOperation"
        case .react: "ReactOperation"
        }
    }

    package static func operationSummary(_ op: ClientOperation.Op) -> String {
        switch op {
        case .send: "Send a message (as POST /v1/conversations/{id}/messages): answered by an ack or an error frame naming its clientMessageId."
        case .receipt:
            "Move the device's user's delivered or read watermark (as POST .../receipts). No answer when it succeeds, an error frame (without clientMessageId) when it fails; receipts of one socket are coalesced."
        case .typing: "Start or stop the typing indicator (as POST .../typing); an error frame when refused (rate_limited, not_found)."
        case .edit: "Edit one of the user's messages (as POST .../messages/{serverId}/edit): ack or error."
        case .delete: "Delete one of the user's messages (as POST .../messages/{serverId}/delete): ack or error."
        case .react:
            "Add or remove the user's reaction (as PUT or DELETE .../messages/{serverId}/reactions/{key}): an ack naming the clientMessageId, with the message's serverId and status stored, or an error frame."
        }
    }

    package static func operation(_ op: ClientOperation.Op) -> JSONNode {
        let fields: (required: [String], properties: [(String, JSONNode)]) =
            switch op {
            case .send:
                (["clientMessageId", "type", "body", "clientTimestamp"],
                 [
                    ("clientMessageId", uuid), ("type", clientMessageType), ("body", messageBody), ("clientTimestamp", clientTimestamp),
                    ("replyTo", replyTo), ("threadRoot", threadRoot), ("attachments", attachmentReferences),
                 ])
            case .receipt: (["kind", "upToSeq"], [("kind", Schema.ref("ReceiptKind")), ("upToSeq", upToSeq)])
            case .typing: (["active"], [("active", Schema.boolean)])
            case .edit:
                (["serverId", "clientMessageId", "body", "clientTimestamp"],
                 [("serverId", uuid), ("clientMessageId", uuid), ("body", messageBody), ("clientTimestamp", clientTimestamp)])
            case .delete:
                (["serverId", "clientMessageId", "clientTimestamp"], [("serverId", uuid), ("clientMessageId", uuid), ("clientTimestamp", clientTimestamp)])
            case .react:
                (["serverId", "key", "action", "clientMessageId"],
                 [
                    ("serverId", uuid), ("key", reactionKey), ("action", Schema.ref("ReactionAction")),
                    ("clientMessageId", Schema.described(uuid, "Chosen by the client; names the ack or error that answers it.")),
                 ])
            }
        return Schema.object(
            operationSummary(op), required: ["op", "conversationId"] + fields.required,
            [("op", Schema.constant(op.rawValue)), ("conversationId", uuid)] + fields.properties)
    }

    private static var operationUnion: JSONNode {
        [
            "description": "A text frame from the client: `op` says which operation.",
            "oneOf": .array(ClientOperation.Op.allCases.map { Schema.ref(operationName($0)) }),
        ]
    }

    private static var ackFrame: JSONNode {
        Schema.object(
            "The accept answer of a send, edit or delete (the same as the HTTP answer's body, with type ack), or of a react (serverId the message reacted to, status stored).",
            required: ["type", "clientMessageId", "serverId", "status", "acceptedAt"],
            [
                ("type", Schema.constant("ack")), ("clientMessageId", uuid), ("serverId", uuid), ("status", Schema.ref("MessageStatus")),
                ("acceptedAt", millis), ("seq", Schema.described(seq, "Present once stored (a resend).")), ("bodyReplaced", bodyReplaced), ("body", replacedBody),
            ])
    }

    /// `body` of an accept answer whose body the hook replaced.
    private static let replacedBody = Schema.string(
        "With bodyReplaced: the body as stored (for an edit, the new text as stored), which the sender's device shows instead of what it sent.")

    /// `bodyReplaced` of an accept answer (API.md 1.2).
    private static let bodyReplaced = Schema.described(
        ["type": "boolean", "const": .bool(true)], "Present (true) when the app's before-send hook replaced the body: the message is stored with the hook's body.")

    private static var errorFrame: JSONNode {
        Schema.object(
            "An operation was refused, or a frame could not be read (invalid_request, payload_too_large, rate_limited, not_found, forbidden, rejected, conflict, overloaded, internal; rejected: the app's before-send hook refused the send or edit, the reason in message).",
            required: ["type", "error"],
            [
                ("type", Schema.constant("error")),
                ("clientMessageId", Schema.described(Schema.string(), "The refused send's, edit's, delete's or react's, when it could be read.")),
                ("error", Schema.ref("ErrorDetail")),
            ])
    }

    private static var serverFrameUnion: JSONNode {
        [
            "description": "A text frame from the server: an event of the stream, or an answer to an operation.",
            "oneOf": .array([Schema.ref("Event"), Schema.ref("AckFrame"), Schema.ref("ErrorFrame")]),
        ]
    }
}
