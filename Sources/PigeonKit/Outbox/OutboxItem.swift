import PigeonProtocol

/// One unsent message's life in the outbox, as a pure state machine: each input returns what to do, the caller
/// does the I/O (postgres-nio's `PoolStateMachine` style). Tested directly, without a network or a clock.
///
/// ```
/// queued ──dispatch──▶ inFlight ──accepted──▶ (leaves the outbox)
///   ▲  ▲                  │ ack timeout / transient error: tries < max → queued(after backoff), else failed
///   │  └──connection lost─┘ (not a try: resent when online)
///   └──────retry────── failed ◀── 4xx refusal, or tries spent
/// ```
package struct OutboxItem: Sendable, Equatable {
    package enum State: Sendable, Equatable {
        /// Waiting for its turn; not before `notBefore` (a backoff), when set.
        case queued(notBefore: ElapsedClock.Instant?)
        /// On the wire since `since`; no accept answer yet.
        case inFlight(since: ElapsedClock.Instant, deadline: ElapsedClock.Instant)
        /// Retries spent or refused; only ``retry()`` moves it on.
        case failed(ErrorDetail)
    }

    /// What the caller must do after an input.
    package enum Action: Sendable, Equatable {
        case none
        /// Write the message to the transport.
        case send
        /// The server has it: remove the item and mark the message sent.
        case complete
        /// Put it back in the queue; the next try is not before the given instant.
        case retryLater(ElapsedClock.Instant)
        /// Give up: mark the message failed with this reason.
        case fail(ErrorDetail)
    }

    /// What the item sends.
    package enum Kind: Sendable, Equatable {
        /// A message, an edit or a deletion (a row of the messages table).
        case message
        /// A reaction added or removed (API.md 1.2): not a message, it has no status of its own; refused, it is dropped.
        case reaction
    }

    /// The message's local id, or for a reaction its own id from the same sequence (so that one line orders both).
    package let localId: Int64
    package let conversationId: String
    package let clientMessageId: String
    package let kind: Kind
    /// Tries that ended without an accept answer.
    package private(set) var attempts: Int
    package private(set) var state: State

    package init(
        localId: Int64, conversationId: String, clientMessageId: String, attempts: Int = 0, state: State = .queued(notBefore: nil),
        kind: Kind = .message
    ) {
        self.localId = localId
        self.conversationId = conversationId
        self.clientMessageId = clientMessageId
        self.kind = kind
        self.attempts = attempts
        self.state = state
    }

    package var isInFlight: Bool {
        if case .inFlight = state { return true }
        return false
    }

    package var isFailed: Bool {
        if case .failed = state { return true }
        return false
    }

    /// Whether it may go on the wire at `now` (queued and past its backoff).
    package func isDue(at now: ElapsedClock.Instant) -> Bool {
        if case .queued(let notBefore) = state { return notBefore.map { $0 <= now } ?? true }
        return false
    }

    /// Hands the item to the transport: `.send` when it was due.
    package mutating func dispatch(now: ElapsedClock.Instant, policy: RetryPolicy) -> Action {
        guard isDue(at: now) else { return .none }
        state = .inFlight(since: now, deadline: now + policy.ackTimeout)
        return .send
    }

    /// The accept answer (or other proof the server has it) arrived. Completes from any state: a late answer to
    /// an earlier try is as good as any.
    package mutating func accepted() -> Action { .complete }

    /// No accept answer by the deadline: the try counts.
    package mutating func ackTimedOut(now: ElapsedClock.Instant, policy: RetryPolicy, jitter: Double) -> Action {
        guard case .inFlight(_, let deadline) = state, deadline <= now else { return .none }
        return tryFailed(now: now, policy: policy, jitter: jitter, retryAfter: nil, reason: ErrorDetail(code: .internalError, message: "no answer from the server after \(attempts + 1) tries"))
    }

    /// A transient refusal (429, 503, 500) or a broken request: the try counts; `retryAfter` is the server's.
    package mutating func transientFailure(_ reason: ErrorDetail, retryAfter: Duration?, now: ElapsedClock.Instant, policy: RetryPolicy, jitter: Double) -> Action {
        guard isInFlight else { return .none }
        return tryFailed(now: now, policy: policy, jitter: jitter, retryAfter: retryAfter, reason: reason)
    }

    /// The server refused the message as invalid (a 4xx other than 429): no retry helps.
    package mutating func refused(_ reason: ErrorDetail) -> Action {
        guard isInFlight else { return .none }
        state = .failed(reason)
        return .fail(reason)
    }

    /// The connection dropped while the item was on the wire: it is resent when online again, and the try does
    /// not count (being offline is not a failure).
    package mutating func connectionLost() -> Action {
        guard isInFlight else { return .none }
        state = .queued(notBefore: nil)
        return .none
    }

    /// The app asked to try a failed message again: it starts over with fresh tries.
    package mutating func retry() -> Bool {
        guard isFailed else { return false }
        attempts = 0
        state = .queued(notBefore: nil)
        return true
    }

    private mutating func tryFailed(
        now: ElapsedClock.Instant, policy: RetryPolicy, jitter: Double, retryAfter: Duration?, reason: ErrorDetail
    ) -> Action {
        attempts += 1
        if attempts >= policy.maxAttempts {
            state = .failed(reason)
            return .fail(reason)
        }
        let next = now + policy.delay(afterAttempt: attempts, jitter: jitter, retryAfter: retryAfter)
        state = .queued(notBefore: next)
        return .retryLater(next)
    }
}
