import NIOConcurrencyHelpers

/// Runs `operation`, but waits for it at most `limit`: past that it throws a ``TestFailure`` naming `what`, and leaves
/// the operation (cancelled) to finish on its own. Unlike a task group, it returns even when the operation ignores
/// cancellation: a test helper awaiting a peer that died (a WebSocket's closing handshake, an upgrade that is never
/// answered) fails its test instead of hanging the whole run.
public func withTimeLimit<T: Sendable>(
    _ limit: Duration, _ what: @autoclosure () -> String, _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    let description = what()
    let race = TimeLimitRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            race.start(continuation, limit: limit, description: description, operation: operation)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The first of the operation, the timer and cancellation to finish resumes the caller; the others are cancelled.
private final class TimeLimitRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var outcome: Result<T, any Error>?
        var tasks: [Task<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())

    func start(
        _ continuation: CheckedContinuation<T, any Error>, limit: Duration, description: String,
        operation: @escaping @Sendable () async throws -> T
    ) {
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
            try? await Task.sleep(for: limit)
            if !Task.isCancelled { self.finish(.failure(TestFailure("\(description) did not finish within \(limit)"))) }
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
