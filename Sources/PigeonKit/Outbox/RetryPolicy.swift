/// How the outbox retries a message that got no accept answer.
public struct RetryPolicy: Sendable, Equatable {
    /// Tries before the message is marked failed (⚠️). A try ends with an ACK timeout or a transient error
    /// (429, 503, 500, a broken request); a connection that drops while the message is on the wire does not
    /// count: the message is resent when the client is online again.
    public var maxAttempts: Int
    /// How long to wait for the accept answer before the try counts as lost and the message becomes resendable.
    public var ackTimeout: Duration
    /// The first backoff; each further try doubles it, up to ``maxDelay``. The server's `Retry-After` wins when longer.
    public var baseDelay: Duration
    /// The longest backoff between two tries (the server's `Retry-After` may still ask for longer).
    public var maxDelay: Duration

    /// The policy of docs/TARGETS.md by default: 3 tries, a 10 s ACK timeout, backoff from 1 s to
    /// 60 s.
    public init(maxAttempts: Int = 3, ackTimeout: Duration = .seconds(10), baseDelay: Duration = .seconds(1), maxDelay: Duration = .seconds(60)) {
        self.maxAttempts = maxAttempts
        self.ackTimeout = ackTimeout
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// The wait before try `attempt + 1` after `attempt` tries failed: exponential, with "equal jitter" (half the
    /// delay fixed, half random, `jitter` in 0...1), never shorter than `retryAfter`.
    package func delay(afterAttempt attempt: Int, jitter: Double, retryAfter: Duration? = nil) -> Duration {
        let exponent = min(max(attempt - 1, 0), 30)
        let raw = baseDelay * (1 << exponent)
        let capped = min(raw, maxDelay)
        let jittered = capped / 2 + (capped / 2) * min(max(jitter, 0), 1)
        if let retryAfter, retryAfter > jittered { return retryAfter }
        return jittered
    }
}

/// Reconnection backoff of the event stream: exponential with equal jitter between `base` and `max`.
package struct ReconnectBackoff: Sendable {
    package var base: Duration
    package var max: Duration
    package private(set) var failures = 0

    package init(base: Duration, max: Duration) {
        self.base = base
        self.max = max
    }

    package mutating func reset() { failures = 0 }

    package mutating func nextDelay(jitter: Double) -> Duration {
        failures += 1
        let capped = Swift.min(base * (1 << Swift.min(failures - 1, 20)), max)
        return capped / 2 + (capped / 2) * Swift.min(Swift.max(jitter, 0), 1)
    }
}
