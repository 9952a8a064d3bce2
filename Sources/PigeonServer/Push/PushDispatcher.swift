import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Wakes devices that have no stream open through a Matrix push gateway (API.md 1.1, "Push for devices that are not
/// connected").
///
/// Two loops, both driven by the store so that nothing owed lives only in memory:
/// - collect: after each local commit (or every poll interval, for the other nodes' commits), the messages stored
///   since the last collection become owed pushes, one per offline registered device, the newest message winning
///   (``PushStore/collectOwedPushes(limit:now:window:minInterval:isOnline:)``);
/// - send: due pushes are claimed under a lease, checked against presence once more (a device that came online
///   gets its messages on its stream), posted to the gateway, and their answer recorded: 200 is final (the pushkeys
///   it rejects are unregistered), a timeout, 5xx or 429 is retried with doubling waits for the retry window, any
///   other answer drops the push.
///
/// Accept, delivery and receipts never wait for any of it: the loops run beside the processor, a request to the
/// gateway holds no store connection, and a slow or dead gateway only makes pushes late.
///
/// The loops' waits (the poll interval, the pause between collections, the retries of recording an outcome, the
/// gauge's second) run on the injected clock. The times kept in the store (when a push is owed, due, leased, last
/// sent) are the wall clock's, shared with the other nodes; the gateway request's timeout is real time.
final class PushDispatcher: Service {
    private let store: any PushStore
    private let presence: any Presence
    private let configuration: PushConfiguration
    private let notifyURL: String
    private let metrics: PigeonMetrics
    private let nodeId: String
    private let logger: Logger
    private let clock: ElapsedClock
    private let collectWake: AsyncSignal
    private let sendWake: AsyncSignal
    /// Events read per collection.
    private let collectLimit = 2_000

    init(
        store: any PushStore, presence: any Presence, configuration: PushConfiguration, notifyURL: String, metrics: PigeonMetrics, nodeId: String,
        logger: Logger, clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.store = store
        self.presence = presence
        self.configuration = configuration
        self.notifyURL = notifyURL
        self.metrics = metrics
        self.nodeId = nodeId
        self.logger = logger
        let clock = ElapsedClock(clock)
        self.clock = clock
        self.collectWake = AsyncSignal(clock: clock)
        self.sendWake = AsyncSignal(clock: clock)
    }

    /// Something was committed on this node: collect soon.
    func committed() {
        collectWake.notify()
    }

    func run() async throws {
        var clientConfiguration = HTTPClient.Configuration()
        clientConfiguration.timeout.connect = .init(configuration.requestTimeout)
        clientConfiguration.timeout.read = .init(configuration.requestTimeout)
        clientConfiguration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = configuration.maxInFlight
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        do {
            try await store.releasePushClaims(node: nodeId)
        } catch {
            logger.warning("push: could not release this node's old claims; they are sent when their lease ends", metadata: ["error": "\(error)"])
        }
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.collectLoop() }
                group.addTask { await self.sendLoop(http) }
                group.addTask { await self.gaugeLoop() }
                await group.next()
                group.cancelAll()
            }
        }
        try? await http.shutdown()
    }

    // MARK: Collect

    private func collectLoop() async {
        let window = configuration.retryWindow.milliseconds
        let minInterval = configuration.minInterval.milliseconds
        let presence = presence
        while !Task.isCancelled {
            do {
                while let collection = try await store.collectOwedPushes(
                    limit: collectLimit, now: WallClock.nowMillis(), window: window, minInterval: minInterval,
                    isOnline: { device in presence.onlineDevices(of: [device.userId]).contains(device) })
                {
                    if collection.owed > 0 { sendWake.notify() }
                    if !collection.more { break }
                }
            } catch {
                logger.warning("push: collecting owed pushes failed; trying again", metadata: ["error": "\(error)"])
            }
            // At most ten collections a second under load: each is one small write beside the messages' own, and a
            // push goes out at most once a second per device anyway.
            try? await clock.sleep(for: .milliseconds(100))
            await collectWake.wait(timeout: configuration.pollInterval)
        }
    }

    // MARK: Send

    private func sendLoop(_ http: HTTPClient) async {
        await LeasedDelivery.run(
            limit: configuration.maxInFlight, wake: sendWake, pollInterval: configuration.pollInterval, logger: logger,
            failure: "push: claiming due pushes failed; trying again",
            claim: { free in
                let now = WallClock.nowMillis()
                let leaseUntil = now + configuration.requestTimeout.milliseconds * 2 + 5_000
                return try await store.claimDuePushes(now: now, limit: free, leaseUntil: leaseUntil, node: nodeId, includeBody: configuration.includeBody)
            },
            deliver: { push in await self.deliver(push, http: http) })
    }

    /// Sends one claimed push and records what became of it.
    private func deliver(_ push: ClaimedPush, http: HTTPClient) async {
        let outcome: PushOutcome
        if presence.onlineDevices(of: [push.device.userId]).contains(push.device) {
            outcome = .dropped  // its stream delivers the message
        } else {
            outcome = await post(push, http: http)
        }
        let now = WallClock.nowMillis()
        for attempt in 1...3 {
            do {
                try await store.finishPush(push, outcome: outcome, now: now, minInterval: configuration.minInterval.milliseconds, node: nodeId)
                break
            } catch {
                logger.warning(
                    "push: recording a push's outcome failed", metadata: ["error": "\(error)", "attempt": "\(attempt)", "deviceId": "\(push.device.deviceId)"])
                try? await clock.sleep(for: .milliseconds(100 * attempt))
            }
        }
    }

    private func post(_ push: ClaimedPush, http: HTTPClient) async -> PushOutcome {
        var request = HTTPClientRequest(url: notifyURL)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "pigeon-server")
        let problem: String
        do {
            let body = try JSONEncoder().encode(PushPayload.request(for: push))
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await http.execute(request, timeout: .init(configuration.requestTimeout))
            let answer = try await response.body.collect(upTo: 1 << 20)
            switch response.status.code {
            case 200..<300:
                let rejected = (try? JSONDecoder().decode(PushPayload.Answer.self, from: Data(answer.readableBytesView)))?.rejected ?? []
                if rejected.contains(push.pushkey) {
                    metrics.pushRejected.increment()
                    logger.notice(
                        "push: the gateway rejected a pushkey; its registration is dropped",
                        metadata: [
                            "userId": "\(push.device.userId)", "deviceId": "\(push.device.deviceId)", "appId": "\(push.appId)",
                            "pushkey": "\(push.pushkey.prefix(16))…",
                        ])
                    return .rejected
                }
                metrics.pushSent.increment()
                return .sent
            case 429, 500..<600:
                problem = "the gateway answered \(response.status.code)"
            default:
                metrics.pushFailed.increment()
                logger.warning(
                    "push: the gateway refused a notification; not retried",
                    metadata: [
                        "status": "\(response.status.code)", "answer": "\(String(buffer: answer).prefix(200))",
                        "deviceId": "\(push.device.deviceId)",
                    ])
                return .dropped
            }
        } catch {
            problem = "\(error)"
        }
        let now = WallClock.nowMillis()
        if now - push.owedSince >= configuration.retryWindow.milliseconds {
            metrics.pushFailed.increment()
            logger.warning(
                "push: given up after the retry window",
                metadata: ["problem": "\(problem)", "attempts": "\(push.attempts + 1)", "deviceId": "\(push.device.deviceId)"])
            return .dropped
        }
        let delay = retryDelay(afterAttempts: push.attempts + 1)
        logger.debug("push: will retry", metadata: ["problem": "\(problem)", "inMs": "\(delay)", "deviceId": "\(push.device.deviceId)"])
        return .retry(at: now + delay)
    }

    /// The wait after `attempts` failed tries: doubling from the first delay up to the longest, ±20 %.
    func retryDelay(afterAttempts attempts: Int) -> Int64 {
        LeasedDelivery.retryDelay(afterAttempts: attempts, first: configuration.firstRetryDelay, longest: configuration.maxRetryDelay)
    }

    // MARK: Gauge

    private func gaugeLoop() async {
        while !Task.isCancelled {
            if let pending = try? await store.pendingPushCount() { metrics.pushPending.set(Int64(pending)) }
            try? await clock.sleep(for: .seconds(1))
        }
    }
}
