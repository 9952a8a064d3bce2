import GRDB
import NIOConcurrencyHelpers

/// Runs many concurrent writes in one SQLite transaction: group commit.
///
/// Every write submitted while a transaction is in progress joins the next one, so under load one
/// commit (and one fsync, with `synchronous = FULL`) covers many callers. Each write runs in its own
/// savepoint: one that throws is rolled back and fails alone, the others commit. Writes submitted with
/// `isolated: false` skip their savepoint (two statements saved per tiny write); if one of them throws, the
/// transaction is rolled back and run again with every write isolated. A write's completion is
/// called only after its transaction has committed, in submission order, followed by its `afterCommit`
/// action; the next transaction starts only after those actions ran, so post-commit effects (publishing
/// events) happen in commit order.
package final class GroupCommitWriter: Sendable {
    private struct PendingWrite: Sendable {
        let isolated: Bool
        let body: @Sendable (Database) throws -> Void
        let onSuccess: @Sendable () -> Void
        let onFailure: @Sendable (any Error) -> Void
    }

    private struct State: Sendable {
        var pending: [PendingWrite] = []
        var flushing = false
    }

    private let writer: any DatabaseWriter
    private let maxWritesPerTransaction: Int
    private let state = NIOLockedValueBox(State())

    package init(writer: any DatabaseWriter, maxWritesPerTransaction: Int = 4096) {
        self.writer = writer
        self.maxWritesPerTransaction = maxWritesPerTransaction
    }

    /// Submits `body` to run in the next group transaction and calls `completion` once it has committed
    /// (or failed). `afterCommit` runs on the writer right after the commit, before any later transaction.
    ///
    /// Writes submitted by one caller, one after the other, commit in that order.
    package func submit<T: Sendable>(
        isolated: Bool = true,
        _ body: @escaping @Sendable (Database) throws -> T,
        afterCommit: (@Sendable (T) -> Void)? = nil,
        completion: @escaping @Sendable (Result<T, any Error>) -> Void
    ) {
        let result = NIOLockedValueBox<T?>(nil)
        let write = PendingWrite(
            isolated: isolated,
            body: { db in
                let value = try body(db)
                result.withLockedValue { $0 = value }
            },
            onSuccess: {
                let value = result.withLockedValue { $0 }!
                completion(.success(value))
                afterCommit?(value)
            },
            onFailure: { completion(.failure($0)) }
        )
        let startFlush = state.withLockedValue { state -> Bool in
            state.pending.append(write)
            if state.flushing { return false }
            state.flushing = true
            return true
        }
        if startFlush {
            writer.asyncWriteWithoutTransaction { [self] db in flush(db) }
        }
    }

    /// Async form of ``submit(_:afterCommit:completion:)``.
    @discardableResult
    package func write<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> T,
        afterCommit: (@Sendable (T) -> Void)? = nil
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit(body, afterCommit: afterCommit) { continuation.resume(with: $0) }
        }
    }

    /// Drains the pending writes, one transaction per round, on the database writer's queue.
    private func flush(_ db: Database) {
        while true {
            let batch = state.withLockedValue { state -> [PendingWrite] in
                if state.pending.isEmpty {
                    state.flushing = false
                    return []
                }
                let count = min(state.pending.count, maxWritesPerTransaction)
                let batch = Array(state.pending.prefix(count))
                state.pending.removeFirst(count)
                return batch
            }
            if batch.isEmpty { return }
            commit(batch, db)
        }
    }

    private struct UnisolatedWriteFailed: Error {}

    private func commit(_ batch: [PendingWrite], _ db: Database) {
        var succeeded: [PendingWrite] = []
        var failed: [(PendingWrite, any Error)] = []
        succeeded.reserveCapacity(batch.count)
        var isolateAll = false
        while true {
            succeeded.removeAll(keepingCapacity: true)
            failed.removeAll()
            do {
                try db.inTransaction(.immediate) {
                    for write in batch {
                        if write.isolated || isolateAll {
                            do {
                                try db.inSavepoint {
                                    try write.body(db)
                                    return .commit
                                }
                                succeeded.append(write)
                            } catch {
                                failed.append((write, error))
                            }
                        } else {
                            do {
                                try write.body(db)
                                succeeded.append(write)
                            } catch {
                                throw UnisolatedWriteFailed()
                            }
                        }
                    }
                    return .commit
                }
            } catch is UnisolatedWriteFailed where !isolateAll {
                isolateAll = true
                continue
            } catch {
                // The transaction itself failed (disk full, I/O error): nothing of it is durable.
                for write in batch { write.onFailure(error) }
                return
            }
            break
        }
        for (write, error) in failed { write.onFailure(error) }
        for write in succeeded { write.onSuccess() }
    }
}
