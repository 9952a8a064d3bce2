import Foundation
import PigeonDomain

/// How the app's own backend hears and steers what flows (API.md 1.2): webhooks, the before-send hook, the server API's
/// credential, and the consent rules (blocking is always on; strangers and invitations are configured here).
public struct AppBackendConfiguration: Sendable {
    /// The URL every webhook event is POSTed to (`--webhook`); `nil`: no event is recorded or sent.
    public var webhookURL: String?
    /// The secret webhook events and the before-send hook's requests are signed with (`--webhook-secret`,
    /// `PIGEON_WEBHOOK_SECRET`); required by `--webhook` and `--before-send-hook`.
    public var webhookSecret: String?
    /// The event types sent (`--webhook-events`); `nil`: every type but `receipt.read`, which is sent only when listed.
    public var webhookEvents: Set<String>?
    /// How long one webhook request may take before it counts as failed (API.md: an answer within 5 s).
    public var webhookTimeout = Duration.seconds(5)
    /// How long a failing event is retried before it becomes a dead letter (API.md: 24 hours).
    public var webhookRetryWindow = Duration.seconds(24 * 3600)
    /// The first wait after a failed try; it doubles up to ``webhookMaxRetryDelay``, with jitter.
    public var webhookFirstRetryDelay = Duration.seconds(1)
    public var webhookMaxRetryDelay = Duration.seconds(600)

    /// The before-send hook's URL (`--before-send-hook`); `nil`: no hook.
    public var beforeSendHookURL: String?
    /// How long the hook may take to answer (`--before-send-timeout-ms`, default 500 ms).
    public var beforeSendTimeout = Duration.milliseconds(500)
    /// What a failed hook call (timeout, non-2xx, unreadable answer) does to the send (`--before-send-on-failure`).
    public var beforeSendOnFailure = HookFailurePolicy.allow
    /// Before-send hook calls in flight at once (the connection pool's size); a send past it counts as a failed call.
    public var beforeSendMaxInFlight = 256

    /// The server API's static credential (`--service-token`, `PIGEON_SERVICE_TOKEN`); `nil`: only a JWT with
    /// `"pigeon_role": "service"` is a service credential.
    public var serviceToken: String?
    /// A second static credential accepted beside ``serviceToken`` while the app's backend moves to a new one
    /// (`--service-token-previous`, `PIGEON_SERVICE_TOKEN_PREVIOUS`): rotation without a moment where neither works.
    public var previousServiceToken: String?

    /// `--consent`: `open` (1.1's behaviour, the default) or `invites`.
    public var consent = ConsentMode.open
    /// `--stranger-adds-per-hour`: users a user may add in an hour with whom it shares no joined conversation; 0: no limit.
    public var strangerAddsPerHour = 50

    public enum HookFailurePolicy: String, Sendable, CaseIterable {
        case allow, reject
    }

    public enum ConsentMode: String, Sendable, CaseIterable {
        case open, invites
    }

    /// The webhook event types API.md 1.2 defines.
    public static let webhookEventTypes: [String] = [
        "message.stored", "message.edited", "message.deleted", "reaction", "members.changed", "conversation.created",
        "device.registered", "device.revoked", "receipt.read",
    ]

    /// The types sent: those listed, else every type but `receipt.read`. Empty without a webhook URL.
    public var enabledWebhookEvents: Set<String> {
        guard webhookURL != nil else { return [] }
        return webhookEvents ?? Set(Self.webhookEventTypes).subtracting(["receipt.read"])
    }

    public init() {}

    /// Why the configuration cannot run, or `nil`.
    public var problem: String? {
        for (flag, value) in [("--webhook", webhookURL), ("--before-send-hook", beforeSendHookURL)] {
            guard let value else { continue }
            guard let url = URL(string: value), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host != nil
            else { return "\(flag) must be an http:// or https:// URL, not \(value)" }
            guard let secret = webhookSecret, !secret.isEmpty else {
                return "\(flag) needs --webhook-secret (or PIGEON_WEBHOOK_SECRET): every request to the app's backend is signed"
            }
        }
        if let webhookEvents {
            let unknown = webhookEvents.subtracting(Self.webhookEventTypes).sorted()
            if !unknown.isEmpty {
                return "--webhook-events: unknown type \(unknown.joined(separator: ", ")) (known: \(Self.webhookEventTypes.joined(separator: ", ")))"
            }
            if webhookEvents.isEmpty { return "--webhook-events must name at least one type" }
        }
        if webhookTimeout <= .zero || webhookTimeout > .seconds(60) { return "--webhook-timeout-ms must be 1 to 60000" }
        if webhookRetryWindow < .zero { return "--webhook-retry-window-seconds must not be negative" }
        if webhookFirstRetryDelay <= .zero || webhookFirstRetryDelay > webhookMaxRetryDelay {
            return "--webhook-first-retry-ms must be positive and at most the longest retry delay (\(webhookMaxRetryDelay))"
        }
        if let serviceToken, serviceToken.count < 16 { return "--service-token must be at least 16 characters" }
        if let previousServiceToken {
            if previousServiceToken.count < 16 { return "--service-token-previous must be at least 16 characters" }
            if serviceToken == nil { return "--service-token-previous needs --service-token (the new token)" }
        }
        if strangerAddsPerHour < 0 { return "--stranger-adds-per-hour must be 0 (no limit) or more" }
        if beforeSendMaxInFlight < 1 { return "before-send hook calls in flight must be at least 1" }
        if beforeSendTimeout <= .zero || beforeSendTimeout > .seconds(30) { return "--before-send-timeout-ms must be 1 to 30000" }
        return nil
    }
}
