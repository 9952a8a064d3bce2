import NIOConcurrencyHelpers

/// Lets one task at a time through ``withLock(_:)``, in arrival order, across suspension points (an actor alone
/// does not: it is re-entered at every `await`). Waiting is a continuation, not a poll; it ignores cancellation,
/// so the body it guards always runs to its end once started.
final class AsyncSerialLock: Sendable {
    private struct State {
        var locked = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = NIOLockedValueBox(State())

    /// Runs `body` once every earlier caller's body has ended, on the caller's actor.
    func withLock<T: Sendable>(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> T) async rethrows -> T {
        await lock()
        defer { unlock() }
        return try await body()
    }

    private func lock() async {
        await withCheckedContinuation { continuation in
            let acquired = state.withLockedValue { state -> Bool in
                guard state.locked else {
                    state.locked = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    /// Hands the lock to the next waiter, or releases it.
    private func unlock() {
        let next = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.locked = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
