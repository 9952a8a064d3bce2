import Hummingbird
import Logging
import PigeonDomain
import PigeonProtocol

/// The operator's routes behind the admin token (``OperatorTokenMiddleware``): `GET /v1/admin/dead-letters`,
/// `POST /v1/admin/dead-letters/{serverId}/replay`, `GET /v1/admin/stats` and `GET /v1/admin/conversations/{id}`.
/// Without an admin token configured the routes do not exist (404), nor does the page that calls them (`GET /admin`).
struct AdminController: Sendable {
    let store: any ConversationStore & DeviceStore & DeadLetterStore
    /// Attachment storage: bytes, count, orphans.
    let attachments: any AttachmentStore
    let buffer: any AcceptPath
    let hub: StreamHub
    let fanout: any Presence
    let metrics: PigeonMetrics
    let sampler: StatisticsSampler
    /// This node's id, and what the shared backends know of the deployment's nodes.
    let nodeId: String
    let nodeRosters: [any NodeRoster]
    /// When this node started (milliseconds since the epoch).
    let startedAt: Int64
    let logger: Logger

    func addRoutes(to group: RouterGroup<PigeonRequestContext>) {
        group.get("/dead-letters", use: deadLetters)
        group.post("/dead-letters/:serverId/replay", use: replay)
        group.get("/stats", use: stats)
        group.get("/conversations/:id", use: conversation)
    }

    /// This node's counters, rates, buffer depth, open streams, latency quantiles and dead letters, and the nodes of
    /// the deployment, from the server's own state. A backend that does not answer leaves its part null (dead
    /// letters) or out (its nodes): the page is most needed when something is down.
    @Sendable func stats(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        let since = try request.integerParameter("since", range: 0...Int64.max)
        let counts = metrics.counts
        let totals = AdminStats.Totals(
            accepted: counts.accepted.value, stored: counts.stored.value, delivered: counts.delivered.value,
            deadLettered: counts.deadLettered.value, retried: counts.retried.value, rejected: counts.rejected.value)
        // One read of the samples: the rates are the last one's, also when a tick comes while the rest is gathered.
        let allSamples = sampler.samples(since: nil)
        let latest = allSamples.last
        let samples = since.map { since in Array(allSamples.drop { $0.at <= since }) } ?? allSamples
        let deadLetters = try? await store.deadLetterCount()
        let attachmentStats = try? await attachments.attachmentStats()
        let nodes = await knownNodes()
        let now = WallClock.nowMillis()
        return try JSONBody.response(
            AdminStats(
                serverTime: now, nodeId: nodeId, startedAt: startedAt, totals: totals,
                rates: AdminStats.Rates(
                    accepted: latest?.accepted ?? 0, stored: latest?.stored ?? 0, delivered: latest?.delivered ?? 0,
                    deadLettered: latest?.deadLettered ?? 0),
                bufferDepth: buffer.depth, openStreams: OpenStreams(hub.openStreams), deadLetters: deadLetters,
                attachments: attachmentStats, nodes: nodes, latency: sampler.recentLatency(), sampleIntervalSeconds: 1, samples: samples))
    }

    /// This node and every node a shared backend knows, each with its latest heartbeat (the newest any backend saw);
    /// this node counts as heart-beating now when no backend lists it (the embedded default).
    private func knownNodes() async -> [AdminStats.Node] {
        var heartbeats: [String: Int64] = [:]
        for roster in nodeRosters {
            guard let known = try? await roster.nodeHeartbeats() else { continue }
            heartbeats.merge(known, uniquingKeysWith: max)
        }
        if heartbeats[nodeId] == nil { heartbeats[nodeId] = WallClock.nowMillis() }
        return heartbeats.sorted { $0.key < $1.key }.map { AdminStats.Node(nodeId: $0.key, lastHeartbeatAt: $0.value, thisNode: $0.key == nodeId) }
    }

    /// The delivery state of one conversation: its last seq, each member's watermarks and devices (online on any
    /// node, as this node knows), and the members whose delivered watermark is below the last seq.
    @Sendable func conversation(_ request: Request, context: PigeonRequestContext) async throws -> Response {
        guard let id = context.parameters.get("id").flatMap(Validation.canonicalUUID) else {
            throw PigeonError.invalid("conversation id must be a UUID")
        }
        guard let conversation = try await store.conversation(id: id) else { throw PigeonError.conversationNotFound }
        let online = fanout.onlineDevices(of: conversation.members.map(\.userId))
        var members: [ConversationDelivery.Member] = []
        for member in conversation.members {
            let devices = try await store.devices(of: member.userId).map { device in
                ConversationDelivery.Device(
                    deviceId: device.deviceId, name: device.name, lastSeenAt: device.lastSeenAt,
                    online: online.contains(DeviceIdentity(userId: member.userId, deviceId: device.deviceId)))
            }
            members.append(
                ConversationDelivery.Member(
                    userId: member.userId, role: member.role, joinedSeq: member.joinedSeq, deliveredSeq: member.deliveredSeq,
                    readSeq: member.readSeq, undelivered: max(0, conversation.lastSeq - member.deliveredSeq),
                    behind: member.deliveredSeq < conversation.lastSeq, devices: devices))
        }
        return try JSONBody.response(
            ConversationDelivery(
                conversationId: conversation.id, kind: conversation.kind, name: conversation.name, createdAt: conversation.createdAt,
                updatedAt: conversation.updatedAt, lastSeq: conversation.lastSeq, members: members,
                behind: members.filter(\.behind).map(\.userId), serverTime: WallClock.nowMillis()))
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

/// The answer of `GET /v1/admin/stats` (docs/API.md, "The operator's page").
struct AdminStats: Codable, Sendable {
    /// Messages this node counted since it started.
    struct Totals: Codable, Sendable {
        var accepted: Int
        var stored: Int
        /// Delivered receipts that moved a member's delivered watermark onto another member's message.
        var delivered: Int
        var deadLettered: Int
        var retried: Int
        var rejected: Int
    }

    /// The per-second rates of the latest sample.
    struct Rates: Codable, Sendable {
        var accepted: Double
        var stored: Double
        var delivered: Double
        var deadLettered: Double
    }

    struct Node: Codable, Sendable {
        var nodeId: String
        var lastHeartbeatAt: Int64
        var thisNode: Bool
    }

    var serverTime: Int64
    var nodeId: String
    var startedAt: Int64
    var totals: Totals
    var rates: Rates
    var bufferDepth: Int
    var openStreams: OpenStreams
    /// Null when the store did not answer.
    @NullEncoded var deadLetters: Int? = nil
    /// Attachment storage (uploads kept, the bytes they take, those no message carries); null when the store did not
    /// answer.
    @NullEncoded var attachments: AttachmentStats? = nil
    var nodes: [Node]
    var latency: RecentLatency
    var sampleIntervalSeconds: Int
    var samples: [StatisticsSample]
}

/// The answer of `GET /v1/admin/conversations/{id}`.
struct ConversationDelivery: Codable, Sendable {
    struct Device: Codable, Sendable {
        var deviceId: String
        @NullEncoded var name: String? = nil
        var lastSeenAt: Int64
        /// A stream (WebSocket or SSE) of it is open on a node, as this node knows.
        var online: Bool
    }

    struct Member: Codable, Sendable {
        var userId: String
        var role: MemberRole
        var joinedSeq: Int64
        var deliveredSeq: Int64
        var readSeq: Int64
        /// `lastSeq - deliveredSeq`: stored messages above the member's delivered watermark.
        var undelivered: Int64
        /// Its delivered watermark is below the conversation's last seq.
        var behind: Bool
        var devices: [Device]
    }

    var conversationId: String
    var kind: ConversationKind
    @NullEncoded var name: String? = nil
    var createdAt: Int64
    var updatedAt: Int64
    var lastSeq: Int64
    var members: [Member]
    /// The user ids of the members that are behind.
    var behind: [String]
    var serverTime: Int64
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
