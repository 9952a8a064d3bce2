import NIOConcurrencyHelpers
import PigeonProtocol

/// The embedded default's ingest buffer: none. An append is written straight into the SQLite store
/// (``SQLiteMessageStore/accept(_:refusal:completion:)``), so a message costs one durable write, not two (buffer,
/// then store), and nothing waits for a processor between its ✓ and its `message.new`.
///
/// It keeps the buffer's contract: an append answers only once durable, resends are answered with the original at
/// any later time (the store's unique index), and appends of one caller are stored in their order (the store's
/// group commit runs them in submission order). `depth` is the number of appends waiting for their commit, which
/// bounds the memory held for them (`--max-buffered`).
///
/// A `legacy` buffer (the `buffer.sqlite` of a server that ran with a separate buffer) is drained by the processor
/// as before: its entries are handed out, stored and acknowledged; nothing new is appended to it.
final class StoreIngestBuffer: IngestBuffer {
    private let store: SQLiteMessageStore
    private let legacy: EmbeddedBuffer?
    private let inFlight = NIOLockedValueBox(0)

    init(store: SQLiteMessageStore, legacy: EmbeddedBuffer?) {
        self.store = store
        self.legacy = legacy
    }

    func append(_ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void) {
        inFlight.withLockedValue { $0 += 1 }
        store.accept(message, refusal: refusal) { [inFlight] result in
            inFlight.withLockedValue { $0 -= 1 }
            completion(result)
        }
    }

    /// Only what a legacy buffer still holds; otherwise waits `wait` (the processor's idle poll) and hands out nothing.
    func nextBatch(max: Int, wait: Duration) async throws -> [BufferEntry] {
        if let legacy, legacy.depth > 0 { return try await legacy.nextBatch(max: max, wait: wait) }
        if wait > .zero { try? await Task.sleep(for: wait) }
        return []
    }

    func acknowledge(entryIds: [String]) async throws {
        try await legacy?.acknowledge(entryIds: entryIds)
    }

    func recordFailedAttempt(entryId: String, attempts: Int) async throws {
        try await legacy?.recordFailedAttempt(entryId: entryId, attempts: attempts)
    }

    /// A replayed dead letter is stored at once; if that fails, the error is thrown and the dead letter stays.
    func requeue(_ message: BufferedMessage) async throws {
        let item = ProcessingItem(entry: BufferEntry(id: "replay-" + message.serverId, message: message, attempts: 0), isFinalAttempt: false)
        switch try await store.process([item]).first {
        case .stored, .alreadyStored:
            return
        case .failed(let error), .deadLettered(let error):
            throw error as? PigeonError ?? PigeonError.overloaded("the replayed message could not be stored: \(error)")
        case .deferred, nil:
            throw PigeonError.overloaded("the replayed message could not be stored; retry shortly")
        }
    }

    var depth: Int { inFlight.withLockedValue { $0 } + (legacy?.depth ?? 0) }

    func isReady() async -> Bool {
        guard await store.isReady() else { return false }
        return await legacy?.isReady() ?? true
    }

    var isDiskFull: Bool { store.isDiskFull || (legacy?.isDiskFull ?? false) }
}
