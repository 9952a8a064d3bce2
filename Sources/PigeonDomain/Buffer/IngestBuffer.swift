import PigeonProtocol

/// A message accepted by ingest, as it waits in the buffer for processing.
public struct BufferedMessage: Sendable, Equatable {
    public var serverId: String
    public var conversationId: String
    public var senderId: String
    public var senderDeviceId: String
    public var clientMessageId: String
    public var type: String
    public var body: String
    public var clientTimestamp: Int64
    public var acceptedAt: Int64
    /// The serverId of the message it quotes (API.md 1.2), checked at accept.
    public var replyTo: String?
    /// The serverId of the thread root it is in (API.md 1.2), checked at accept.
    public var threadRoot: String?
    /// The attachments it carries (API.md 1.2), resolved at accept from the sender's user's uploads: the metadata
    /// travels with the message, so that storing it reads nothing else.
    public var attachments: [Attachment]

    public init(
        serverId: String, conversationId: String, senderId: String, senderDeviceId: String, clientMessageId: String,
        type: String, body: String, clientTimestamp: Int64, acceptedAt: Int64, replyTo: String? = nil, threadRoot: String? = nil,
        attachments: [Attachment] = []
    ) {
        self.attachments = attachments
        self.replyTo = replyTo
        self.threadRoot = threadRoot
        self.serverId = serverId
        self.conversationId = conversationId
        self.senderId = senderId
        self.senderDeviceId = senderDeviceId
        self.clientMessageId = clientMessageId
        self.type = type
        self.body = body
        self.clientTimestamp = clientTimestamp
        self.acceptedAt = acceptedAt
    }
}

/// One buffered message handed to the processor.
public struct BufferEntry: Sendable, Equatable {
    /// The buffer's own id for the entry (opaque to the processor).
    public var id: String
    public var message: BufferedMessage
    /// Failed processing attempts so far (survives restarts).
    public var attempts: Int
    /// The buffer partition it came from. All messages of a conversation are in one partition, and the processor
    /// stores different partitions concurrently (one batch at a time per partition). A buffer that gains nothing from
    /// concurrent stores (one partition, like the embedded one) leaves it 0.
    public var partition: Int

    public init(id: String, message: BufferedMessage, attempts: Int, partition: Int = 0) {
        self.id = id
        self.message = message
        self.attempts = attempts
        self.partition = partition
    }
}

/// What an append did.
public enum AppendOutcome: Sendable, Equatable {
    /// The message is durable in the buffer now.
    case accepted
    /// The message is durable and stored with this seq already: the direct accept path of the embedded store
    /// (``DirectAcceptPath``), and its events are published.
    case stored(seq: Int64)
    /// The device sent this `clientMessageId` before: nothing was appended; these are the original's
    /// serverId and accept time (where it is now, the store knows).
    case duplicate(serverId: String, acceptedAt: Int64)
}

/// The accept's durable write: where an accepted message goes, answered only once it is durable. Chosen once, in the
/// composition root: the embedded store's direct path (its group commit stores the message at once: one durable
/// write, answered `.stored`) or an ``IngestBuffer`` that the processor empties into the store (answered `.accepted`).
///
/// Delivery contract (IngestBufferContractTests checks it on every implementation):
/// - ``append(_:refusal:completion:)`` calls its completion with `.accepted` (or `.stored`) only once the message is
///   durable: a crash of the server or of the buffer after that loses nothing. Appends submitted one after the other by
///   one caller become durable, and are stored, in that order.
/// - De-duplication: a second append with the same (senderId, senderDeviceId, clientMessageId) appends nothing and
///   answers `.duplicate` with the original's serverId, also after processing, for as long as the path keeps its
///   records: the embedded paths for ever (the direct path asks the store's unique index), the Redis buffer for its
///   `dedupe_hours` (7 days by default). A resend after that window is appended again under a new serverId; the store
///   recognises it by (sender, device, clientMessageId) and does not store it twice (`.alreadyStored`), but the
///   resend's answer names the new serverId.
public protocol AcceptPath: Sendable {
    /// Appends a message durably; `completion` runs once it is durable or has failed.
    ///
    /// With a `refusal` (the buffer is full, the device is over its rate) only a duplicate is answered; a new
    /// message fails with that error and nothing is appended.
    func append(
        _ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void)

    /// Takes a message that was accepted before (a dead letter an operator replays) to be stored again, with a fresh
    /// attempt count; its de-duplication record stays as it is.
    func requeue(_ message: BufferedMessage) async throws

    /// Messages accepted and not yet stored (the direct path: waiting for their commit).
    var depth: Int { get }

    /// How many partitions this node processes now, for a buffer shared by nodes that split its partitions
    /// between them; `nil` for a buffer of one node.
    var heldPartitionCount: Int? { get }

    /// Whether the path can take appends now (for `/readyz`).
    func isReady() async -> Bool
    /// Whether the path's disk refused its last write (full, or failing): `/readyz` names it.
    var isDiskFull: Bool { get }
}

/// The durable ingest buffer between accept and processing: the buffered accept path, which the processor empties.
///
/// Besides the ``AcceptPath`` contract: entries are handed out at least once: an entry not acknowledged (the
/// processor crashed) is handed out again after a restart, so the store must be idempotent by serverId.
public protocol IngestBuffer: AcceptPath {
    /// The next entries not yet handed out by this buffer instance, at most `max`: each partition's in append order.
    /// Waits up to `wait` for one to arrive (returning as soon as one did); returns an empty array if none did.
    func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry]

    /// Removes entries whose processing ended (stored or dead-lettered).
    func acknowledge(entryIds: [String]) async throws

    /// Records a failed processing attempt, so the count survives a restart.
    func recordFailedAttempt(entryId: String, attempts: Int) async throws
}

extension AcceptPath {
    public var isDiskFull: Bool { false }
    public var heldPartitionCount: Int? { nil }
}

extension AcceptPath {
    /// Async form of ``append(_:completion:)``.
    public func append(_ message: BufferedMessage, refusal: PigeonError? = nil) async throws -> AppendOutcome {
        try await withCheckedThrowingContinuation { continuation in
            append(message, refusal: refusal) { continuation.resume(with: $0) }
        }
    }
}
