import Hummingbird
import PigeonDomain
import PigeonProtocol

/// `PUT`/`DELETE /v1/blocks/{userId}` and `GET /v1/blocks` (API.md 1.2, "Consent and blocking"): the caller's user's
/// blocks. The block itself is never announced to the blocked user; what it hides is decided where messages are
/// written (``BlockStore``).
struct BlockController: Sendable {
    let store: any BlockStore
    let abuse: AbuseGuard

    func addRoutes(to group: RouterGroup<DeviceRequestContext>) {
        group.get("/blocks", use: list)
        group.put("/blocks/:userId", use: block)
        group.delete("/blocks/:userId", use: unblock)
    }

    @Sendable func list(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        try JSONBody.response(BlockList(blocks: try await store.blocks(of: context.device.userId)))
    }

    /// `204`, also when the block exists already (it keeps its first time).
    @Sendable func block(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let blocked = try target(context)
        try abuse.checkStorage(of: context.device.userId)
        try await store.block(blocked, by: context.device.userId, at: WallClock.nowMillis())
        abuse.chargeStorage(of: context.device.userId, bytes: abuse.storageCost(bytes: 128, members: 1))
        return Response(status: .noContent)
    }

    /// `204`, also when there was no block.
    @Sendable func unblock(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        try await store.unblock(try target(context), by: context.device.userId)
        return Response(status: .noContent)
    }

    /// The path's user: a valid userId other than the caller's (`400` otherwise, nothing changed).
    private func target(_ context: DeviceRequestContext) throws -> String {
        guard let userId = context.parameters.decoded("userId"), Validation.isValidUserId(userId) else {
            throw PigeonError.invalid("the path's userId is not valid (1-64 characters of [A-Za-z0-9._@-])")
        }
        guard userId != context.device.userId else { throw PigeonError.invalid("a user cannot block itself") }
        return userId
    }
}
