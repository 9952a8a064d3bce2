import PigeonProtocol

extension ContractRoute {
    /// The operator's webhook routes (docs/API.md, "Webhooks").
    static let webhookAdmin: [ContractRoute] = [
        ContractRoute(
            method: .get, path: "/v1/admin/webhooks", operationId: "webhookOverview", tag: "admin", summary: "The webhook outbox's state",
            description: "The endpoint events go to, the types recorded, how many events are pending and dead, and when the oldest pending one was recorded.",
            availability: .adminToken, security: .adminToken,
            answers: [.json(200, "WebhookOverview", "The outbox's state.")],
            refusals: [.unauthorized("Not the admin token.")]),
        ContractRoute(
            method: .get, path: "/v1/admin/webhooks/dead", operationId: "deadWebhooks", tag: "admin", summary: "Dead webhook events, oldest first",
            description: "Events the endpoint did not answer 2xx within their retry window (24 hours), with their body and last error.",
            availability: .adminToken, security: .adminToken,
            parameters: [.query("limit", Schema.integer("1-1000, default 100.", minimum: 1, maximum: 1000), "How many at most.")],
            answers: [.json(200, "DeadWebhookList", "The dead webhook events.")],
            refusals: [.invalid("A bad limit."), .unauthorized("Not the admin token.")]),
        ContractRoute(
            method: .post, path: "/v1/admin/webhooks/{id}/replay", operationId: "replayWebhook", tag: "admin",
            summary: "Send a dead webhook event again",
            description: "It is pending again with the same id and body, after the events of its conversation recorded since, with a new retry window.",
            availability: .adminToken, security: .adminToken, parameters: [.path("id", ContractSchemas.uuid, "The event's id.")],
            answers: [.json(202, "WebhookReplayed", "Pending again.")],
            refusals: [.invalid("The id is not a UUID."), .unauthorized("Not the admin token."), .notFound("No dead webhook event with this id.")]),
    ]
}

extension ContractSchemas {
    static let webhookSchemas: [(String, JSONNode)] = [
        (
            "WebhookOverview",
            Schema.object(
                required: ["endpoint", "events", "pending", "dead", "oldestPendingAt", "serverTime"],
                [
                    ("endpoint", Schema.nullable(Schema.string("The URL events are POSTed to (no credentials or query); null without --webhook."))),
                    ("events", Schema.array(Schema.string(), "The event types recorded.")),
                    ("pending", Schema.integer("Events recorded and not yet delivered.", minimum: 0)),
                    ("dead", Schema.integer("Dead letters kept.", minimum: 0)),
                    ("oldestPendingAt", Schema.nullable(Schema.described(millis, "When the oldest pending event was recorded; null when none is."))),
                    ("serverTime", millis),
                ])
        ),
        (
            "DeadWebhookEvent",
            Schema.object(
                required: ["id", "type", "orderingKey", "createdAt", "deadAt", "attempts", "lastError", "body"],
                [
                    ("id", uuid), ("type", Schema.string("The event type (message.stored, reaction, ...).")),
                    ("orderingKey", Schema.string("The conversation's id, or user:<userId> for device events.")), ("createdAt", millis),
                    ("deadAt", millis), ("attempts", Schema.integer("Tries made.", minimum: 0)),
                    ("lastError", Schema.string("What the last try got.")), ("body", Schema.string("The exact request body sent.")),
                ])
        ),
        ("DeadWebhookList", Schema.object(required: ["deadWebhooks"], [("deadWebhooks", Schema.array(Schema.ref("DeadWebhookEvent"), "Oldest first."))])),
        ("WebhookReplayed", Schema.object(required: ["id", "state"], [("id", uuid), ("state", Schema.constant("pending"))])),
    ]
}
