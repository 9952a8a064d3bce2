import AsyncHTTPClient
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol
import Prometheus
import ServiceLifecycle

/// The app's before-send hook (API.md 1.2, `--before-send-hook`): before a send or an edit is made durable, the accept
/// path asks the app's backend whether to allow, reject or rewrite it.
///
/// One signed POST (``RequestSignature``, `--webhook-secret`) per send or edit, answered within
/// `--before-send-timeout-ms` (default 500 ms), through one keep-alive connection pool with at most
/// ``AppBackendConfiguration/beforeSendMaxInFlight`` calls in flight; a call past that bound is not queued, it fails at
/// once. A user may hold a sixteenth of them and a device a thirty-second (16 and 8 of the default 256): past its share
/// a send or edit is refused `429 rate_limited` before any call, so that one user's flood never fills the pool and
/// never decides whether other users' messages are checked (under `allow`, unchecked; under `reject`, refused). A timeout, a non-2xx answer, an answer that is not one of the three actions, a replacement body that a send
/// could not carry, or a full pool is a *failure*, and `--before-send-on-failure` decides: `allow` (the message goes on
/// unchanged) or `reject` (`403 rejected`, saying the check failed).
///
/// The hook may be asked more than once for one clientMessageId (a resend asks again); an answer never overrides the
/// accept path's de-duplication: a resend of a message already accepted is answered with the original.
///
/// As a `Service` it owns the HTTP client: made at the first call, shut down when the server stops (a call after
/// that is a failure).
final class BeforeSendHook: Service, Sendable {
    /// What the hook decided for one message.
    enum Verdict: Sendable, Equatable {
        case allow
        /// Store it with this body instead.
        case replace(String)
    }

    private enum ClientState {
        case idle
        case running(HTTPClient)
        case shutDown
    }

    private let url: String
    private let secret: String
    private let timeout: Duration
    private let onFailure: AppBackendConfiguration.HookFailurePolicy
    private let maxInFlight: Int
    private let maxBodyBytes: Int
    private let metrics: BeforeSendHookMetrics
    private let logger: Logger
    private let client = NIOLockedValueBox(ClientState.idle)
    /// Calls in flight: in all, per user and per device.
    private let inFlight = NIOLockedValueBox(InFlight())
    /// A user's share of the calls in flight, and a device's: one user cannot fill the pool, so it never decides
    /// whether others' messages are checked.
    let userShare: Int
    let deviceShare: Int

    private struct InFlight {
        var total = 0
        var perUser: [String: Int] = [:]
        var perDevice: [String: Int] = [:]
    }
    /// When a failure was last logged (ms) and how many were not logged since: an unreachable hook fails every send,
    /// and the log says so every 10 s, not every send.
    private let failureLog = NIOLockedValueBox((lastAt: Int64(0), suppressed: 0))

    /// `nil` when no hook is configured.
    init?(configuration: ServerConfiguration, metrics: PigeonMetrics, logger: Logger) {
        let app = configuration.appBackend
        guard let url = app.beforeSendHookURL, let secret = app.webhookSecret else { return nil }
        self.url = url
        self.secret = secret
        self.timeout = app.beforeSendTimeout
        self.onFailure = app.beforeSendOnFailure
        self.maxInFlight = app.beforeSendMaxInFlight
        self.userShare = max(1, app.beforeSendMaxInFlight / 16)
        self.deviceShare = max(1, app.beforeSendMaxInFlight / 32)
        self.maxBodyBytes = configuration.maxBodyBytes
        self.metrics = BeforeSendHookMetrics(registry: metrics.registry)
        self.logger = logger
    }

    func run() async throws {
        try? await gracefulShutdown()
        let running = client.withLockedValue { state -> HTTPClient? in
            defer { state = .shutDown }
            if case .running(let http) = state { return http }
            return nil
        }
        try? await running?.shutdown()
    }

    /// Asks the hook about `message` (for an edit: `edit` names the target and the new text, which is what the hook
    /// sees as the body). Throws `403 rejected` when the hook rejects it, or when the call failed and the policy is
    /// `reject`; `429 rate_limited` (no call, no failure) when the sender's user or device has its share of the calls in
    /// flight already.
    func check(_ message: BufferedMessage, edit: (serverId: String, text: String)?) async throws -> Verdict {
        let user = message.senderId
        let device = message.senderId + "\u{0}" + message.senderDeviceId
        let admitted = inFlight.withLockedValue { state -> PigeonError? in
            if state.perUser[user, default: 0] >= userShare {
                return PigeonError(
                    .rateLimited, "this user has \(userShare) messages waiting for the app's check already; retry shortly", retryAfter: 1)
            }
            if state.perDevice[device, default: 0] >= deviceShare {
                return PigeonError(
                    .rateLimited, "this device has \(deviceShare) messages waiting for the app's check already; retry shortly", retryAfter: 1)
            }
            state.perUser[user, default: 0] += 1
            state.perDevice[device, default: 0] += 1
            return nil
        }
        if let admitted {
            metrics.limited.increment()
            throw admitted
        }
        defer {
            inFlight.withLockedValue { state in
                state.perUser[user, default: 1] -= 1
                if state.perUser[user] == 0 { state.perUser[user] = nil }
                state.perDevice[device, default: 1] -= 1
                if state.perDevice[device] == 0 { state.perDevice[device] = nil }
            }
        }
        let started = ContinuousClock.now
        let outcome = await ask(message, edit: edit)
        metrics.latency.record(ContinuousClock.now - started)
        switch outcome {
        case .success(.allow):
            metrics.allowed.increment()
            return .allow
        case .success(.replace(let body)):
            metrics.replaced.increment()
            return .replace(body)
        case .success(.reject(let reason)):
            metrics.rejected.increment()
            throw PigeonError(.rejected, reason)
        case .failure(let problem):
            metrics.failed.increment()
            logFailure(problem)
            switch onFailure {
            case .allow: return .allow
            case .reject: throw PigeonError(.rejected, "the app could not check this message (\(problem)); try again later")
            }
        }
    }

    // MARK: The call

    private enum Answer: Equatable {
        case allow
        case replace(String)
        case reject(String)
    }

    /// Why a call failed, in words for the log and, under the `reject` policy, the sender.
    private struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    private func ask(_ message: BufferedMessage, edit: (serverId: String, text: String)?) async -> Result<Answer, Failure> {
        guard let http = httpClient() else { return .failure(Failure("the server is stopping")) }
        let admitted = inFlight.withLockedValue { state -> Bool in
            guard state.total < maxInFlight else { return false }
            state.total += 1
            return true
        }
        guard admitted else { return .failure(Failure("\(maxInFlight) hook calls are in flight already")) }
        defer { inFlight.withLockedValue { $0.total -= 1 } }
        metrics.calls.increment()
        let body: Data
        do {
            body = try JSONEncoder().encode(HookRequest(message, edit: edit))
        } catch {
            return .failure(Failure("the request could not be encoded: \(error)"))
        }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "User-Agent", value: "pigeon-server")
        request.headers.add(name: RequestSignature.headerName, value: RequestSignature.header(secret: secret, timestamp: WallClock.nowMillis(), body: body))
        request.body = .bytes(ByteBuffer(bytes: body))
        let timeout = timeout
        let signed = request
        let maxAnswerBytes = maxBodyBytes + 4096
        let answer: (status: UInt, body: ByteBuffer)
        do {
            answer = try await withDeadline(timeout) {
                let response = try await http.execute(signed, timeout: .init(timeout))
                return (response.status.code, try await response.body.collect(upTo: maxAnswerBytes))
            }
        } catch is StoreTimeout {
            return .failure(Failure("no answer within \(timeout.milliseconds) ms"))
        } catch {
            return .failure(Failure("the call failed: \(error)"))
        }
        guard (200..<300).contains(answer.status) else { return .failure(Failure("the hook answered HTTP \(answer.status)")) }
        return decide(Data(answer.body.readableBytesView))
    }

    /// The hook's answer: `{"action": "allow"}`, `{"action": "reject", "reason"}` or `{"action": "replace", "body"}`,
    /// the replacement a body a send could carry.
    private func decide(_ data: Data) -> Result<Answer, Failure> {
        guard let answer = try? JSONDecoder().decode(HookAnswer.self, from: data) else {
            return .failure(Failure("the answer is not {\"action\": ...} JSON"))
        }
        switch answer.action {
        case "allow":
            return .success(.allow)
        case "reject":
            let reason = answer.reason.map { String($0.prefix(1_000)) }.flatMap { $0.isEmpty ? nil : $0 }
            return .success(.reject(reason ?? "the app rejected this message"))
        case "replace":
            guard let body = answer.body else { return .failure(Failure("a replace answer without a string body")) }
            guard body.utf8.count <= maxBodyBytes else { return .failure(Failure("the replacement body is larger than \(maxBodyBytes) bytes")) }
            guard Validation.isStorableText(body) else { return .failure(Failure("the replacement body contains U+0000")) }
            return .success(.replace(body))
        default:
            return .failure(Failure("unknown action \"\(answer.action.prefix(40))\""))
        }
    }

    private func httpClient() -> HTTPClient? {
        client.withLockedValue { state in
            switch state {
            case .running(let http):
                return http
            case .shutDown:
                return nil
            case .idle:
                var configuration = HTTPClient.Configuration()
                configuration.timeout.connect = .init(timeout)
                configuration.timeout.read = .init(timeout)
                configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = maxInFlight
                configuration.redirectConfiguration = .disallow
                let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
                state = .running(http)
                return http
            }
        }
    }

    private func logFailure(_ failure: Failure) {
        let now = WallClock.nowMillis()
        let suppressed = failureLog.withLockedValue { log -> Int? in
            guard now - log.lastAt >= 10_000 else {
                log.suppressed += 1
                return nil
            }
            defer { log = (now, 0) }
            return log.suppressed
        }
        guard let suppressed else { return }
        logger.warning(
            "before-send hook: a call failed; --before-send-on-failure \(onFailure.rawValue) decides",
            metadata: ["problem": "\(failure)", "url": "\(url)", "failuresNotLoggedBefore": "\(suppressed)"])
    }
}

/// The hook's request body: `{"type": "before_send", "edit", "message": {...}}`.
private struct HookRequest: Encodable {
    var type = "before_send"
    var edit: Bool
    var message: HookMessage

    init(_ message: BufferedMessage, edit: (serverId: String, text: String)?) {
        self.edit = edit != nil
        self.message = HookMessage(
            conversationId: message.conversationId, senderId: message.senderId, senderDeviceId: message.senderDeviceId,
            clientMessageId: message.clientMessageId, type: message.type, body: edit?.text ?? message.body, clientTimestamp: message.clientTimestamp,
            replyTo: message.replyTo, threadRoot: message.threadRoot, attachments: message.attachments, serverId: edit?.serverId)
    }
}

/// The message as the hook sees it. For an edit: `type` is `pigeon.edit`, `body` the new text and `serverId` the
/// edited message.
private struct HookMessage: Encodable {
    var conversationId: String
    var senderId: String
    var senderDeviceId: String
    var clientMessageId: String
    var type: String
    var body: String
    var clientTimestamp: Int64
    @NullEncoded var replyTo: String?
    @NullEncoded var threadRoot: String?
    var attachments: [Attachment]
    /// Only for an edit: the message it changes.
    var serverId: String?
}

private struct HookAnswer: Decodable {
    var action: String
    var reason: String?
    var body: String?
}

/// `pigeon_before_send_*`: calls made, what they came to, and how long they took.
struct BeforeSendHookMetrics: Sendable {
    let calls: Counter
    let allowed: Counter
    let rejected: Counter
    let replaced: Counter
    let failed: Counter
    /// Sends refused 429 without a call: their user or device had its share of the calls in flight.
    let limited: Counter
    let latency: DurationHistogram

    init(registry: PrometheusCollectorRegistry) {
        func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "pigeon", metricName: name, unitName: "", helpText: help)
        }
        let decisions = descriptor("before_send_decisions_total", "What before-send hook calls came to (allow, reject, replace, failure)")
        calls = registry.makeCounter(descriptor: descriptor("before_send_calls_total", "Calls made to the before-send hook"))
        allowed = registry.makeCounter(descriptor: decisions, labels: [("outcome", "allow")])
        rejected = registry.makeCounter(descriptor: decisions, labels: [("outcome", "reject")])
        replaced = registry.makeCounter(descriptor: decisions, labels: [("outcome", "replace")])
        failed = registry.makeCounter(descriptor: decisions, labels: [("outcome", "failure")])
        limited = registry.makeCounter(
            descriptor: descriptor("before_send_limited_total", "Sends and edits refused 429 before a call: their user or device had its share of the calls in flight"))
        latency = registry.makeDurationHistogram(
            descriptor: descriptor("before_send_seconds", "Time a send or an edit waited for the before-send hook"),
            buckets: [
                .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5), .seconds(30),
            ])
    }
}
