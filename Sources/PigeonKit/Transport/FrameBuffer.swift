import NIOConcurrencyHelpers
import PigeonProtocol

/// Frames between a connection's reader and its one consumer. The consumer takes everything that arrived since
/// its last call, so a burst (a catch-up of thousands of events) is written to the database in a few large
/// transactions instead of one per event.
///
/// Bounded: past ``capacity`` frames waiting, ``append(_:)`` waits until the consumer takes them, so the reader stops
/// reading and the connection's back-pressure reaches the server. A resumed stream that replays thousands of
/// events is then held a batch at a time, not whole (it was: 10,000 decoded events at once, most of a device's
/// memory peak during a catch-up).
final class FrameBuffer: Sendable {
    /// Frames waiting before the reader waits too.
    let capacity: Int

    private struct State {
        var frames: [ServerFrame] = []
        var waiter: CheckedContinuation<[ServerFrame]?, any Error>?
        /// The reader, waiting for room.
        var spaceWaiter: CheckedContinuation<Void, Never>?
        var finished = false
        var failure: (any Error)?
    }

    private let state = NIOLockedValueBox(State())

    init(capacity: Int = 500) {
        self.capacity = capacity
    }

    /// Hands `frame` to the consumer; waits while ``capacity`` frames are waiting (not after ``finish(_:)``).
    func append(_ frame: ServerFrame) async {
        let (waiter, full) = state.withLockedValue { state -> (CheckedContinuation<[ServerFrame]?, any Error>?, Bool) in
            guard !state.finished else { return (nil, false) }
            if let waiter = state.waiter {
                state.waiter = nil
                return (waiter, false)
            }
            state.frames.append(frame)
            return (nil, state.frames.count >= capacity)
        }
        waiter?.resume(returning: [frame])
        guard full else { return }
        await withCheckedContinuation { space in
            let full = state.withLockedValue { state -> Bool in
                guard !state.finished, state.frames.count >= capacity else { return false }
                state.spaceWaiter = space
                return true
            }
            if !full { space.resume() }
        }
    }

    /// Ends the sequence after the frames already buffered (with `error`, when the connection failed).
    func finish(_ error: (any Error)? = nil) {
        let (waiter, spaceWaiter) = state.withLockedValue { state -> (CheckedContinuation<[ServerFrame]?, any Error>?, CheckedContinuation<Void, Never>?) in
            guard !state.finished else { return (nil, nil) }
            state.finished = true
            state.failure = error
            defer {
                state.waiter = nil
                state.spaceWaiter = nil
            }
            return (state.waiter, state.spaceWaiter)
        }
        spaceWaiter?.resume()
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }

    var isFinished: Bool { state.withLockedValue { $0.finished } }

    func nextBatch() async throws -> [ServerFrame]? {
        try await withCheckedThrowingContinuation { continuation in
            var spaceWaiter: CheckedContinuation<Void, Never>?
            let outcome = state.withLockedValue { state -> Result<[ServerFrame]?, any Error>? in
                if !state.frames.isEmpty {
                    spaceWaiter = state.spaceWaiter
                    state.spaceWaiter = nil
                    defer { state.frames = [] }
                    return .success(state.frames)
                }
                if state.finished {
                    if let failure = state.failure { return .failure(failure) }
                    return .success(nil)
                }
                state.waiter = continuation
                return nil
            }
            spaceWaiter?.resume()
            if let outcome { continuation.resume(with: outcome) }
        }
    }
}
