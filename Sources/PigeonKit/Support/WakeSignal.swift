import NIOConcurrencyHelpers
import PigeonProtocol

/// Wakes one waiting loop. Signals coalesce: any number of signals while the loop is busy wake it once. Timed waits
/// run on the engine's clock.
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let clock: ElapsedClock
    private let state = NIOLockedValueBox(State())

    init(clock: ElapsedClock) {
        self.clock = clock
    }

    func signal() {
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

    /// Returns at the next signal (at once if one is pending), after `timeout` when given, or on cancellation.
    func wait(timeout: Duration? = nil) async {
        guard let timeout else { return await waitForSignal() }
        if timeout <= .zero {
            state.withLockedValue { $0.pending = false }
            return
        }
        await wait(until: clock.now.advanced(by: timeout))
    }

    /// Returns at the next signal (at once if one is pending), when the clock reaches `deadline` when given, or on
    /// cancellation.
    func wait(until deadline: ElapsedClock.Instant?) async {
        guard let deadline else { return await waitForSignal() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForSignal() }
            group.addTask { try? await self.clock.sleep(until: deadline) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLockedValue { state -> Bool in
                    if state.pending || Task.isCancelled {
                        state.pending = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
