import Hummingbird
import Logging
import PigeonProtocol

/// `GET /v1/admin/dead-letters` and `POST /v1/admin/dead-letters/{serverId}/replay`, behind the admin token
/// (``OperatorTokenMiddleware``). Without an admin token configured the routes do not exist (404).
struct AdminController: Sendable {
    let store: any MessageStore
    let buffer: any IngestBuffer
    let logger: Logger

    func addRoutes(to group: RouterGroup<PigeonRequestContext>) {
        group.get("/dead-letters", use: deadLetters)
        group.post("/dead-letters/:serverId/replay", use: replay)
    }

    @Sendable func deadLetters(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        let limit = try request.integerParameter("limit", range: 1...1000) ?? 100
        return try JSONBody.response(DeadLetterList(deadLetters: try await store.deadLetters(limit: Int(limit))))
    }

    @Sendable func replay(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        guard let serverId = context.parameters.decoded("serverId").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("serverId must be a UUID")
        }
        guard let message = try await store.deadLetter(serverId: serverId) else {
            throw PigeonError(.notFound, "no dead letter with this serverId")
        }
        // Durable in the buffer first: a crash in between leaves a stale dead letter, never a lost message.
        try await buffer.requeue(message)
        try await store.removeDeadLetter(serverId: serverId)
        logger.notice("dead letter replayed", metadata: ["serverId": "\(serverId)"])
        return try JSONBody.response(
            SendMessageResponse(serverId: serverId, clientMessageId: message.clientMessageId, status: .queued, acceptedAt: message.acceptedAt),
            status: .accepted)
    }
}

/// The answer of `GET /v1/admin/dead-letters`.
struct DeadLetterList: Codable, Sendable {
    var deadLetters: [DeadLetter]
}

/// A fixed bearer token of an operator route (admin, metrics), compared by hash so its length and prefix leak
/// nothing through timing.
struct OperatorToken: Sendable {
    private let hash: String

    init(_ token: String) { self.hash = Authenticator.hash(token) }

    /// Throws `401 unauthorized` unless `request` carries `Authorization: Bearer <the token>`.
    func authorize(_ request: Request) throws {
        let token = try Authenticator.token(authorization: request.headers[.authorization], queryToken: nil, allowQuery: false)
        guard Authenticator.hash(token) == hash else { throw PigeonError.unauthorized }
    }
}

/// Answers `401 unauthorized` before the route unless the request carries the operator's token.
struct OperatorTokenMiddleware: RouterMiddleware {
    typealias Context = PigeonRequestContext
    let token: OperatorToken

    func handle(_ request: Request, context: PigeonRequestContext, next: (Request, PigeonRequestContext) async throws -> Response) async throws -> Response {
        try token.authorize(request)
        return try await next(request, context)
    }
}
