import NIOConcurrencyHelpers

/// A clock whose time moves only when a test calls ``advance(by:)``: retry, timeout, lease and backoff logic is
/// tested without sleeping, and "nothing happens before the deadline" is a fact, not a fixed wait that hopes.
///
/// Sleepers are resumed in deadline order when an advance reaches their deadline; a cancelled sleeper throws
/// `CancellationError` at once. ``waitForSleepers(atLeast:)`` lets a test wait until the code under test is parked on
/// the clock before advancing it, so an advance is never lost to a race.
public final class ManualClock: Clock, Sendable {
    /// A point on the manual clock: the time advanced since it was made.
    public struct Instant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
        public var offset: Duration

        public init(offset: Duration) { self.offset = offset }
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
        public var description: String { "t+\(offset)" }
    }

    private struct Sleeper {
        let id: UInt64
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var nextId: UInt64 = 0
        var sleepers: [Sleeper] = []
        /// Sleeps cancelled before they were registered.
        var cancelled: Set<UInt64> = []
    }

    private let state = NIOLockedValueBox(State())

    public init() {}

    public var now: Instant { state.withLockedValue { $0.now } }
    public var minimumResolution: Duration { .zero }

    /// How many sleeps are waiting for the clock.
    public var sleeperCount: Int { state.withLockedValue { $0.sleepers.count } }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLockedValue { state in
            state.nextId += 1
            return state.nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Void, any Error>? = state.withLockedValue { state in
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper: Sleeper? = state.withLockedValue { state in
                if let index = state.sleepers.firstIndex(where: { $0.id == id }) { return state.sleepers.remove(at: index) }
                state.cancelled.insert(id)
                return nil
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the time forward by `duration` and wakes, in deadline order, every sleep that is then due.
    public func advance(by duration: Duration) {
        precondition(duration >= .zero, "a manual clock only moves forward")
        let due: [Sleeper] = state.withLockedValue { state in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Moves the time to `instant` (if it is later than now).
    public func advance(to instant: Instant) {
        advance(by: max(.zero, now.duration(to: instant)))
    }

    /// Waits (polling briefly on the real clock) until at least `count` sleeps are waiting on this clock: call it
    /// before ``advance(by:)`` when the code under test must be parked first. Throws after `timeout` of real time.
    public func waitForSleepers(atLeast count: Int = 1, timeout: Duration = .seconds(10)) async throws {
        try await waitUntil("\(count) sleep(s) wait on the manual clock", timeout: timeout, every: .milliseconds(1),
            describe: { "\(self.sleeperCount) waiting" }) { self.sleeperCount >= count }
    }
}
