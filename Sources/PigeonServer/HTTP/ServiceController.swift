import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol

/// The server API (API.md 1.2, "The server API: the app's backend acts"): `/v1/service/...`, for the app's backend with
/// the service credential (``ServiceAuthenticationMiddleware``).
///
/// Every action goes through the same store functions and accept path as the same action by a user, so it reaches
/// streams, history, unread counts, pushes and webhooks the same way: a conversation is ``ConversationStore/createConversation(creator:members:name:)``,
/// a member change ``ConversationStore/changeMembership(conversationId:by:_:maxMembers:)`` by the service's actor
/// (``SystemSender/service``: no member, the owner's rights), a message ``Ingest``'s send and a deletion its delete,
/// a revocation ``DeviceStore/revokeDevice(_:at:)`` then the fan-out, as `DELETE /v1/devices/{id}` does.
///
/// The service's own messages (a `system:<name>` sender, a member's name, a moderation delete) have the sender device
/// ``SystemSender/deviceId``, so every device of every member gets them as `message.new`. They are not asked the
/// before-send hook (the app's backend wrote them) and are not held to a device's rate or a user's stored-bytes budget.
struct ServiceController: Sendable {
    let store: any ConversationStore & DeviceStore
    let ingest: Ingest
    let fanout: any EventFanout
    let maxMembers: Int
    let maxBodyBytes: Int
    let logger: Logger

    /// The actor of the service's membership changes and deletions.
    static let actor = DeviceIdentity(userId: SystemSender.service, deviceId: SystemSender.deviceId)

    func addRoutes(to group: RouterGroup<ServiceRequestContext>) {
        group.post("/conversations", use: createConversation)
        group.post("/conversations/:id/members", use: addMembers)
        group.delete("/conversations/:id/members/:userId", use: removeMember)
        group.post("/conversations/:id/messages", use: send)
        group.post("/conversations/:id/messages/:serverId/delete", use: delete)
        group.get("/users/:userId/conversations", use: conversations)
        group.get("/users/:userId/devices", use: devices)
        group.delete("/users/:userId/devices/:deviceId", use: revokeDevice)
    }

    // MARK: Conversations and members

    /// `201 Conversation`, every member joined; the owner is `owner` (a member, listed or not) or the first listed.
    @Sendable func createConversation(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let body = try await JSONBody.decode(ServiceCreateConversationRequest.self, from: request, limit: maxBodyBytes)
        if let invalid = body.members.first(where: { !Validation.isValidUserId($0) }) {
            throw PigeonError.invalid("member \"\(invalid.prefix(80))\" is not a valid userId (1-64 characters of [A-Za-z0-9._@-])")
        }
        if let owner = body.owner, !Validation.isValidUserId(owner) {
            throw PigeonError.invalid("owner \"\(owner.prefix(80))\" is not a valid userId (1-64 characters of [A-Za-z0-9._@-])")
        }
        guard let owner = body.owner ?? body.members.first else { throw PigeonError.invalid("members must list at least one user") }
        let members = Set(body.members + [owner])
        guard members.count <= maxMembers else { throw PigeonError.invalid("a conversation has at most \(maxMembers) members") }
        if let name = body.name, name.isEmpty || name.count > 256 { throw PigeonError.invalid("name must be 1-256 characters") }
        if let name = body.name, !Validation.isStorableText(name) { throw PigeonError.invalid("name must not contain the character U+0000") }
        let conversation = try await store.createConversation(creator: owner, members: Array(members), name: body.name, admission: .everyoneJoins)
        return try JSONBody.response(conversation, status: .created)
    }

    /// `200 Conversation` as the operator sees it. Members already in are ignored.
    @Sendable func addMembers(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let conversationId = try Self.conversationId(context)
        let body = try await JSONBody.decode(AddMembersRequest.self, from: request, limit: maxBodyBytes)
        guard (1...maxMembers).contains(body.userIds.count) else { throw PigeonError.invalid("userIds must list 1-\(maxMembers) users") }
        if let invalid = body.userIds.first(where: { !Validation.isValidUserId($0) }) {
            throw PigeonError.invalid("userId \"\(invalid.prefix(80))\" is not valid (1-64 characters of [A-Za-z0-9._@-])")
        }
        return try JSONBody.response(
            try await store.changeMembership(
                conversationId: conversationId, by: Self.actor, .add(userIds: body.userIds, role: body.role ?? .member), maxMembers: maxMembers,
                admission: .everyoneJoins))
    }

    /// `200 Conversation`. The owner may be removed too: its heir becomes owner, as when an owner leaves.
    @Sendable func removeMember(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let conversationId = try Self.conversationId(context)
        let userId = try Self.userId(context)
        return try JSONBody.response(
            try await store.changeMembership(conversationId: conversationId, by: Self.actor, .remove(userId: userId), maxMembers: maxMembers, admission: .everyoneJoins))
    }

    // MARK: Messages

    /// The accept answer of a send (`202`, or `200` with the original for a resend of its clientMessageId by the same
    /// sender through the server API).
    @Sendable func send(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let conversationId = try Self.conversationId(context)
        let body = try await JSONBody.decode(ServiceSendMessageRequest.self, from: request, limit: maxBodyBytes + 4096)
        guard Validation.isValidUserId(body.senderId) || SystemSender.isValid(body.senderId) else {
            throw PigeonError.invalid("senderId must be a member's userId or system:<name> (name: 1-64 characters of [A-Za-z0-9._-])")
        }
        guard !SystemSender.reserved.contains(body.senderId.lowercased()) else {
            throw PigeonError.invalid(
                "senderId \(body.senderId) is the server's own (\(SystemSender.reserved.sorted().joined(separator: ", ")) are reserved); choose another system:<name>")
        }
        if !SystemSender.isSystem(body.senderId) {
            guard let members = try await store.members(of: conversationId) else { throw PigeonError.conversationNotFound }
            guard members.contains(body.senderId) else {
                throw PigeonError.invalid("senderId \(body.senderId) is not a member of this conversation (a system:<name> sender needs none)")
            }
        }
        let sender = DeviceIdentity(userId: body.senderId, deviceId: SystemSender.deviceId)
        let accepted = try await ingest.send(body.send, from: sender, to: conversationId, fromService: true)
        return try JSONBody.response(accepted.response, status: accepted.created ? .accepted : .ok)
    }

    /// A deletion for everyone by moderation: a `pigeon.delete` whose body says `"by": "service"`, answered like a
    /// send. The body is optional; without a clientMessageId one derived from the target is used, so deleting a
    /// message twice is one deletion (the second call answers `200` with the first).
    @Sendable func delete(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let conversationId = try Self.conversationId(context)
        guard let serverId = context.parameters.decoded("serverId").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("the message's serverId must be a UUID")
        }
        let raw: ByteBuffer
        do {
            raw = try await request.body.collect(upTo: maxBodyBytes)
        } catch is NIOTooManyBytesError {
            throw PigeonError(.payloadTooLarge, "request body is larger than \(maxBodyBytes) bytes")
        }
        let body =
            raw.readableBytes == 0
            ? ServiceDeleteMessageRequest() : try JSONBody.decode(ServiceDeleteMessageRequest.self, from: Data(raw.readableBytesView))
        let accepted = try await ingest.change(
            .delete, serverId: serverId, clientMessageId: body.clientMessageId ?? Self.moderationId(of: serverId),
            clientTimestamp: body.clientTimestamp ?? WallClock.nowMillis(), from: Self.actor, to: conversationId)
        return try JSONBody.response(accepted.response, status: accepted.created ? .accepted : .ok)
    }

    /// The clientMessageId of the moderation delete of `serverId` when the caller gives none: a UUID (version 8,
    /// RFC 9562) from the SHA-256 of the target's id, the same for every call.
    static func moderationId(of serverId: String) -> String {
        var bytes = Array(SHA256.hash(data: Array("pigeon.moderation-delete:\(serverId)".utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x80
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4), hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
        return parts.joined(separator: "-")
    }

    // MARK: Users

    /// `200 ConversationList`: the user's conversations, paged like `GET /v1/conversations`.
    @Sendable func conversations(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let userId = try Self.userId(context)
        let pageLimit = try request.integerParameter("limit", range: 1...500) ?? 100
        let before = try request.uri.queryParameters.get("before").map(ConversationCursor.init(parameter:))
        return try JSONBody.response(try await store.conversations(of: userId, before: before, limit: Int(pageLimit)))
    }

    /// `200 DeviceList`: the user's devices (`current` is false for each: the caller is no device).
    @Sendable func devices(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let userId = try Self.userId(context)
        let devices = try await store.devices(of: userId).map { record in
            DeviceInfo(deviceId: record.deviceId, deviceName: record.name, createdAt: record.createdAt, lastSeenAt: record.lastSeenAt, current: false)
        }
        return try JSONBody.response(DeviceList(devices: devices))
    }

    /// `204`: revoked as `DELETE /v1/devices/{deviceId}` revokes (its tokens answer 401, its streams end, its push
    /// registration is dropped); an unknown, revoked or malformed device `404`.
    @Sendable func revokeDevice(_ request: Request, context: ServiceRequestContext) async throws -> Response {
        let userId = try Self.userId(context)
        guard let deviceId = context.parameters.decoded("deviceId"), JWTClaimRules.isValidDeviceId(deviceId) else {
            throw PigeonError(.notFound, "no such device: a device id is 1-128 printable ASCII characters without spaces")
        }
        let device = DeviceIdentity(userId: userId, deviceId: deviceId)
        guard let revocation = try await store.revokeDevice(device, at: WallClock.nowMillis()) else {
            throw PigeonError(.notFound, "no device \(deviceId) among \(userId)'s devices")
        }
        fanout.deviceRevoked(revocation)
        logger.info("device revoked through the server API", metadata: ["userId": "\(userId)", "deviceId": "\(deviceId)"])
        return Response(status: .noContent)
    }

    // MARK: Parameters

    private static func conversationId(_ context: ServiceRequestContext) throws -> String {
        guard let id = context.parameters.decoded("id").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("the conversation's id must be a UUID")
        }
        return id
    }

    private static func userId(_ context: ServiceRequestContext) throws -> String {
        guard let userId = context.parameters.decoded("userId"), Validation.isValidUserId(userId) else {
            throw PigeonError.invalid("the path's userId is not valid (1-64 characters of [A-Za-z0-9._@-])")
        }
        return userId
    }
}
