import NIOConcurrencyHelpers

/// Resolves once: the first of "opened", "failed" or "timed out" wins; later calls are ignored.
final class ConnectGate: Sendable {
    private struct State {
        var outcome: Result<Void, any Error>?
        var waiter: CheckedContinuation<Void, any Error>?
    }

    private let state = NIOLockedValueBox(State())

    func succeed() { resolve(.success(())) }
    func fail(_ error: any Error) { resolve(.failure(error)) }

    private func resolve(_ outcome: Result<Void, any Error>) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, any Error>? in
            guard state.outcome == nil else { return nil }
            state.outcome = outcome
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: outcome)
    }

    /// Waits for the outcome; after `timeout` it fails with a timeout error.
    func wait(timeout: Duration) async throws {
        let timer = Task {
            try await Task.sleep(for: timeout)
            self.fail(PigeonClientError(.timeout, "no connection after \(timeout)"))
        }
        defer { timer.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let outcome = state.withLockedValue { state -> Result<Void, any Error>? in
                    if let outcome = state.outcome { return outcome }
                    state.waiter = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            self.fail(CancellationError())
        }
    }
}
