import NIOConcurrencyHelpers
import PigeonProtocol

/// Frames between a connection's reader and its one consumer. The consumer takes everything that arrived since
/// its last call, so a burst (a catch-up of thousands of events) is written to the database in a few large
/// transactions instead of one per event.
final class FrameBuffer: Sendable {
    private struct State {
        var frames: [ServerFrame] = []
        var waiter: CheckedContinuation<[ServerFrame]?, any Error>?
        var finished = false
        var failure: (any Error)?
    }

    private let state = NIOLockedValueBox(State())

    func append(_ frame: ServerFrame) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<[ServerFrame]?, any Error>? in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.frames.append(frame)
            return nil
        }
        waiter?.resume(returning: [frame])
    }

    /// Ends the sequence after the frames already buffered (with `error`, when the connection failed).
    func finish(_ error: (any Error)? = nil) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<[ServerFrame]?, any Error>? in
            guard !state.finished else { return nil }
            state.finished = true
            state.failure = error
            defer { state.waiter = nil }
            return state.waiter
        }
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }

    var isFinished: Bool { state.withLockedValue { $0.finished } }

    func nextBatch() async throws -> [ServerFrame]? {
        try await withCheckedThrowingContinuation { continuation in
            let outcome = state.withLockedValue { state -> Result<[ServerFrame]?, any Error>? in
                if !state.frames.isEmpty {
                    defer { state.frames.removeAll(keepingCapacity: true) }
                    return .success(state.frames)
                }
                if state.finished {
                    if let failure = state.failure { return .failure(failure) }
                    return .success(nil)
                }
                state.waiter = continuation
                return nil
            }
            if let outcome { continuation.resume(with: outcome) }
        }
    }
}
