import PigeonProtocol

/// Called inside the processing transaction for each message before it is written; throwing fails that message as
/// a store error would. For fault-injection tests.
public typealias ProcessingFaultInjector = @Sendable (BufferedMessage) throws -> Void

/// A buffered message handed to the store for processing.
public struct ProcessingItem: Sendable {
    public var entry: BufferEntry
    /// If this attempt fails, the message goes to the dead-letter store instead of being retried.
    public var isFinalAttempt: Bool

    public init(entry: BufferEntry, isFinalAttempt: Bool) {
        self.entry = entry
        self.isFinalAttempt = isFinalAttempt
    }
}

/// What processing did with one item.
public enum ProcessingResult: Sendable {
    /// Persisted now with this seq; events were written with it.
    case stored(seq: Int64)
    /// Persisted by an earlier attempt (the buffer handed it out twice): nothing was written.
    case alreadyStored(seq: Int64)
    /// Failed; not written. Retry later (a message of its conversation behind it is deferred).
    case failed(any Error)
    /// Moved to the dead-letter store; `message.failed` went to its sender.
    case deadLettered(any Error)
    /// Not attempted because an earlier message of its conversation failed in this batch.
    case deferred
}

/// A dead-lettered message.
public struct DeadLetter: Sendable, Codable, Equatable {
    public var message: Message
    public var failedAt: Int64
    public var error: ErrorDetail

    public init(message: Message, failedAt: Int64, error: ErrorDetail) {
        self.message = message
        self.failedAt = failedAt
        self.error = error
    }
}

/// A receipt's effect.
public struct ReceiptOutcome: Sendable {
    public var watermarks: ReceiptResponse
    /// For each delivered watermark that moved onto another member's message: its store time (for latency metrics).
    public var deliveredMessageStoredAt: Int64?

    public init(watermarks: ReceiptResponse, deliveredMessageStoredAt: Int64?) {
        self.watermarks = watermarks
        self.deliveredMessageStoredAt = deliveredMessageStoredAt
    }
}
