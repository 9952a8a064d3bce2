import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// The embedded default's accept path: no buffer. An append is written straight into the SQLite store
/// (``SQLiteMessageStore/accept(_:refusal:completion:)``), so a message costs one durable write, not two (buffer,
/// then store), and nothing waits for a processor between its ✓ and its `message.new`: no processor runs
/// (docs/decisions/0001-one-durable-write.md).
///
/// It keeps the accept path's contract: an append answers only once durable, resends are answered with the original
/// at any later time (the store's unique index), and appends of one caller are stored in their order (the store's
/// group commit runs them in submission order). `depth` is the number of appends waiting for their commit, which
/// bounds the memory held for them (`--max-buffered`).
public final class DirectAcceptPath: AcceptPath {
    private let store: SQLiteMessageStore
    private let inFlight = NIOLockedValueBox(0)

    public init(store: SQLiteMessageStore) {
        self.store = store
    }

    public func append(
        _ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void
    ) {
        inFlight.withLockedValue { $0 += 1 }
        store.accept(message, refusal: refusal) { [inFlight] result in
            inFlight.withLockedValue { $0 -= 1 }
            completion(result)
        }
    }

    /// A replayed dead letter is stored at once; if that fails, the error is thrown and the dead letter stays.
    public func requeue(_ message: BufferedMessage) async throws {
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

    public var depth: Int { inFlight.withLockedValue { $0 } }

    public func isReady() async -> Bool { await store.isReady() }

    public var isDiskFull: Bool { store.isDiskFull }
}
