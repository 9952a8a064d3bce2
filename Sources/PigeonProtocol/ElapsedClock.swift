/// A clock given as `any Clock<Duration>` (the real one unless a test injects a manual clock), with instants counted
/// from the moment it was wrapped: one concrete instant type whatever the clock, for the client engine's backoffs,
/// ACK deadlines, receipt delays and catch-up periods, and the Redis buffer's heartbeats and leases. A test moves
/// them by advancing its clock. (Package-internal: not part of the wire types apps see.)
package struct ElapsedClock: Sendable {
    /// A point in this clock's time: how long after it was wrapped.
    package struct Instant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
        package var sinceStart: Duration

        package init(sinceStart: Duration) { self.sinceStart = sinceStart }
        package func advanced(by duration: Duration) -> Instant { Instant(sinceStart: sinceStart + duration) }
        package func duration(to other: Instant) -> Duration { other.sinceStart - sinceStart }
        package static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.sinceStart < rhs.sinceStart }
        package var description: String { "t+\(sinceStart)" }

        package static func + (lhs: Instant, rhs: Duration) -> Instant { lhs.advanced(by: rhs) }
        package static func - (lhs: Instant, rhs: Duration) -> Instant { lhs.advanced(by: .zero - rhs) }
        package static func - (lhs: Instant, rhs: Instant) -> Duration { rhs.duration(to: lhs) }
        package static func += (lhs: inout Instant, rhs: Duration) { lhs = lhs + rhs }
    }

    private let read: @Sendable () -> Instant
    private let sleeper: @Sendable (Instant) async throws -> Void

    package init(_ clock: any Clock<Duration>) {
        self.init(opening: clock)
    }

    private init<C: Clock<Duration>>(opening clock: C) {
        let start = clock.now
        read = { Instant(sinceStart: start.duration(to: clock.now)) }
        sleeper = { deadline in try await clock.sleep(until: start.advanced(by: deadline.sinceStart), tolerance: nil) }
    }

    package var now: Instant { read() }

    /// Returns once the clock reaches `deadline` (at once when it has); throws `CancellationError` when the task is
    /// cancelled first.
    package func sleep(until deadline: Instant) async throws {
        try await sleeper(deadline)
    }

    package func sleep(for duration: Duration) async throws {
        try await sleep(until: now.advanced(by: duration))
    }
}
