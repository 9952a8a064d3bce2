import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Sends the events the store recorded in its webhook outbox to the app's backend (API.md 1.2, "Webhooks").
///
/// Everything it works from is in the store (``WebhookStore``), so that nothing owed lives only in memory: it claims
/// the due heads of their keys (one conversation's events one at a time, in order) under a lease, POSTs each, signed
/// (``RequestSignature``), and records the answer: `2xx` within the timeout delivers; anything else is tried again
/// with the same id and body after a doubling wait with jitter, until the retry window (24 h) from the event's
/// recording has passed: then it is a dead letter. A node killed with claimed events loses nothing: they are claimed
/// again, by any node, once their lease ends.
///
/// Accept, delivery and receipts never wait for it: the stores only insert a row in the transaction they run anyway,
/// and a request to the endpoint holds no store connection. At most ``maxInFlight`` requests are in flight, each of a
/// different key: a slow conversation delays only its own later events.
///
/// It is woken after each local commit and polls for the other nodes' commits and for retries coming due; its waits
/// run on the injected clock, the times kept in the store (due, leased) are the wall clock's, shared by the nodes.
final class WebhookDispatcher: Service {
    private let store: any WebhookStore
    private let url: String
    private let secret: String
    private let configuration: AppBackendConfiguration
    private let metrics: WebhookMetrics
    private let nodeId: String
    private let logger: Logger
    private let clock: ElapsedClock
    private let wake: AsyncSignal
    private let pollInterval: Duration
    /// Requests in flight at once (each to a different key).
    let maxInFlight: Int

    init(
        store: any WebhookStore, url: String, secret: String, configuration: AppBackendConfiguration, metrics: WebhookMetrics, nodeId: String,
        logger: Logger, clock: any Clock<Duration> = ContinuousClock(), pollInterval: Duration = .milliseconds(250), maxInFlight: Int = 16
    ) {
        self.store = store
        self.url = url
        self.secret = secret
        self.configuration = configuration
        self.metrics = metrics
        self.nodeId = nodeId
        self.logger = logger
        let clock = ElapsedClock(clock)
        self.clock = clock
        self.wake = AsyncSignal(clock: clock)
        self.pollInterval = pollInterval
        self.maxInFlight = maxInFlight
    }

    /// Something was committed on this node: look for events soon.
    func committed() {
        wake.notify()
    }

    func run() async throws {
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.timeout.connect = .init(configuration.webhookTimeout)
        clientConfiguration.timeout.read = .init(configuration.webhookTimeout)
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = maxInFlight
        clientConfiguration.redirectConfiguration = .disallow
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        do {
            try await store.releaseWebhookClaims(node: nodeId)
        } catch {
            logger.warning("webhooks: could not release this node's old claims; they are sent when their lease ends", metadata: ["error": "\(error)"])
        }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.sendLoop(http) }
                group.addTask { await self.gaugeLoop() }
                await group.next()
                group.cancelAll()
            }
        }
        try? await http.shutdown()
    }

    // MARK: Send

    private func sendLoop(_ http: HTTPClient) async {
        await LeasedDelivery.run(
            limit: maxInFlight, wake: wake, pollInterval: pollInterval, logger: logger, failure: "webhooks: claiming due events failed; trying again",
            claim: { free in
                let now = WallClock.nowMillis()
                // Past the request's timeout with room to record the answer: a live node never loses its claim.
                let leaseUntil = now + configuration.webhookTimeout.milliseconds * 2 + 5_000
                return try await store.claimWebhookEvents(now: now, limit: free, leaseUntil: leaseUntil, node: nodeId)
            },
            deliver: { event in await self.deliver(event, http: http) })
    }

    /// Sends one claimed event and records what became of it.
    private func deliver(_ event: WebhookDelivery, http: HTTPClient) async {
        let problem = await post(event, http: http)
        // Shutting down: the try is not recorded; the claim is released at the next start (or ends with its lease).
        if Task.isCancelled { return }
        let now = WallClock.nowMillis()
        for attempt in 1...3 {
            do {
                if let problem {
                    if now - event.retryFrom >= configuration.webhookRetryWindow.milliseconds {
                        try await store.deadLetterWebhookEvent(event, error: problem, at: now)
                        metrics.dead.increment()
                        logger.warning(
                            "webhooks: an event is a dead letter after its retry window",
                            metadata: ["id": "\(event.id)", "type": "\(event.type)", "attempts": "\(event.attempts + 1)", "problem": "\(problem)"])
                    } else {
                        let delay = retryDelay(afterAttempts: event.attempts + 1)
                        try await store.retryWebhookEvent(event, error: problem, retryAt: now + delay, node: nodeId)
                        metrics.retried.increment()
                        logger.debug("webhooks: will retry", metadata: ["id": "\(event.id)", "inMs": "\(delay)", "problem": "\(problem)"])
                    }
                } else {
                    try await store.completeWebhookEvent(event)
                    metrics.delivered.increment()
                }
                return
            } catch {
                // Not recorded: the lease ends and the event is tried again (at least once).
                logger.warning("webhooks: recording a try's outcome failed", metadata: ["error": "\(error)", "attempt": "\(attempt)", "id": "\(event.id)"])
                try? await clock.sleep(for: .milliseconds(100 * attempt))
            }
        }
    }

    /// POSTs the event; nil when the endpoint answered `2xx` within the timeout, else what went wrong.
    private func post(_ event: WebhookDelivery, http: HTTPClient) async -> String? {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "pigeon-server")
        request.headers.add(name: "Pigeon-Event-Id", value: event.id)
        request.headers.add(
            name: RequestSignature.headerName,
            value: RequestSignature.header(secret: secret, timestamp: WallClock.nowMillis(), body: Data(event.body.utf8)))
        request.body = .bytes(ByteBuffer(string: event.body))
        do {
            let response = try await http.execute(request, timeout: .init(configuration.webhookTimeout))
            // The answer's body is read (and dropped) so the connection can be reused; it is not the app's to say more.
            _ = try await response.body.collect(upTo: 64 * 1024)
            if (200..<300).contains(response.status.code) { return nil }
            return "the endpoint answered \(response.status.code)"
        } catch {
            return "\(error)"
        }
    }

    /// The wait after `attempts` failed tries: doubling from the first delay up to the longest, ±20 %.
    func retryDelay(afterAttempts attempts: Int) -> Int64 {
        LeasedDelivery.retryDelay(afterAttempts: attempts, first: configuration.webhookFirstRetryDelay, longest: configuration.webhookMaxRetryDelay)
    }

    // MARK: Gauges

    private func gaugeLoop() async {
        while !Task.isCancelled {
            if let stats = try? await store.webhookStats() {
                metrics.pending.set(Int64(stats.pending))
                metrics.deadLetters.set(Int64(stats.dead))
                let age = stats.oldestPendingAt.map { max(0, WallClock.nowMillis() - $0) } ?? 0
                metrics.oldestPendingSeconds.set(Double(age) / 1000)
            }
            try? await clock.sleep(for: .seconds(1))
        }
    }
}
