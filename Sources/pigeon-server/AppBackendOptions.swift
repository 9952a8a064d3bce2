import ArgumentParser
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.appBackend: webhooks, the before-send hook, the server API's
/// credential and the consent rules (API.md 1.2).
struct AppBackendOptions: ParsableArguments {
    @Option(name: .customLong("webhook"), help: "URL every webhook event is POSTed to, signed (also PIGEON_WEBHOOK); without it no event is recorded.")
    var webhook: String?

    @Option(name: .customLong("webhook-secret"), help: "Secret of the Pigeon-Signature HMAC on webhook events and before-send hook calls (better: PIGEON_WEBHOOK_SECRET).")
    var webhookSecret: String?

    @Option(name: .customLong("webhook-events"), help: "Comma-separated event types to send (default: all but receipt.read): \(AppBackendConfiguration.webhookEventTypes.joined(separator: ", ")).")
    var webhookEvents: String?

    @Option(name: .customLong("webhook-timeout-ms"), help: ArgumentHelp("Milliseconds a webhook request may take (default 5000).", visibility: .hidden))
    var webhookTimeoutMs: Int?

    @Option(
        name: .customLong("webhook-retry-window-seconds"),
        help: ArgumentHelp("Seconds a failing webhook event is retried before it is a dead letter (default 86400).", visibility: .hidden))
    var webhookRetryWindowSeconds: Int?

    @Option(
        name: .customLong("webhook-first-retry-ms"),
        help: ArgumentHelp("Milliseconds before a failed webhook event's first retry; doubles up to 10 minutes (default 1000).", visibility: .hidden))
    var webhookFirstRetryMs: Int?

    @Option(name: .customLong("before-send-hook"), help: "URL asked before a send or an edit is stored: allow, reject or replace (also PIGEON_BEFORE_SEND_HOOK).")
    var beforeSendHook: String?

    @Option(name: .customLong("before-send-timeout-ms"), help: "Milliseconds the before-send hook may take (default 500).")
    var beforeSendTimeoutMs: Int?

    @Option(name: .customLong("before-send-on-failure"), help: "allow or reject a send when the hook times out or answers badly (default allow).")
    var beforeSendOnFailure: String?

    @Option(name: .customLong("service-token"), help: "The server API's static credential, at least 16 characters (better: PIGEON_SERVICE_TOKEN).")
    var serviceToken: String?

    @Option(name: .customLong("service-token-previous"), help: "The server API's previous credential, still accepted while the backend rotates to --service-token (better: PIGEON_SERVICE_TOKEN_PREVIOUS).")
    var serviceTokenPrevious: String?

    @Option(name: .customLong("consent"), help: "open (anyone may add anyone, the default) or invites (a stranger's add is an invitation to accept).")
    var consent: String?

    @Option(name: .customLong("stranger-adds-per-hour"), help: "Users a user may add per hour with whom it shares no conversation (default 50; 0: no limit).")
    var strangerAddsPerHour: Int?

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        func nonEmpty(_ value: String?) -> String? { value.flatMap { $0.isEmpty ? nil : $0 } }
        var app = configuration.appBackend
        app.webhookURL = nonEmpty(webhook) ?? nonEmpty(environment["PIGEON_WEBHOOK"])
        app.webhookSecret = nonEmpty(webhookSecret) ?? nonEmpty(environment["PIGEON_WEBHOOK_SECRET"])
        if let webhookEvents {
            app.webhookEvents = Set(webhookEvents.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        }
        if let webhookTimeoutMs { app.webhookTimeout = .milliseconds(webhookTimeoutMs) }
        if let webhookRetryWindowSeconds { app.webhookRetryWindow = .seconds(webhookRetryWindowSeconds) }
        if let webhookFirstRetryMs { app.webhookFirstRetryDelay = .milliseconds(webhookFirstRetryMs) }
        app.beforeSendHookURL = nonEmpty(beforeSendHook) ?? nonEmpty(environment["PIGEON_BEFORE_SEND_HOOK"])
        if let beforeSendTimeoutMs { app.beforeSendTimeout = .milliseconds(beforeSendTimeoutMs) }
        if let beforeSendOnFailure {
            guard let policy = AppBackendConfiguration.HookFailurePolicy(rawValue: beforeSendOnFailure) else {
                throw ValidationError("--before-send-on-failure must be allow or reject, not \(beforeSendOnFailure)")
            }
            app.beforeSendOnFailure = policy
        }
        app.serviceToken = nonEmpty(serviceToken) ?? nonEmpty(environment["PIGEON_SERVICE_TOKEN"])
        app.previousServiceToken = nonEmpty(serviceTokenPrevious) ?? nonEmpty(environment["PIGEON_SERVICE_TOKEN_PREVIOUS"])
        if let consent {
            guard let mode = AppBackendConfiguration.ConsentMode(rawValue: consent) else {
                throw ValidationError("--consent must be open or invites, not \(consent)")
            }
            app.consent = mode
        }
        if let strangerAddsPerHour { app.strangerAddsPerHour = strangerAddsPerHour }
        if let problem = app.problem { throw ValidationError(problem) }
        configuration.appBackend = app
    }
}
