import Foundation

/// A wake-up call for one waiting task, the one primitive of the server's loops and streams and the client engine's
/// loops: a `notify()` before the wait is remembered, and any number of them while the task is busy wake it once, so
/// no wake-up is lost. Timed waits run on `clock` (the real one unless a test injects a manual clock). Waiting costs
/// no task of its own (idle streams wait here). (Package-internal: not part of the wire types apps see.)
package final class AsyncSignal: @unchecked Sendable {
    private struct State {
        var pending = false
        var waiterID: UInt64 = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    /// The real clock, shared by every signal that was given none.
    private static let continuous = ElapsedClock(ContinuousClock())

    private let clock: ElapsedClock
    /// Guards `state` (Foundation's lock: this module depends on nothing else).
    private let lock = NSLock()
    private var state = State()

    package init(clock: ElapsedClock? = nil) {
        self.clock = clock ?? Self.continuous
    }

    private func withState<T>(_ body: (inout State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    /// Wakes the waiting task, or the next one to wait.
    package func notify() {
        let waiter = withState { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns when notified (at once if a notification is pending) or when the task is cancelled.
    package func wait() async {
        let alreadyNotified = withState { state -> Bool in
            defer { state.pending = false }
            return state.pending
        }
        if alreadyNotified || Task.isCancelled { return }
        let id = withState { state -> UInt64 in
            state.waiterID &+= 1
            return state.waiterID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = withState { state -> Bool in
                    if state.pending || state.waiterID != id {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            cancelWaiter(id: id)
        }
    }

    /// Returns when notified, after `timeout` (`nil`: none; zero or less: at once, forgetting a pending
    /// notification), or when the task is cancelled.
    package func wait(timeout: Duration?) async {
        guard let timeout else { return await wait() }
        if timeout <= .zero {
            withState { $0.pending = false }
            return
        }
        await wait(until: clock.now.advanced(by: timeout))
    }

    /// Returns when notified, when the clock reaches `deadline` (`nil`: no deadline), or when the task is cancelled.
    package func wait(until deadline: ElapsedClock.Instant?) async {
        guard let deadline else { return await wait() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait() }
            group.addTask { [clock] in try? await clock.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    private func cancelWaiter(id: UInt64) {
        let waiter = withState { state -> CheckedContinuation<Void, Never>? in
            guard state.waiterID == id, let waiter = state.waiter else {
                // Not registered yet: make the registration resume at once.
                if state.waiterID == id { state.waiterID &+= 1 }
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }
}
