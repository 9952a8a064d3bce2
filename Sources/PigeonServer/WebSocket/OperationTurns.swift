import NIOConcurrencyHelpers

/// Turns for one WebSocket's operations while the before-send hook is asked: each operation takes a turn in the order
/// the socket sent it (``take()``), may do its slow part (asking the hook) beside the others, and then waits for its
/// turn (``wait(for:)``) before it appends or acts, handing the turn on with ``finish(_:)``. So a socket's sends are
/// asked concurrently and still appended, and its other operations still act, in its order (invariant 5).
///
/// At most ``limit`` operations hold turns at once: ``take()`` waits while that many are unfinished, which bounds
/// what one socket can have in flight. Every turn taken must be finished, whatever happens to its operation.
final class OperationTurns: Sendable {
    private struct State {
        var nextTicket = 0
        /// The ticket whose turn it is: every earlier one finished.
        var current = 0
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Someone waiting in ``take()`` for a free place.
        var waitingForPlace: CheckedContinuation<Void, Never>?
    }

    let limit: Int
    private let state = NIOLockedValueBox(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// The next turn, in the order of the calls; waits while ``limit`` turns are unfinished. One caller at a time.
    func take() async -> Int {
        while true {
            let ticket = state.withLockedValue { state -> Int? in
                guard state.nextTicket - state.current < limit else { return nil }
                defer { state.nextTicket += 1 }
                return state.nextTicket
            }
            if let ticket { return ticket }
            await withCheckedContinuation { continuation in
                let free = state.withLockedValue { state -> Bool in
                    guard state.nextTicket - state.current >= limit else { return true }
                    state.waitingForPlace = continuation
                    return false
                }
                if free { continuation.resume() }
            }
        }
    }

    /// Returns once every earlier turn is finished.
    func wait(for ticket: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLockedValue { state -> Bool in
                guard state.current != ticket else { return true }
                state.waiting[ticket] = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Ends `ticket`'s turn (it must be the current one: call it after ``wait(for:)``) and hands the turn on.
    func finish(_ ticket: Int) {
        let (next, place) = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, CheckedContinuation<Void, Never>?) in
            state.current = ticket + 1
            let place = state.waitingForPlace
            state.waitingForPlace = nil
            return (state.waiting.removeValue(forKey: state.current), place)
        }
        next?.resume()
        place?.resume()
    }
}
