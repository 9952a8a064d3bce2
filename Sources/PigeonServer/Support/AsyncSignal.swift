import NIOConcurrencyHelpers

/// A wake-up call for one waiting task: `notify()` before `wait` is remembered, so no wake-up is lost.
final class AsyncSignal: Sendable {
    private struct State {
        var pending = false
        var waiterID: UInt64 = 0
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = NIOLockedValueBox(State())

    /// Wakes the waiting task, or the next one to wait.
    func notify() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns when notified or when the task is cancelled. Costs no task of its own (idle streams wait here).
    func wait() async {
        let alreadyNotified = state.withLockedValue { state -> Bool in
            defer { state.pending = false }
            return state.pending
        }
        if alreadyNotified || Task.isCancelled { return }
        let id = state.withLockedValue { state -> UInt64 in
            state.waiterID &+= 1
            return state.waiterID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLockedValue { state -> Bool in
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

    /// Returns when notified, after `timeout`, or when the task is cancelled.
    func wait(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.wait() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    private func cancelWaiter(id: UInt64) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
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
