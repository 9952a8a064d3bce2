import HTTPTypes
import PigeonProtocol

/// The server API's routes (API.md 1.2, "The server API: the app's backend acts").
extension ContractRoute {
    private static let serviceConversationId = Parameter.path("id", ContractSchemas.uuid, "The conversation's id (400 when it is not a UUID).")
    private static let serviceUserId = Parameter.path("userId", ContractSchemas.userId, "A userId (400 when it is not a valid one).")
    private static let serviceUnauthorized = Refusal.unauthorized("No credential, or one that is neither the service credential nor a device's token.")
    private static let deviceToken = Refusal.forbidden("A device's token (opaque, or a JWT naming a device): the server API is the app backend's.")
    private static let unknownConversation = Refusal.notFound("The conversation is unknown.")

    static let service: [ContractRoute] = [
        ContractRoute(
            method: .post, path: "/v1/service/conversations", operationId: "serviceCreateConversation", tag: "service",
            summary: "Create a conversation (server API)",
            description: "Every member joined at once; the owner is owner, else the first member listed. One other member and no name: direct.",
            security: .service, request: "ServiceCreateConversationRequest", answers: [.json(201, "Conversation", "The new conversation.")],
            refusals: [.invalid("A bad member or owner userId, name, no member, or over --max-members."), serviceUnauthorized, deviceToken, .tooLarge]),
        ContractRoute(
            method: .post, path: "/v1/service/conversations/{id}/members", operationId: "serviceAddMembers", tag: "service",
            summary: "Add members (server API)", description: "Written as a pigeon.members message (added) whose by is \"service\".",
            security: .service, parameters: [serviceConversationId], request: "AddMembersRequest",
            answers: [.json(200, "Conversation", "The conversation after the change, as the operator sees it.")],
            refusals: [
                .invalid("A bad userId, role owner, a direct conversation, or over --max-members."), serviceUnauthorized, deviceToken,
                unknownConversation, .tooLarge,
            ]),
        ContractRoute(
            method: .delete, path: "/v1/service/conversations/{id}/members/{userId}", operationId: "serviceRemoveMember", tag: "service",
            summary: "Remove a member (server API)",
            description: "Written as a pigeon.members message (removed) whose by is \"service\". The owner may be removed: its heir becomes owner.",
            security: .service, parameters: [serviceConversationId, serviceUserId],
            answers: [.json(200, "Conversation", "The conversation after the change, as the operator sees it.")],
            refusals: [
                .invalid("A malformed id or userId."), serviceUnauthorized, deviceToken,
                .notFound("The conversation is unknown, or the user is not a member."),
            ]),
        ContractRoute(
            method: .post, path: "/v1/service/conversations/{id}/messages", operationId: "serviceSendMessage", tag: "service",
            summary: "Send a message as a member or a system sender (server API)",
            description:
                "The accept answer of a send. A system:<name> sender needs no membership; the message takes a seq, is delivered to every member device, counted unread and pushed. Not asked the before-send hook.",
            security: .service, parameters: [serviceConversationId], request: "ServiceSendMessageRequest",
            answers: [.json(202, "SendMessageResponse", "Accepted."), .json(200, "SendMessageResponse", "A resend: the original answer.")],
            refusals: [
                .invalid("A bad field, a pigeon.* type, a senderId that is neither a member nor system:<name>, an attachment that is not the sender's upload."),
                serviceUnauthorized, deviceToken,
                .notFound("The conversation is unknown; a replyTo or threadRoot that is not a message of it."),
                .conflict("A replyTo or threadRoot that is deleted, or one of the server's pigeon.* messages."),
                Refusal(error: .payloadTooLarge, when: "The request or the message body is over the limit."),
            ]),
        ContractRoute(
            method: .post, path: "/v1/service/conversations/{id}/messages/{serverId}/delete", operationId: "serviceDeleteMessage", tag: "service",
            summary: "Delete a message for everyone by moderation (server API)",
            description: "A pigeon.delete whose body says \"by\": \"service\"; the target's text is erased. The body is optional.",
            security: .service,
            parameters: [serviceConversationId, .path("serverId", ContractSchemas.uuid, "The message to delete (400 when it is not a UUID).")],
            request: "ServiceDeleteMessageRequest",
            answers: [.json(202, "SendMessageResponse", "Accepted."), .json(200, "SendMessageResponse", "A repeat: the first deletion's answer.")],
            refusals: [
                .invalid("A malformed id, an already deleted or server message as target."), serviceUnauthorized, deviceToken,
                .notFound("The conversation is unknown, or the message is not in it."), .tooLarge,
            ]),
        ContractRoute(
            method: .get, path: "/v1/service/users/{userId}/conversations", operationId: "serviceUserConversations", tag: "service",
            summary: "A user's conversations (server API)", description: "Paged as GET /v1/conversations, as the user sees them.", security: .service,
            parameters: [
                serviceUserId,
                .query("limit", Schema.integer("Default 100.", minimum: 1, maximum: 500), "Page size, 1-500 (default 100); anything else is 400."),
                .query(
                    "before", Schema.string(nil, pattern: "^[0-9]{1,18}(:[0-9a-f-]{1,64})?$"),
                    "`<updatedAt>` or `<updatedAt>:<id>` (the answer's nextBefore); anything else is 400."),
            ],
            answers: [.json(200, "ConversationList", "A page.")],
            refusals: [.invalid("A malformed userId, limit or before."), serviceUnauthorized, deviceToken]),
        ContractRoute(
            method: .get, path: "/v1/service/users/{userId}/devices", operationId: "serviceUserDevices", tag: "service",
            summary: "A user's devices (server API)", security: .service, parameters: [serviceUserId],
            answers: [.json(200, "DeviceList", "Not revoked, oldest first; current is false for each.")],
            refusals: [.invalid("A malformed userId."), serviceUnauthorized, deviceToken]),
        ContractRoute(
            method: .delete, path: "/v1/service/users/{userId}/devices/{deviceId}", operationId: "serviceRevokeDevice", tag: "service",
            summary: "Revoke a user's device (server API)",
            description: "As DELETE /v1/devices/{deviceId}: its token answers 401 at once, its WebSockets close with 4001, its SSE streams end, its push registration is dropped.",
            security: .service, parameters: [serviceUserId, .path("deviceId", ContractSchemas.deviceId, "One of the user's devices.")],
            answers: [.empty(204, "Revoked.")],
            refusals: [
                .invalid("A malformed userId."), serviceUnauthorized, deviceToken,
                .notFound("An unknown, revoked or malformed device id of the user (never 400)."),
            ]),
    ]
}
