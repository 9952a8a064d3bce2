import NIOConcurrencyHelpers

/// The store did not answer a batch in time (its connection may have died under it without an error).
package struct StoreTimeout: Error, CustomStringConvertible {
    package var timeout: Duration
    package var description: String { "the store did not answer within \(timeout)" }
}

/// Runs `operation`, but gives up waiting after `timeout` and throws ``StoreTimeout`` (or, when the calling task is
/// cancelled, `CancellationError` at once). Unlike a task group, it does not wait for an operation that ignores
/// cancellation: seen with a PostgreSQL transaction whose server was killed under it, which never returned. The
/// abandoned operation is cancelled and left to finish on its own; processing is idempotent, so the batch can be
/// tried again meanwhile.
package func withDeadline<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = DeadlineRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.start(continuation, timeout: timeout, operation: operation)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The first of the operation, the timer and cancellation to finish resumes the caller; the others are cancelled.
private final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        /// The winner, once there is one (kept for a `start` that comes after a cancellation).
        var outcome: Result<T, any Error>?
        var tasks: [Task<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, timeout: Duration, operation: @escaping @Sendable () async throws -> T) {
        let early = state.withLockedValue { state -> Result<T, any Error>? in
            if let outcome = state.outcome { return outcome }
            state.continuation = continuation
            return nil
        }
        if let early {
            continuation.resume(with: early)
            return
        }
        let work = Task {
            do {
                self.finish(.success(try await operation()))
            } catch {
                self.finish(.failure(error))
            }
        }
        let timer = Task {
            try? await Task.sleep(for: timeout)
            if !Task.isCancelled { self.finish(.failure(StoreTimeout(timeout: timeout))) }
        }
        let finishedMeanwhile = state.withLockedValue { state -> Bool in
            guard state.outcome == nil else { return true }
            state.tasks = [work, timer]
            return false
        }
        if finishedMeanwhile {
            work.cancel()
            timer.cancel()
        }
    }

    func finish(_ outcome: Result<T, any Error>) {
        let winner = state.withLockedValue { state -> (CheckedContinuation<T, any Error>?, [Task<Void, Never>])? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer {
                state.continuation = nil
                state.tasks = []
            }
            return (state.continuation, state.tasks)
        }
        guard let (continuation, tasks) = winner else { return }
        for task in tasks { task.cancel() }
        continuation?.resume(with: outcome)
    }
}
