import Hummingbird
import Logging
import PigeonDomain
import PigeonProtocol

/// The operator's webhook routes, behind the admin token beside ``AdminController``'s: `GET /v1/admin/webhooks`
/// (the endpoint and the outbox's state), `GET /v1/admin/webhooks/dead` (the dead letters) and
/// `POST /v1/admin/webhooks/{id}/replay` (a dead letter sent again, same id and body).
struct WebhookAdminController: Sendable {
    let store: any WebhookStore
    let dispatcher: WebhookDispatcher?
    let configuration: AppBackendConfiguration
    let logger: Logger

    func addRoutes(to group: RouterGroup<PigeonRequestContext>) {
        group.get("/webhooks", use: overview)
        group.get("/webhooks/dead", use: dead)
        group.post("/webhooks/:id/replay", use: replay)
    }

    @Sendable func overview(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        let stats = try await store.webhookStats()
        return try JSONBody.response(
            WebhookOverview(
                endpoint: configuration.webhookURL.map(WebhookMetrics.label), events: configuration.enabledWebhookEvents.sorted(),
                pending: stats.pending, dead: stats.dead, oldestPendingAt: stats.oldestPendingAt, serverTime: WallClock.nowMillis()))
    }

    @Sendable func dead(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        let limit = try request.integerParameter("limit", range: 1...1000) ?? 100
        return try JSONBody.response(DeadWebhookList(deadWebhooks: try await store.deadWebhookEvents(limit: Int(limit))))
    }

    @Sendable func replay(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        guard let id = context.parameters.decoded("id").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("the webhook event id must be a UUID")
        }
        guard try await store.replayWebhookEvent(id: id, now: WallClock.nowMillis()) else {
            throw PigeonError(.notFound, "no dead webhook event with this id")
        }
        dispatcher?.committed()
        logger.notice("dead webhook event replayed", metadata: ["id": "\(id)"])
        return try JSONBody.response(WebhookReplayed(id: id, state: "pending"), status: .accepted)
    }
}

/// The answer of `GET /v1/admin/webhooks`.
struct WebhookOverview: Codable, Sendable {
    /// The endpoint events are sent to (without credentials or query), null without `--webhook`.
    @NullEncoded var endpoint: String? = nil
    /// The event types recorded.
    var events: [String]
    var pending: Int
    var dead: Int
    /// When the oldest pending event was recorded; null when none is pending.
    @NullEncoded var oldestPendingAt: Int64? = nil
    var serverTime: Int64
}

/// The answer of `GET /v1/admin/webhooks/dead`.
struct DeadWebhookList: Codable, Sendable {
    var deadWebhooks: [DeadWebhookEvent]
}

/// The answer of `POST /v1/admin/webhooks/{id}/replay`.
struct WebhookReplayed: Codable, Sendable {
    var id: String
    var state: String
}
