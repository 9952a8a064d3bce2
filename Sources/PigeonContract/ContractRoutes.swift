import HTTPTypes
import PigeonProtocol

/// Every HTTP route of the server, in the order of the OpenAPI document. Adding a route to the server means adding
/// its row here (the contract tests compare this table with the router and name what is missing on either side).
extension ContractRoute {
    package static let all: [ContractRoute] =
        devices + conversations + blocks + messages + reactions + attachments + streams + service + operations + admin + webhookAdmin
        + contract + pages

    // MARK: Parameters

    /// The modules of PigeonJS besides its entry (`Clients/PigeonJS/src`; the server serves what it embeds, and a test
    /// checks that this list is that).
    package static let sdkModules = ["client.js", "errors.js", "messages.js", "policy.js", "reactions.js", "status.js", "store.js", "stream.js", "transport.js"]

    private static let conversationId = Parameter.path("id", ContractSchemas.uuid, "The conversation's id (400 when it is not a UUID).")
    private static let serverId = Parameter.path("serverId", ContractSchemas.uuid, "The target message's serverId (400 when it is not a UUID).")
    private static let memberId = Parameter.path("userId", ContractSchemas.userId, "The member's userId (400 when it is not a valid userId).")
    private static let cursor = Parameter.query(
        "cursor", ContractSchemas.cursor, "The cursor of the last event processed; without it the stream starts now. Unknown or expired: a reset event first.")
    private static let notMember = Refusal.notFound("The conversation is unknown, closed, or the caller is not a member.")
    private static let membershipRate = Refusal.rateLimited(
        "Over --conversations-per-minute conversation creations and changes of the user, or --stored-bytes-per-minute of storage.")
    private static let addRate = Refusal.rateLimited(
        "Over --conversations-per-minute conversation creations and changes of the user, --stored-bytes-per-minute of storage, or --stranger-adds-per-hour users added with whom the caller shares no joined conversation (nothing is created; Retry-After says when enough of the hour's adds expire).")
    private static let blockedAdd = Refusal.forbidden("A user added blocks the caller (\"this user does not accept invitations from you\"); nothing changed.")
    private static let sendRate = Refusal.rateLimited("Over --rate-limit sends of the device, or --stored-bytes-per-minute of storage of the user.")
    private static let after = Parameter.query("after", Schema.integer(nil, minimum: 0, maximum: Int64.max), "The page after this seq (gap recovery). Not with before: both are 400.")
    private static let before = Parameter.query("before", Schema.integer(nil, minimum: 1, maximum: Int64.max), "The page just before this seq (scrolling back). Not with after: both are 400.")

    private static func limit(_ maximum: Int64, default value: Int64) -> Parameter {
        .query("limit", Schema.integer("Default \(value).", minimum: 1, maximum: maximum), "Page size, 1-\(maximum) (default \(value)); anything else is 400.")
    }

    // MARK: Devices

    private static let devices: [ContractRoute] = [
        ContractRoute(
            method: .post, path: "/v1/devices", operationId: "registerDevice", tag: "devices", summary: "Register a device (open registration)",
            description:
                "On only with --open-registration (default for the embedded store on a loopback address without JWT keys). A user that has devices gets another one only with a token of one of its devices.",
            security: .optionalDevice, request: "RegisterDeviceRequest",
            answers: [.json(201, "DeviceRegistration", "The device and its token (shown once).")],
            refusals: [
                .invalid("A bad userId, deviceName or body."),
                .unauthorized("Open registration is off; the userId has devices and no token was given; a bad token."),
                .forbidden("A token of another user's device, or the user has --max-devices-per-user devices."), .tooLarge,
                .rateLimited("Over the registrations per client address (a burst of 300, then 5 a second)."),
            ]),
        ContractRoute(
            method: .get, path: "/v1/devices", operationId: "listDevices", tag: "devices", summary: "The caller's user's devices", security: .device,
            answers: [.json(200, "DeviceList", "Not revoked, oldest first; current marks the caller.")], refusals: [.unauthorized()]),
        ContractRoute(
            method: .delete, path: "/v1/devices/{deviceId}", operationId: "revokeDevice", tag: "devices", summary: "Revoke one of the user's devices",
            description: "Its token answers 401 at once, its WebSockets close with 4001, its SSE streams end, its push registration is dropped.",
            security: .device,
            parameters: [.path("deviceId", ContractSchemas.deviceId, "One of the caller's user's devices (itself included: logout).")],
            answers: [.empty(204, "Revoked.")],
            refusals: [.unauthorized(), .notFound("Another user's, an unknown, a revoked or a malformed device id (never 400).")]),
        ContractRoute(
            method: .put, path: "/v1/devices/current/push", operationId: "registerPush", tag: "devices", summary: "Register the device for push",
            security: .device, request: "PushRegistrationRequest", answers: [.empty(204, "Registered (a second PUT replaces it).")],
            refusals: [
                .invalid("A bad kind, appId, pushkey or data (over 2,048 bytes)."), .unauthorized(), .tooLarge,
                .conflict("A device of another user holds the appId and pushkey (nothing changed)."),
            ]),
        ContractRoute(
            method: .get, path: "/v1/devices/current/push", operationId: "pushRegistration", tag: "devices", summary: "The device's push registration",
            security: .device, answers: [.json(200, "PushRegistrationInfo", "The registration and what was last pushed.")],
            refusals: [.unauthorized(), .notFound("The device has no push registration.")]),
        ContractRoute(
            method: .delete, path: "/v1/devices/current/push", operationId: "unregisterPush", tag: "devices", summary: "Drop the device's push registration",
            security: .device, answers: [.empty(204, "Dropped, also when there was none.")], refusals: [.unauthorized()]),
    ]

    // MARK: Conversations and members

    private static let conversations: [ContractRoute] = [
        ContractRoute(
            method: .post, path: "/v1/conversations", operationId: "createConversation", tag: "conversations", summary: "Create a conversation",
            description: "The caller is a member and its owner. One other member and no name: direct, else group.", security: .device,
            request: "CreateConversationRequest",
            answers: [.json(201, "Conversation", "The new conversation; under --consent invites, members who are strangers to the caller are invited.")],
            refusals: [.invalid("A bad member userId, name, or over --max-members members."), .unauthorized(), blockedAdd, .tooLarge, addRate]),
        ContractRoute(
            method: .get, path: "/v1/conversations", operationId: "listConversations", tag: "conversations",
            summary: "The caller's conversations, newest activity first", security: .device,
            parameters: [
                limit(500, default: 100),
                .query(
                    "before", Schema.string(nil, pattern: "^[0-9]{1,18}(:[0-9a-f-]{1,64})?$"),
                    "`<updatedAt>` (strictly older) or `<updatedAt>:<id>` (the answer's nextBefore); anything else is 400."),
                .query(
                    "membership", Schema.ref("MembershipState"),
                    "joined (the default): the conversations the caller joined; invited: its invitations (--consent invites)."),
            ],
            answers: [.json(200, "ConversationList", "A page.")], refusals: [.invalid("A bad limit, before or membership."), .unauthorized()]),
        ContractRoute(
            method: .get, path: "/v1/conversations/{id}", operationId: "getConversation", tag: "conversations", summary: "One conversation",
            security: .device, parameters: [conversationId], answers: [.json(200, "Conversation", "The conversation, as the caller sees it.")],
            refusals: [.invalid("The id is not a UUID."), .unauthorized(), notMember]),
        ContractRoute(
            method: .patch, path: "/v1/conversations/{id}", operationId: "renameConversation", tag: "conversations",
            summary: "Rename a group (owner and admins)", description: "Written as a pigeon.members message (renamed) in the conversation's order.",
            security: .device, parameters: [conversationId], request: "RenameConversationRequest",
            answers: [.json(200, "Conversation", "The conversation after the change (or as it was, when nothing changed).")],
            refusals: [
                .invalid("A bad name, no name key, or a direct conversation."), .unauthorized(), .forbidden("A plain member."), notMember, .tooLarge,
                membershipRate,
            ]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/members", operationId: "addMembers", tag: "conversations",
            summary: "Add members (owner and admins)", security: .device, parameters: [conversationId], request: "AddMembersRequest",
            answers: [.json(200, "Conversation", "The conversation after the change; under --consent invites, strangers to the caller are invited.")],
            refusals: [
                .invalid("A bad userId, role owner, a direct conversation, or over --max-members members after the change."), .unauthorized(),
                .forbidden("A plain member, an admin adding with role admin (the owner's alone), or a user added blocks the caller (nothing changed)."),
                notMember, .tooLarge, addRate,
            ]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/accept", operationId: "acceptInvitation", tag: "conversations",
            summary: "Accept an invitation",
            description:
                "The invited caller becomes a joined member: from now on it gets message.new, pushes and an unread count; its devices get conversation.created again (membership joined) and page the history they lack. A joined member's call changes nothing.",
            security: .device, parameters: [conversationId], answers: [.json(200, "Conversation", "The conversation as the caller now sees it.")],
            refusals: [.invalid("The id is not a UUID."), .unauthorized(), notMember]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/decline", operationId: "declineInvitation", tag: "conversations",
            summary: "Decline an invitation", description: "The invited caller leaves, as a leave does (a pigeon.members message, left).",
            security: .device, parameters: [conversationId], answers: [.empty(204, "Left.")],
            refusals: [
                .invalid("The id is not a UUID."), .unauthorized(), notMember,
                .conflict("The caller joined the conversation: not an invitation (leave with DELETE .../members/{userId})."),
            ]),
        ContractRoute(
            method: .delete, path: "/v1/conversations/{id}/members/{userId}", operationId: "removeMember", tag: "conversations",
            summary: "Remove a member, or leave", description: "Owner and admins remove others ranked below them (an admin removes members); any member removes itself.",
            security: .device, parameters: [conversationId, memberId], answers: [.json(200, "Conversation", "The conversation after the change.")],
            refusals: [
                .invalid("A malformed userId."), .unauthorized(), .forbidden("A plain member removing another, an admin removing another admin or the owner."),
                .notFound("The conversation is unknown or not the caller's, or the user is not a member."), membershipRate,
            ]),
        ContractRoute(
            method: .patch, path: "/v1/conversations/{id}/members/{userId}", operationId: "setMemberRole", tag: "conversations",
            summary: "Change a member's role (owner only)", security: .device, parameters: [conversationId, memberId], request: "SetRoleRequest",
            answers: [.json(200, "Conversation", "The conversation after the change.")],
            refusals: [
                .invalid("A malformed userId, role owner, or the owner's own role."), .unauthorized(), .forbidden("Not the owner."),
                .notFound("The conversation is unknown or not the caller's, or the user is not a member."), .tooLarge, membershipRate,
            ]),
    ]

    // MARK: Blocks

    private static let blockedUser = Parameter.path("userId", ContractSchemas.userId, "The user to block or unblock (not the caller; 400 otherwise).")

    private static let blocks: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/v1/blocks", operationId: "listBlocks", tag: "blocks", summary: "The users the caller blocks", security: .device,
            answers: [.json(200, "BlockList", "Oldest block first.")], refusals: [.unauthorized()]),
        ContractRoute(
            method: .put, path: "/v1/blocks/{userId}", operationId: "blockUser", tag: "blocks", summary: "Block a user",
            description:
                "From now on the user cannot add the caller (403), and in conversations both are in its messages, reactions and typing never reach the caller's devices (history, sync, streams, unread counts, pushes); its messages never show ✓✓ from the caller. The block is not announced. Idempotent.",
            security: .device, parameters: [blockedUser], answers: [.empty(204, "Blocked (also when it was already).")],
            refusals: [
                .invalid("A malformed userId, the caller itself, or over 10,000 blocks."), .unauthorized(),
                .rateLimited("Over --stored-bytes-per-minute of storage of the user."),
            ]),
        ContractRoute(
            method: .delete, path: "/v1/blocks/{userId}", operationId: "unblockUser", tag: "blocks", summary: "Unblock a user",
            description: "What the user sends from now on reaches the caller; what was hidden stays hidden. Idempotent.", security: .device,
            parameters: [blockedUser], answers: [.empty(204, "Unblocked (also when there was no block).")],
            refusals: [.invalid("A malformed userId or the caller itself."), .unauthorized()]),
    ]

    // MARK: Messages, receipts, typing

    private static let messages: [ContractRoute] = [
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/messages", operationId: "sendMessage", tag: "messages", summary: "Send a message",
            description:
                "202 once the message is durable (the sender's ✓); the same clientMessageId again answers 200 with the original. replyTo quotes an earlier message, threadRoot puts the message in that message's thread.",
            security: .device, parameters: [conversationId], request: "SendMessageRequest",
            answers: [.json(202, "SendMessageResponse", "Accepted."), .json(200, "SendMessageResponse", "A resend: the original answer.")],
            refusals: [
                .invalid("A bad field, a pigeon.* type, U+0000 in body, a threadRoot that is itself in a thread, or the id is not a UUID."), .unauthorized(),
                .notFound(
                    "The conversation is unknown, closed, or the caller is not a member; a replyTo or threadRoot that is not a message of it the caller can see."),
                .conflict("A replyTo or threadRoot that is deleted, or one of the server's pigeon.* messages."),
                Refusal(error: .payloadTooLarge, when: "The request or the message body is over 65,536 bytes."), sendRate, .rejected,
                .invitationPending,
            ]),
        ContractRoute(
            method: .get, path: "/v1/conversations/{id}/messages", operationId: "history", tag: "messages", summary: "A page of history",
            description: "after or before (not both: 400), exclusive; neither: the newest page. Never below the caller's joinedSeq.",
            security: .device,
            parameters: [conversationId, after, before, limit(500, default: 100)], exclusive: [["after", "before"]],
            answers: [.json(200, "MessagePage", "Ascending seq.")],
            refusals: [.invalid("A bad after, before or limit, both after and before, or the id is not a UUID."), .unauthorized(), notMember]),
        ContractRoute(
            method: .get, path: "/v1/conversations/{id}/threads/{serverId}/messages", operationId: "threadMessages", tag: "messages",
            summary: "A page of a thread",
            description:
                "The root and the messages whose threadRoot it is, paged by seq like history (after or before, not both; neither: the newest page); deleted replies too, with body \"\".",
            security: .device,
            parameters: [
                conversationId, .path("serverId", ContractSchemas.uuid, "The thread's root message (400 when it is not a UUID)."), after, before,
                limit(500, default: 100),
            ],
            exclusive: [["after", "before"]],
            answers: [.json(200, "ThreadPage", "The root and the replies, ascending seq.")],
            refusals: [
                .invalid("A bad after, before or limit, both after and before, or an id that is not a UUID."), .unauthorized(),
                .notFound("The conversation is unknown or not the caller's, or the root is not a message of it the caller can see."),
            ]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/messages/{serverId}/edit", operationId: "editMessage", tag: "messages",
            summary: "Edit one of the user's messages", description: "Ordered like a message (a pigeon.edit); idempotent by clientMessageId.",
            security: .device, parameters: [conversationId, serverId], request: "EditMessageRequest",
            answers: [.json(202, "SendMessageResponse", "Accepted."), .json(200, "SendMessageResponse", "A resend: the original answer.")],
            refusals: [
                .invalid("A bad field, a deleted or server message as target."), .unauthorized(), .forbidden("Another user's message."),
                .notFound("The conversation is not the caller's, or the target is unknown."),
                Refusal(error: .payloadTooLarge, when: "The request or the new body is over 65,536 bytes."), sendRate, .rejected,
            ]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/messages/{serverId}/delete", operationId: "deleteMessage", tag: "messages",
            summary: "Delete one of the user's messages", description: "Erases its text from the store; ordered like a message (a pigeon.delete).",
            security: .device, parameters: [conversationId, serverId], request: "DeleteMessageRequest",
            answers: [.json(202, "SendMessageResponse", "Accepted."), .json(200, "SendMessageResponse", "A resend: the original answer.")],
            refusals: [
                .invalid("A bad field, an already deleted or server message as target."), .unauthorized(), .forbidden("Another user's message."),
                .notFound("The conversation is not the caller's, or the target is unknown."), .tooLarge, sendRate,
            ]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/receipts", operationId: "receipt", tag: "messages", summary: "Move a watermark",
            description: "Only moves up (a lower one is a no-op); read implies delivered.", security: .device, parameters: [conversationId],
            request: "ReceiptRequest", answers: [.json(200, "ReceiptResponse", "The caller's watermarks now.")],
            refusals: [
                .invalid("A bad kind or upToSeq, or the id is not a UUID."), .unauthorized(), notMember, .tooLarge,
                .rateLimited("Over --stored-bytes-per-minute of storage of the user."),
            ]),
        ContractRoute(
            method: .post, path: "/v1/conversations/{id}/typing", operationId: "typing", tag: "messages", summary: "Typing indicator",
            description: "Expires by itself after 10 s without a refresh.", security: .device, parameters: [conversationId], request: "TypingRequest",
            answers: [.empty(204, "Sent to the other members' connected devices.")],
            refusals: [
                .invalid("A bad body, or the id is not a UUID."), .unauthorized(), notMember, .tooLarge,
                .rateLimited("Over --typing-rate typing updates a second of the device (burst --typing-burst)."),
            ]),
    ]

    // MARK: Reactions

    private static let reactionPath = "/v1/conversations/{id}/messages/{serverId}/reactions"
    private static let reactionKey = Parameter.path(
        "key", ContractSchemas.reactionKey, "The reaction, percent-encoded (an emoji as its UTF-8 bytes, %F0%9F%91%8D); anything else is 400.")
    private static let reactionTarget = Refusal.notFound(
        "The conversation is unknown or not the caller's, or the message is not in it or lies before the caller joined.")

    private static func react(_ method: HTTPRequest.Method, _ operationId: String, _ summary: String, conflict: String) -> ContractRoute {
        ContractRoute(
            method: method, path: reactionPath + "/{key}", operationId: operationId, tag: "reactions", summary: summary,
            description:
                "Idempotent: a second add, or removing an absent reaction, changes nothing and emits nothing. A change is durable before the answer, and a reaction event goes to every member device.",
            security: .device, parameters: [conversationId, serverId, reactionKey],
            answers: [.json(200, "ReactionsResponse", "The message's reactions after the call.")],
            refusals: [
                .invalid("A key that is not one emoji or an app token, or an id that is not a UUID."), .unauthorized(), reactionTarget, .conflict(conflict),
                .rateLimited("Over --stored-bytes-per-minute of storage of the user."), .invitationPending,
            ])
    }

    private static let reactions: [ContractRoute] = [
        react(
            .put, "addReaction", "Add the caller's reaction",
            conflict:
                "The message is deleted or one of the server's pigeon.* messages, or the add would pass 50 distinct keys on the message or 20 keys of the user on it."
        ),
        react(.delete, "removeReaction", "Remove the caller's reaction", conflict: "The message is deleted or one of the server's pigeon.* messages."),
        ContractRoute(
            method: .get, path: reactionPath, operationId: "reactionUsers", tag: "reactions", summary: "Who reacted, paged",
            description:
                "Ascending by userId, then key. A page holds whole users: limit counts users, and each user comes with every key it holds (only key, when given).",
            security: .device,
            parameters: [
                conversationId, serverId, .query("key", ContractSchemas.reactionKey, "Only this reaction."),
                limit(200, default: 50), .query("after", ContractSchemas.userId, "The users after this userId (the last of the page before)."),
            ],
            answers: [.json(200, "ReactionUsersPage", "A page of users.")],
            refusals: [.invalid("A bad key, limit or after, or an id that is not a UUID."), .unauthorized(), reactionTarget]),
    ]

    // MARK: Attachments

    private static let attachments: [ContractRoute] = [
        ContractRoute(
            method: .post, path: "/v1/attachments", operationId: "uploadAttachment", tag: "attachments", summary: "Upload an attachment",
            description:
                "The raw bytes as the body, with their Content-Type (application/octet-stream when none) and Content-Length (required; a chunked body is 400). Answered 201 only once the bytes are durable; an interrupted upload leaves nothing. Equal bytes are stored once. Until a message carries it, only its uploader's user reads it; an upload no message carries after 24 hours is deleted.",
            security: .device,
            parameters: [
                Parameter(name: "name", location: .query, required: true, schema: ContractSchemas.attachmentName, description: "The file name."),
            ],
            binaryRequest: "The attachment's bytes, of any media type.",
            answers: [.json(201, "AttachmentUpload", "Durable.")],
            refusals: [
                .invalid("No name or a bad one, no Content-Length, an empty body, a malformed Content-Type, or a body shorter than its Content-Length."),
                .unauthorized(), .forbidden("The upload would pass the user's quota of stored bytes (--attachment-quota-bytes, 1 GiB)."),
                Refusal(error: .payloadTooLarge, when: "Over --max-attachment-bytes (25 MiB), answered before the body is read."),
                .rateLimited("Over --attachment-uploads-per-minute (30) of the device."),
            ]),
        ContractRoute(
            method: .get, path: "/v1/attachments/{id}", operationId: "downloadAttachment", tag: "attachments", summary: "Read an attachment",
            description:
                "Streams the bytes to the uploader's user and to every member who can see a message carrying the attachment; anyone else gets the answer of an unknown id. Images of image/png|jpeg|gif|webp, audio/* and video/* are served inline under their type; everything else as application/octet-stream with Content-Disposition: attachment.",
            security: .deviceOrAccessToken,
            parameters: [
                .path("id", ContractSchemas.uuid, "The attachment's id (anything else is an unknown id: 404)."),
                .query("access_token", Schema.string(nil, minLength: 1), "The device token, for <img src> (instead of Authorization)."),
                .header("Range", Schema.string(), "One range, bytes=a-b, bytes=a- or bytes=-n (several ranges: the whole)."),
                .header("If-None-Match", Schema.string(), "The ETag held: 304 when it is this one."),
                .header("If-Range", Schema.string(), "The ETag the range is for: the whole when it is another."),
            ],
            answers: [
                ContractRoute.Answer(status: 200, description: "The bytes.", body: .binary(headers: attachmentHeaders)),
                ContractRoute.Answer(
                    status: 206, description: "The range asked.",
                    body: .binary(headers: attachmentHeaders + [("Content-Range", "bytes a-b/size.")])),
                ContractRoute.Answer(status: 304, description: "The client's copy is current.", body: .headersOnly([("ETag", "\"<sha256>\"")])),
            ],
            refusals: [
                .unauthorized(), .notFound("Unknown, or not readable by the caller (never told apart)."),
                Refusal(error: .rangeNotSatisfiable, when: "The range starts past the end."),
            ]),
    ]

    private static let attachmentHeaders: [(name: String, description: String)] = [
        ("ETag", "\"<sha256>\""), ("Cache-Control", "private, max-age=31536000, immutable"), ("X-Content-Type-Options", "nosniff"),
        ("Content-Disposition", "inline or attachment, with filename*=UTF-8''<name>."), ("Accept-Ranges", "bytes"),
    ]

    // MARK: The device's event log

    private static let streams: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/v1/sync", operationId: "sync", tag: "events", summary: "A page of the device's events (polling)",
            description: "Without a cursor it starts now: no events, and the cursor to poll from.", security: .device,
            parameters: [cursor, limit(1000, default: 100)], answers: [.json(200, "SyncResponse", "The events after the cursor.")],
            refusals: [.invalid("A malformed cursor or a bad limit."), .unauthorized()]),
        ContractRoute(
            method: .get, path: "/v1/events", operationId: "serverSentEvents", tag: "events", summary: "The device's events as server-sent events",
            description:
                "`retry: 1000` and a comment first, then each event as `id:` (its cursor; none on typing), `event:` (its type), `data:` (its JSON, the Event schema); `: keep-alive` after 15 s without events. The events and framing are described by /asyncapi.json (channel serverSentEvents).",
            security: .deviceOrAccessToken,
            parameters: [
                cursor,
                .header("Last-Event-ID", ContractSchemas.cursor, "The last event's id (a browser's EventSource adds it when it reconnects); wins over cursor."),
            ],
            answers: [.eventStream(200, item: "ServerSentEvent", "The stream, until the client or the server ends it: ServerSentEvent items.")],
            refusals: [.invalid("A malformed cursor or Last-Event-ID."), .unauthorized()]),
        ContractRoute(
            method: .get, path: "/v1/ws", operationId: "webSocket", tag: "events", summary: "The device's WebSocket",
            description:
                "A WebSocket upgrade: the device's events, and its operations the other way, as described by /asyncapi.json (channel webSocket). A request that cannot be upgraded gets the HTTP answers below; an upgrade refused for its token or cursor is answered like an HTTP call with them (401, 400 or 503, with the error body).",
            security: .deviceOrAccessToken,
            parameters: [
                cursor,
                .header("Upgrade", Schema.enumeration(["websocket"]), "A WebSocket upgrade request.", required: true),
                .header("Connection", Schema.string(nil, pattern: "(?i)upgrade"), "Includes Upgrade.", required: true),
                .header("Sec-WebSocket-Key", Schema.string(), "RFC 6455.", required: true),
                .header("Sec-WebSocket-Version", Schema.enumeration(["13"]), "RFC 6455.", required: true),
            ],
            answers: [.empty(101, "Switching protocols: the WebSocket of /asyncapi.json.")],
            refusals: [
                .invalid("Not a WebSocket upgrade request, or a malformed cursor."), .unauthorized(),
                .forbidden("With --cors-origin, a page's Origin that is not allowed."),
            ]),
    ]

    // MARK: Operations

    private static let operations: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/healthz", operationId: "health", tag: "operations", summary: "Alive", security: .none,
            answers: [.json(200, "Health", "The process answers.")]),
        ContractRoute(
            method: .get, path: "/readyz", operationId: "ready", tag: "operations", summary: "Ready", security: .none,
            answers: [.json(200, "Ready", "The store and the buffer are reachable (503 names which is not, or a full disk).")]),
        ContractRoute(
            method: .get, path: "/metrics", operationId: "metrics", tag: "operations", summary: "Prometheus metrics",
            description: "Needs Authorization: Bearer <--metrics-token> when one is set.", security: .optionalMetricsToken,
            answers: [.text(200, "text/plain", "Prometheus text format 0.0.4.")], refusals: [.unauthorized("--metrics-token is set and not given.")]),
    ]

    // MARK: Operators

    private static let admin: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/v1/admin/dead-letters", operationId: "deadLetters", tag: "admin", summary: "Dead letters, oldest first",
            availability: .adminToken, security: .adminToken, parameters: [limit(1000, default: 100)],
            answers: [.json(200, "DeadLetterList", "The dead letters.")],
            refusals: [.invalid("A bad limit."), .unauthorized("Not the admin token.")]),
        ContractRoute(
            method: .post, path: "/v1/admin/dead-letters/{serverId}/replay", operationId: "replayDeadLetter", tag: "admin",
            summary: "Put a dead letter back into the buffer",
            description: "It is stored with the conversation's next seq; its sender's device gets message.stored.", availability: .adminToken,
            security: .adminToken, parameters: [.path("serverId", ContractSchemas.uuid, "The dead letter's serverId.")],
            answers: [.json(202, "SendMessageResponse", "Queued again.")],
            refusals: [.invalid("The serverId is not a UUID."), .unauthorized("Not the admin token."), .notFound("No dead letter with this serverId.")]),
        ContractRoute(
            method: .get, path: "/v1/admin/stats", operationId: "adminStats", tag: "admin", summary: "This node's live numbers",
            description:
                "Counts, per-second rates of the last five minutes, buffer depth, open streams, nodes and their heartbeats, latency quantiles: what the operator's page charts. Read from the server's state, never from /metrics.",
            availability: .adminToken, security: .adminToken,
            parameters: [.query("since", Schema.integer("ms since the epoch.", minimum: 0), "Only the samples taken after it; anything but an integer >= 0 is 400.")],
            answers: [.json(200, "AdminStats", "This node's numbers.")],
            refusals: [.invalid("A bad since."), .unauthorized("Not the admin token.")]),
        ContractRoute(
            method: .get, path: "/v1/admin/conversations/{id}", operationId: "adminConversation", tag: "admin",
            summary: "One conversation's delivery state",
            description: "Its last seq, each member's watermarks and devices (online or not), and who is behind; the operator need not be a member.",
            availability: .adminToken, security: .adminToken, parameters: [conversationId],
            answers: [.json(200, "AdminConversation", "The conversation's delivery state.")],
            refusals: [.invalid("The id is not a UUID."), .unauthorized("Not the admin token."), .notFound("No such conversation.")]),
    ]

    // MARK: Pages

    private static let pages: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/admin", operationId: "adminPage", tag: "pages", summary: "The operator's page",
            description: "One self-contained HTML page that asks for the admin token and calls the admin routes.", availability: .adminToken,
            security: .none, answers: [.page("The page (Content-Security-Policy by hash, X-Frame-Options DENY, no-store).")]),
        ContractRoute(
            method: .get, path: "/", operationId: "demoPage", tag: "pages", summary: "The web demo",
            description: "alice over the WebSocket and bob over SSE, side by side, with live ticks.", availability: .web, security: .none,
            parameters: [
                .query(
                    "api",
                    Schema.string(
                        "An origin: http(s)://host[:port] (one trailing / forgiven), or empty for the page's own.",
                        pattern: "^(https?://([A-Za-z0-9.-]+|\\[[0-9A-Fa-f:.]+\\])(:[0-9]{1,5})?/?)?$"),
                    "The server the page talks to (default: its own origin); malformed: 400.")
            ],
            answers: [.page("The page (Content-Security-Policy by hash, no-store).")], refusals: [.invalid("A malformed api.")]),
        ContractRoute(
            method: .get, path: "/sdk/pigeon.js", operationId: "browserSDK", tag: "pages", summary: "PigeonJS, the browser SDK",
            description: "One ES module (docs/SDK-JS.md), importable from any origin (Access-Control-Allow-Origin: *); Cache-Control: no-cache with an ETag (If-None-Match: 304).",
            security: .none, answers: [.text(200, "text/javascript", "The module; its VERSION is the contract's version and a hash of the file.")]),
        ContractRoute(
            method: .get, path: "/sdk/{module}", operationId: "browserSDKModule", tag: "pages", summary: "A module of PigeonJS",
            description: "The modules /sdk/pigeon.js imports by relative URL, served like it; any other name: 404.",
            security: .none,
            parameters: [
                .path("module", Schema.enumeration(sdkModules), "A module of PigeonJS (an unknown name: 404).")
            ],
            answers: [.text(200, "text/javascript", "The module.")], refusals: [.notFound("No such module.")]),
        ContractRoute(
            method: .get, path: "/sdk/pigeon.d.ts", operationId: "browserSDKTypes", tag: "pages", summary: "PigeonJS's TypeScript declarations",
            description: "The types of /sdk/pigeon.js, served like it.",
            security: .none, answers: [.text(200, "application/typescript", "The declaration file.")]),
    ]

    // MARK: The contract itself

    private static let contract: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/openapi.json", operationId: "openAPI", tag: "contract", summary: "This document", security: .none,
            answers: [.text(200, "application/json", "The OpenAPI 3.1 document of every HTTP route (docs/openapi.json).")]),
        ContractRoute(
            method: .get, path: "/asyncapi.json", operationId: "asyncAPI", tag: "contract", summary: "The streams' document", security: .none,
            answers: [.text(200, "application/json", "The AsyncAPI 3.0 document of the WebSocket and the SSE stream (docs/asyncapi.json).")]),
    ]
}
