/// The stages of a message's way from accept to stored, each timed into `pigeon_processing_stage_seconds{stage=…}`:
/// where the latency between accept and ✓ goes (docs/PRODUCTION.md reads them).
public enum ProcessingStage: String, CaseIterable, Sendable {
    /// Accepted → read from the buffer by the node that stores it (per message; the accept time is in milliseconds).
    case buffered
    /// Read from the buffer → its batch started (per batch, from its earliest read message).
    case queued
    /// Waiting for a pooled database connection (PostgreSQL store, per batch).
    case connection
    /// Opening the transaction (PostgreSQL store, per batch).
    case begin
    /// Locking the batch's conversations and reading what the batch needs: last seqs, members, earlier copies
    /// (PostgreSQL store, per batch).
    case read
    /// The one statement that writes the batch (PostgreSQL store, per batch).
    case write
    /// The commit, the durable write (PostgreSQL store, per batch).
    case commit
    /// One read of the fan-out's tail: other nodes' commits for this node's devices (PostgreSQL store, several nodes).
    case tailRead = "tail_read"
}

/// Where a component reports how long a ``ProcessingStage`` took.
public struct ProcessingStageTimer: Sendable {
    public let record: @Sendable (ProcessingStage, Duration) -> Void

    public init(_ record: @escaping @Sendable (ProcessingStage, Duration) -> Void) {
        self.record = record
    }

    /// Records nothing.
    public static let none = ProcessingStageTimer { _, _ in }
}
