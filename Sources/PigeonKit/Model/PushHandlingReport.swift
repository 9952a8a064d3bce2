/// What ``PigeonClient/handlePush(_:deadline:)`` did with one wake-up: what it fetched, confirmed and sent, and
/// whether it finished before the deadline. Nothing it left undone is lost: the next call, or the running client,
/// carries on from the database.
public struct PushHandlingReport: Sendable, Equatable {
    /// The push it handled (`nil`: a wake-up without a readable push; every conversation was caught up).
    public var push: PigeonPush?
    /// Messages that arrived on this device during the call (from the other members and this user's other devices,
    /// member changes, edits and deletions included), each counted once however it came (history or the stream).
    /// Calls that overlap each count what arrived while they ran.
    public var messagesFetched: Int
    /// Whether the message the push named (``PigeonPush/serverId``) is in the local database when the call returns;
    /// `nil` when the push named none.
    public var pushedMessageStored: Bool?
    /// Delivered and read receipts this device sent during the call (one per conversation and kind each time it
    /// sent one). When ``finished``, the server confirmed every receipt the device owed.
    public var receiptsSent: Int
    /// Messages (and edits, deletions) of this device's outbox the server accepted during the call.
    public var outboxSent: Int
    /// Outbox messages that failed (⚠️) during the call: the server refused them; they wait for
    /// ``PigeonClient/retry(localId:)``.
    public var outboxFailed: Int
    /// Outbox messages still waiting for the server's answer when the call returned (0 when ``finished``).
    public var outboxWaiting: Int
    /// Whether every step was done before the deadline: connected, the pushed conversation and then every other one
    /// caught up, the outbox flushed (each message accepted or failed), the receipts owed confirmed by the server.
    public var finished: Bool
    /// Why it did not finish: ``PigeonClientError/Code-swift.struct/timeout`` naming the step the deadline cut (and why
    /// the last connection attempt failed, if it did), ``PigeonClientError/Code-swift.struct/closed`` for a client
    /// signed out, or whose network is switched off; `nil` when ``finished``.
    public var error: PigeonClientError?
    /// How long the call took.
    public var elapsed: Duration

    /// A report with these fields (for tests and previews of an app's own code).
    public init(
        push: PigeonPush?, messagesFetched: Int, pushedMessageStored: Bool?, receiptsSent: Int, outboxSent: Int, outboxFailed: Int,
        outboxWaiting: Int, finished: Bool, error: PigeonClientError?, elapsed: Duration
    ) {
        self.push = push
        self.messagesFetched = messagesFetched
        self.pushedMessageStored = pushedMessageStored
        self.receiptsSent = receiptsSent
        self.outboxSent = outboxSent
        self.outboxFailed = outboxFailed
        self.outboxWaiting = outboxWaiting
        self.finished = finished
        self.error = error
        self.elapsed = elapsed
    }
}
