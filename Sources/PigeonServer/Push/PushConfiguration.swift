import Foundation

/// Where and how the server sends push notifications (`--push-gateway`, `--push-include-body`, ...). Without a
/// gateway, registrations are still kept (an app can register before the operator sets one up) and nothing is sent.
public struct PushConfiguration: Sendable {
    /// The gateway's base URL (`https://sygnal.example.com`) or its full notify URL (ending in
    /// `/_matrix/push/v1/notify`, as a Matrix pusher's `url`); `nil`: no pushes.
    public var gatewayURL: String?
    /// Send the message's body in the notification's `content` (off: the body never leaves the server; the app
    /// fetches it when it wakes).
    public var includeBody = false
    /// How long one request to the gateway may take before it counts as a timeout (and is retried).
    public var requestTimeout = Duration.seconds(10)
    /// How long a push is retried after timeouts and 5xx answers before it is given up (`pigeon_push_failed_total`).
    public var retryWindow = Duration.seconds(600)
    /// The first wait after a failed try; it doubles up to ``maxRetryDelay``, with jitter.
    public var firstRetryDelay = Duration.seconds(1)
    public var maxRetryDelay = Duration.seconds(60)
    /// At most one push per device in this interval: a burst's messages coalesce into the newest.
    public var minInterval = Duration.seconds(1)
    /// Requests to the gateway in flight at once.
    public var maxInFlight = 32
    /// How often the store is asked for new messages and due pushes when no local commit wakes the dispatcher
    /// (another node's commits, retries coming due).
    public var pollInterval = Duration.milliseconds(250)

    public init() {}

    /// The URL notifications are posted to.
    public var notifyURL: String? {
        guard let gatewayURL else { return nil }
        if gatewayURL.hasSuffix("/_matrix/push/v1/notify") { return gatewayURL }
        return (gatewayURL.hasSuffix("/") ? String(gatewayURL.dropLast()) : gatewayURL) + "/_matrix/push/v1/notify"
    }

    /// Why the configuration cannot run, or `nil`.
    public var problem: String? {
        if let gatewayURL {
            guard let url = URL(string: gatewayURL), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host != nil
            else { return "--push-gateway must be an http:// or https:// URL, not \(gatewayURL)" }
        }
        if requestTimeout <= .zero { return "the push request timeout must be positive" }
        if retryWindow < .zero { return "the push retry window must not be negative" }
        if maxInFlight < 1 { return "push requests in flight must be at least 1" }
        return nil
    }
}

extension Duration {
    /// Whole milliseconds.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
