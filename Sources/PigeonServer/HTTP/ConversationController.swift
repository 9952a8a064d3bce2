import Hummingbird
import PigeonDomain
import PigeonProtocol

/// Conversations, their messages, receipts and typing: the request/response part of API.md, for an authenticated
/// device (``DeviceRequestContext``).
struct ConversationController: Sendable {
    let store: any ConversationStore & MessageHistory & ReactionStore & BlockStore
    let ingest: Ingest
    let access: ConversationAccess
    let abuse: AbuseGuard
    let maxMembers: Int
    let maxBodyBytes: Int

    func addRoutes(to group: RouterGroup<DeviceRequestContext>) {
        group.post("/conversations", use: create)
        group.get("/conversations", use: list)
        group.get("/conversations/:id", use: show)
        group.post("/conversations/:id/messages", use: send)
        group.get("/conversations/:id/messages", use: history)
        group.post("/conversations/:id/receipts", use: receipt)
        group.post("/conversations/:id/typing", use: typing)
        group.patch("/conversations/:id", use: rename)
        group.post("/conversations/:id/members", use: addMembers)
        group.delete("/conversations/:id/members/:userId", use: removeMember)
        group.patch("/conversations/:id/members/:userId", use: setRole)
        group.post("/conversations/:id/messages/:serverId/edit", use: edit)
        group.post("/conversations/:id/messages/:serverId/delete", use: delete)
        group.put("/conversations/:id/messages/:serverId/reactions/:key", use: addReaction)
        group.delete("/conversations/:id/messages/:serverId/reactions/:key", use: removeReaction)
        group.get("/conversations/:id/messages/:serverId/reactions", use: reactionUsers)
        group.get("/conversations/:id/threads/:serverId/messages", use: thread)
        group.post("/conversations/:id/accept", use: accept)
        group.post("/conversations/:id/decline", use: decline)
    }

    @Sendable func create(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let device = context.device
        let body = try await JSONBody.decode(CreateConversationRequest.self, from: request, limit: maxBodyBytes)
        if let invalid = body.members.first(where: { !Validation.isValidUserId($0) }) {
            throw PigeonError.invalid("member \"\(invalid.prefix(80))\" is not a valid userId (1-64 characters of [A-Za-z0-9._@-])")
        }
        let members = Set(body.members + [device.userId])
        guard members.count <= maxMembers else { throw PigeonError.invalid("a conversation has at most \(maxMembers) members") }
        if let name = body.name, name.count > 256 { throw PigeonError.invalid("name is longer than 256 characters") }
        if let name = body.name, !Validation.isStorableText(name) { throw PigeonError.invalid("name must not contain the character U+0000") }
        try abuse.checkStorage(of: device.userId)
        try abuse.admitConversation(by: device.userId)
        let conversation = try await store.createConversation(creator: device.userId, members: Array(members), name: body.name)
        // The conversation's rows and its `conversation.created` payload once, then an event row per member.
        let payloadBytes = members.reduce(256 + (body.name?.utf8.count ?? 0)) { $0 + $1.utf8.count + 48 }
        abuse.chargeStorage(of: device.userId, bytes: abuse.storageCost(bytes: payloadBytes, members: members.count))
        return try JSONBody.response(conversation, status: .created)
    }

    @Sendable func list(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let pageLimit = try request.integerParameter("limit", range: 1...500) ?? 100
        let before = try request.uri.queryParameters.get("before").map(ConversationCursor.init(parameter:))
        var membership = MembershipState.joined
        if let raw = request.uri.queryParameters.get("membership") {
            guard let state = MembershipState(rawValue: String(raw)) else { throw PigeonError.invalid("membership must be joined or invited") }
            membership = state
        }
        return try JSONBody.response(
            try await store.conversations(of: context.device.userId, before: before, limit: Int(pageLimit), membership: membership))
    }

    // MARK: Invitations (API.md 1.2)

    /// `POST /v1/conversations/{id}/accept`: the caller's invitation becomes membership (a joined member's call changes
    /// nothing); `200` with the conversation as it now sees it.
    @Sendable func accept(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: context.device)
        return try JSONBody.response(try await store.acceptInvitation(conversationId: conversation.id, userId: context.device.userId))
    }

    /// `POST /v1/conversations/{id}/decline`: the invited caller leaves, as a leave does (`pigeon.members` "left");
    /// `204`. A joined member is `409` (it leaves with `DELETE …/members/{its userId}`).
    @Sendable func decline(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: context.device)
        guard let member = try await store.member(context.device.userId, of: conversation.id) else { throw PigeonError.conversationNotFound }
        guard member.membership == .invited else {
            throw PigeonError(.conflict, "not an invitation: the caller joined this conversation; leave it instead")
        }
        _ = try await store.changeMembership(
            conversationId: conversation.id, by: context.device, .remove(userId: context.device.userId), maxMembers: maxMembers)
        return Response(status: .noContent)
    }

    @Sendable func show(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: context.device)
        guard let found = try await store.conversation(id: conversation.id, for: context.device.userId) else {
            throw PigeonError.conversationNotFound
        }
        return try JSONBody.response(found)
    }

    @Sendable func send(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decodeSend(from: request, limit: maxBodyBytes)
        let accepted = try await ingest.send(body, from: context.device, to: context.parameters.decoded("id") ?? "")
        return try JSONBody.response(accepted.response, status: accepted.created ? .accepted : .ok)
    }

    @Sendable func history(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: context.device)
        let after = try request.integerParameter("after", range: 0...Int64.max)
        let before = try request.integerParameter("before", range: 1...Int64.max)
        if after != nil, before != nil { throw PigeonError.invalid("give either after or before, not both") }
        let pageLimit = try request.integerParameter("limit", range: 1...500) ?? 100
        // A member added later sees the conversation from the message that added it on.
        guard let member = try await store.member(context.device.userId, of: conversation.id) else { throw PigeonError.conversationNotFound }
        return try JSONBody.response(
            try await store.messages(
                conversationId: conversation.id, after: after, before: before, limit: Int(pageLimit), visibleFrom: member.joinedSeq,
                reader: context.device.userId))
    }

    // MARK: Threads and reactions (API.md 1.2)

    @Sendable func thread(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: context.device)
        guard let root = context.parameters.decoded("serverId").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("the thread's serverId must be a UUID")
        }
        let after = try request.integerParameter("after", range: 0...Int64.max)
        let before = try request.integerParameter("before", range: 1...Int64.max)
        if after != nil, before != nil { throw PigeonError.invalid("give either after or before, not both") }
        let pageLimit = try request.integerParameter("limit", range: 1...500) ?? 100
        guard let member = try await store.member(context.device.userId, of: conversation.id) else { throw PigeonError.conversationNotFound }
        guard
            let page = try await store.threadMessages(
                conversationId: conversation.id, root: root, after: after, before: before, limit: Int(pageLimit), visibleFrom: member.joinedSeq,
                reader: context.device.userId)
        else { throw PigeonError(.notFound, "message not found") }
        return try JSONBody.response(page)
    }

    @Sendable func addReaction(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        try await react(.add, context)
    }

    @Sendable func removeReaction(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        try await react(.remove, context)
    }

    private func react(_ action: ReactionAction, _ context: DeviceRequestContext) async throws -> Response {
        try JSONBody.response(
            try await access.react(
                conversationId: context.parameters.decoded("id"), serverId: context.parameters.decoded("serverId"),
                key: context.parameters.decoded("key"), action: action, device: context.device))
    }

    @Sendable func reactionUsers(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: context.device)
        guard let serverId = context.parameters.decoded("serverId").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("the message's serverId must be a UUID")
        }
        var key: String? = request.uri.queryParameters.get("key").map { String($0) }
        if let given = key {
            guard let canonical = Validation.canonicalReactionKey(given) else { throw PigeonError.invalid("key is not a valid reaction key") }
            key = canonical
        }
        let after = request.uri.queryParameters.get("after")
        if let after, !Validation.isValidUserId(after) { throw PigeonError.invalid("after must be a userId") }
        let pageLimit = try request.integerParameter("limit", range: 1...200) ?? 50
        return try JSONBody.response(
            try await store.reactionUsers(
                conversationId: conversation.id, serverId: serverId, reader: context.device.userId, key: key, after: after, limit: Int(pageLimit)))
    }

    // MARK: Members, roles and name (API.md 1.1)

    @Sendable func addMembers(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(AddMembersRequest.self, from: request, limit: maxBodyBytes)
        guard (1...maxMembers).contains(body.userIds.count) else { throw PigeonError.invalid("userIds must list 1-\(maxMembers) users") }
        if let invalid = body.userIds.first(where: { !Validation.isValidUserId($0) }) {
            throw PigeonError.invalid("userId \"\(invalid.prefix(80))\" is not valid (1-64 characters of [A-Za-z0-9._@-])")
        }
        return try await change(.add(userIds: body.userIds, role: body.role ?? .member), request, context)
    }

    @Sendable func removeMember(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        try await change(.remove(userId: try Self.userIdParameter(context)), request, context)
    }

    @Sendable func setRole(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(SetRoleRequest.self, from: request, limit: maxBodyBytes)
        return try await change(.setRole(userId: try Self.userIdParameter(context), role: body.role), request, context)
    }

    @Sendable func rename(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(RenameConversationRequest.self, from: request, limit: maxBodyBytes)
        return try await change(.rename(name: body.name), request, context)
    }

    /// A membership change by the caller: checked to be a member's (404), charged like a conversation creation (its
    /// rate) and by what it stores (a message and an event row per member).
    private func change(_ operation: MembershipOperation, _ request: Request, _ context: DeviceRequestContext) async throws -> Response {
        let device = context.device
        let conversation = try await access.memberConversation(context.parameters.decoded("id"), device: device)
        try abuse.checkStorage(of: device.userId)
        try abuse.admitConversation(by: device.userId)
        let changed = try await store.changeMembership(conversationId: conversation.id, by: device, operation, maxMembers: maxMembers)
        abuse.chargeStorage(of: device.userId, bytes: abuse.storageCost(bytes: 512, members: max(conversation.members.count, changed.members.count)))
        return try JSONBody.response(changed)
    }

    private static func userIdParameter(_ context: DeviceRequestContext) throws -> String {
        guard let userId = context.parameters.decoded("userId"), Validation.isValidUserId(userId) else {
            throw PigeonError.invalid("the path's userId is not valid (1-64 characters of [A-Za-z0-9._@-])")
        }
        return userId
    }

    // MARK: Editing and deleting (API.md 1.1)

    @Sendable func edit(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(EditMessageRequest.self, from: request, limit: maxBodyBytes)
        let accepted = try await ingest.change(
            .edit(body.body), serverId: context.parameters.decoded("serverId") ?? "", clientMessageId: body.clientMessageId,
            clientTimestamp: body.clientTimestamp, from: context.device, to: context.parameters.decoded("id") ?? "")
        return try JSONBody.response(accepted.response, status: accepted.created ? .accepted : .ok)
    }

    @Sendable func delete(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(DeleteMessageRequest.self, from: request, limit: maxBodyBytes)
        let accepted = try await ingest.change(
            .delete, serverId: context.parameters.decoded("serverId") ?? "", clientMessageId: body.clientMessageId,
            clientTimestamp: body.clientTimestamp, from: context.device, to: context.parameters.decoded("id") ?? "")
        return try JSONBody.response(accepted.response, status: accepted.created ? .accepted : .ok)
    }

    @Sendable func receipt(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(ReceiptRequest.self, from: request, limit: maxBodyBytes)
        return try JSONBody.response(
            try await access.recordReceipt(body, conversationId: context.parameters.decoded("id") ?? "", device: context.device))
    }

    @Sendable func typing(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(TypingRequest.self, from: request, limit: maxBodyBytes)
        try await access.recordTyping(active: body.active, conversationId: context.parameters.decoded("id") ?? "", device: context.device)
        return Response(status: .noContent)
    }
}
