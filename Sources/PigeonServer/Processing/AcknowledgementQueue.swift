import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Buffer entries whose processing ended, on their way to ``IngestBuffer/acknowledge(entryIds:)``.
///
/// One consumer takes everything gathered so far at once: what the batches of several partitions finished while an
/// acknowledgement was in flight goes to the buffer in the next one call (one round trip to Redis).
final class AcknowledgementQueue: Sendable {
    private struct State {
        var entryIds: [String] = []
        var isFinished = false
    }

    private let state = NIOLockedValueBox(State())
    private let signal = AsyncSignal()

    func add(_ entryIds: [String]) {
        guard !entryIds.isEmpty else { return }
        state.withLockedValue { $0.entryIds.append(contentsOf: entryIds) }
        signal.notify()
    }

    /// No more entries will come; ``next()`` returns what is left, then `nil`.
    func finish() {
        state.withLockedValue { $0.isFinished = true }
        signal.notify()
    }

    /// Everything added since the last call, waiting for some; `nil` once finished and empty, or when the task is
    /// cancelled (what is left stays unacknowledged, and the buffer hands it out again).
    func next() async -> [String]? {
        while !Task.isCancelled {
            let (entryIds, isFinished) = state.withLockedValue { state in
                defer { state.entryIds = [] }
                return (state.entryIds, state.isFinished)
            }
            if !entryIds.isEmpty { return entryIds }
            if isFinished { return nil }
            await signal.wait()
        }
        return nil
    }
}
