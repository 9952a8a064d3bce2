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
///
/// A message with attachments is queued with its ``uploads`` to do first: it is not due (and holds its conversation's
/// line) until they are done. Each attachment's upload has tries of its own, counted like a send's:
///
/// ```
/// waiting ──startUpload──▶ running ──uploadsFinished──▶ done (the message may go)
///   ▲  ▲                     │ transient error: tries < max → waiting(after backoff), else failed
///   │  └──uploadInterrupted──┘ (the connection broke: not a try, never fails the message)
///   └─(retry)── failed ◀── refused for good (a 4xx other than 408 and 429), or tries spent
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

    /// Where the uploads of the message's attachments stand (API.md 1.2).
    package enum Uploads: Sendable, Equatable {
        /// Nothing (more) to upload: the message may go when its turn comes.
        case done
        /// Attachments wait to be uploaded; not before `notBefore` (a backoff), when set.
        case waiting(notBefore: ElapsedClock.Instant?)
        /// An upload is on its way.
        case running
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
    /// The attachments' uploads, which come before the message goes.
    package private(set) var uploads: Uploads
    /// Tries of the current attachment's upload that ended without an answer.
    package private(set) var uploadAttempts = 0
    /// Uploads of the current attachment the connection broke in a row while the client seemed online (not tries: they
    /// only space the next start).
    package private(set) var uploadInterruptions = 0

    package init(
        localId: Int64, conversationId: String, clientMessageId: String, attempts: Int = 0, state: State = .queued(notBefore: nil),
        kind: Kind = .message, uploadsPending: Bool = false
    ) {
        self.localId = localId
        self.conversationId = conversationId
        self.clientMessageId = clientMessageId
        self.kind = kind
        self.attempts = attempts
        self.state = state
        self.uploads = uploadsPending ? .waiting(notBefore: nil) : .done
    }

    package var isInFlight: Bool {
        if case .inFlight = state { return true }
        return false
    }

    package var isFailed: Bool {
        if case .failed = state { return true }
        return false
    }

    /// Whether it may go on the wire at `now` (queued, past its backoff, its attachments uploaded).
    package func isDue(at now: ElapsedClock.Instant) -> Bool {
        guard uploads == .done else { return false }
        if case .queued(let notBefore) = state { return notBefore.map { $0 <= now } ?? true }
        return false
    }

    /// Whether an upload of its attachments may start at `now` (queued, uploads waiting and past their backoff).
    package func isUploadDue(at now: ElapsedClock.Instant) -> Bool {
        guard case .queued = state, case .waiting(let notBefore) = uploads else { return false }
        return notBefore.map { $0 <= now } ?? true
    }

    package var isUploading: Bool { uploads == .running }

    /// Starts uploading the attachments: true when it was due.
    package mutating func startUpload(now: ElapsedClock.Instant) -> Bool {
        guard isUploadDue(at: now) else { return false }
        uploads = .running
        return true
    }

    /// One attachment's upload was answered: the next one starts with fresh tries.
    package mutating func attachmentUploaded() {
        guard uploads == .running else { return }
        uploadAttempts = 0
        uploadInterruptions = 0
    }

    /// Every attachment is uploaded: the message may go.
    package mutating func uploadsFinished() {
        guard uploads == .running else { return }
        uploads = .done
        uploadAttempts = 0
        uploadInterruptions = 0
    }

    /// The upload failed and may work later (a timeout, 408, 429, 5xx, no answer): the try counts; `retryAfter` is the
    /// server's.
    package mutating func uploadFailed(
        _ reason: ErrorDetail, retryAfter: Duration?, now: ElapsedClock.Instant, policy: RetryPolicy, jitter: Double
    ) -> Action {
        guard uploads == .running else { return .none }
        uploadAttempts += 1
        if uploadAttempts >= policy.maxAttempts {
            uploads = .waiting(notBefore: nil)
            state = .failed(reason)
            return .fail(reason)
        }
        let next = now + policy.delay(afterAttempt: uploadAttempts, jitter: jitter, retryAfter: retryAfter)
        uploads = .waiting(notBefore: next)
        return .retryLater(next)
    }

    /// The server refused the upload for good (too large, over the quota, a bad name): the message fails.
    package mutating func uploadRefused(_ reason: ErrorDetail) -> Action {
        guard uploads == .running else { return .none }
        uploads = .waiting(notBefore: nil)
        state = .failed(reason)
        return .fail(reason)
    }

    /// Dispatched, but an attachment turned out not to be uploaded (the database says so): nothing left the device;
    /// back to the queue, uploads first.
    package mutating func awaitUploads() {
        guard isInFlight else { return }
        state = .queued(notBefore: nil)
        uploads = .waiting(notBefore: nil)
    }

    /// The connection broke during the upload (or the client stopped, or the token was refused): it starts again, and
    /// the try does not count, however often it happens. Without `backoff` it may start as soon as the client is
    /// online; with it (the client seemed online all along: the stream had not noticed the loss yet, or only uploads
    /// break), after a backoff that grows with each break in a row.
    @discardableResult
    package mutating func uploadInterrupted(backoff: (now: ElapsedClock.Instant, policy: RetryPolicy, jitter: Double)? = nil) -> Action {
        guard uploads == .running else { return .none }
        guard let backoff else {
            uploads = .waiting(notBefore: nil)
            return .none
        }
        uploadInterruptions += 1
        let next = backoff.now + backoff.policy.delay(afterAttempt: uploadInterruptions, jitter: backoff.jitter)
        uploads = .waiting(notBefore: next)
        return .retryLater(next)
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
        uploadAttempts = 0
        uploadInterruptions = 0
        if uploads != .done { uploads = .waiting(notBefore: nil) }
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
