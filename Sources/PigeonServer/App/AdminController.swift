import Hummingbird
import PigeonProtocol

/// `GET /v1/admin/dead-letters` and `POST /v1/admin/dead-letters/{serverId}/replay`, behind the admin token.
struct DeadLetterList: Codable, Sendable {
    var deadLetters: [DeadLetter]
}

extension PigeonCore {
    /// Dead-letter inspection and replay. Without an admin token configured the routes do not exist (404).
    func addAdminRoutes(to router: Router<PigeonRequestContext>) {
        guard let adminToken = configuration.adminToken.map(OperatorToken.init) else { return }
        @Sendable func authorize(_ request: Request) throws { try adminToken.authorize(request) }

        router.get("/v1/admin/dead-letters") { request, _ -> Response in
            try authorize(request)
            let limit = try Self.integerParameter(request.uri.queryParameters.get("limit"), name: "limit", range: 1...1000) ?? 100
            return try JSONBody.response(DeadLetterList(deadLetters: try await self.store.deadLetters(limit: Int(limit))))
        }

        router.post("/v1/admin/dead-letters/:serverId/replay") { request, context -> Response in
            try authorize(request)
            guard let serverId = context.parameters.get("serverId").flatMap(Validation.canonicalUUID) else {
                throw PigeonError.invalid("serverId must be a UUID")
            }
            guard let message = try await self.store.deadLetter(serverId: serverId) else {
                throw PigeonError(.notFound, "no dead letter with this serverId")
            }
            // Durable in the buffer first: a crash in between leaves a stale dead letter, never a lost message.
            try await self.buffer.requeue(message)
            try await self.store.removeDeadLetter(serverId: serverId)
            self.logger.notice("dead letter replayed", metadata: ["serverId": "\(serverId)"])
            return try JSONBody.response(
                SendMessageResponse(serverId: serverId, clientMessageId: message.clientMessageId, status: .queued, acceptedAt: message.acceptedAt),
                status: .accepted)
        }
    }
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
