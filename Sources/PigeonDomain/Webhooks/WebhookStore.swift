import PigeonProtocol

/// The webhook outbox as the dispatcher sees it (API.md 1.2, "Webhooks"). Both stores implement it over the table
/// their own transactions record events into (``WebhookOutbox``), so every event is durable from the commit of what
/// it reports until the app's backend answered it `2xx` or it became a dead letter.
///
/// Delivery contract:
/// - **In order per key.** Only the head of an ordering key (its oldest pending event) is ever handed out: the next
///   one of a conversation is claimable only once the one before was completed or dead-lettered. Events of one key are
///   recorded in the order of the commits that made them (those commits are serialised by the store's locks).
/// - **At least once, any node.** ``claimWebhookEvents(now:limit:leaseUntil:node:)`` hands a head to one node under a
///   lease; a node that dies with it loses nothing: after `leaseUntil` any node claims it again. An event is removed
///   only by ``completeWebhookEvent(_:)``, so an answer lost with its node means a second delivery, never none.
/// - **Dead letters** keep their id and body; ``replayWebhookEvent(id:now:)`` makes one pending again, behind the
///   events of its key recorded since.
public protocol WebhookStore: Sendable {
    /// Claims at most `limit` heads that are due (`nextAttemptAt <= now`) and not leased, for `node` until `leaseUntil`.
    func claimWebhookEvents(now: Int64, limit: Int, leaseUntil: Int64, node: String) async throws -> [WebhookDelivery]
    /// The app's backend answered `2xx`: the event is gone, its key's next one becomes the head.
    func completeWebhookEvent(_ event: WebhookDelivery) async throws
    /// A try failed: tried again at `retryAt` (ms since the epoch; the key's later events wait behind it), with
    /// `error` kept. Only while `node` still holds the claim.
    func retryWebhookEvent(_ event: WebhookDelivery, error: String, retryAt: Int64, node: String) async throws
    /// A try failed past the retry window: the event becomes a dead letter and its key's next one the head.
    func deadLetterWebhookEvent(_ event: WebhookDelivery, error: String, at now: Int64) async throws
    /// Gives up `node`'s claims (a restarted node sends what it had claimed at once, not after its lease).
    func releaseWebhookClaims(node: String) async throws
    /// The dead letters, oldest first.
    func deadWebhookEvents(limit: Int) async throws -> [DeadWebhookEvent]
    /// Makes the dead letter `id` pending again, due now, with a new retry window from `now`; `false` when no dead
    /// letter has this id.
    func replayWebhookEvent(id: String, now: Int64) async throws -> Bool
    /// What is waiting: pending and dead events, and when the oldest pending one was recorded.
    func webhookStats() async throws -> WebhookStats
}

/// A claimed event: what one try sends.
public struct WebhookDelivery: Sendable, Equatable {
    /// Its place in the outbox (the order of its key).
    public var position: Int64
    public var id: String
    public var type: String
    public var orderingKey: String
    public var createdAt: Int64
    /// The exact request body.
    public var body: String
    /// Failed tries so far.
    public var attempts: Int
    /// Where its retry window starts: its recording, or its latest replay.
    public var retryFrom: Int64

    public init(position: Int64, id: String, type: String, orderingKey: String, createdAt: Int64, body: String, attempts: Int, retryFrom: Int64) {
        self.position = position
        self.id = id
        self.type = type
        self.orderingKey = orderingKey
        self.createdAt = createdAt
        self.body = body
        self.attempts = attempts
        self.retryFrom = retryFrom
    }
}

/// A webhook event given up after its retry window (`GET /v1/admin/webhooks/dead`).
public struct DeadWebhookEvent: Codable, Sendable, Equatable {
    public var id: String
    public var type: String
    /// The conversation id, or `user:<userId>` for device events.
    public var orderingKey: String
    public var createdAt: Int64
    public var deadAt: Int64
    public var attempts: Int
    /// What the last try got (a status, a timeout, a connection error).
    public var lastError: String
    /// The request body it was sent with.
    public var body: String

    public init(id: String, type: String, orderingKey: String, createdAt: Int64, deadAt: Int64, attempts: Int, lastError: String, body: String) {
        self.id = id
        self.type = type
        self.orderingKey = orderingKey
        self.createdAt = createdAt
        self.deadAt = deadAt
        self.attempts = attempts
        self.lastError = lastError
        self.body = body
    }
}

/// The outbox's state (`pigeon_webhook_*` gauges, the operator's page).
public struct WebhookStats: Codable, Sendable, Equatable {
    public var pending: Int
    public var dead: Int
    /// When the oldest pending event was recorded (ms since the epoch), nil when none is pending.
    public var oldestPendingAt: Int64?

    public init(pending: Int, dead: Int, oldestPendingAt: Int64?) {
        self.pending = pending
        self.dead = dead
        self.oldestPendingAt = oldestPendingAt
    }
}
