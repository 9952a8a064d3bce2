import PigeonTestSupport

extension ManualClock {
    /// Moves the time forward `step` at a time until `condition` holds, letting the client act in real time between
    /// steps (its I/O with the server is real); throws after `timeout` of real time. For a client whose waits run
    /// on this clock (``PigeonClient/Configuration-swift.struct/clock``) and a step that needs some of its time to
    /// pass: a retry's backoff, an ACK deadline, the receipt delay.
    func advance(
        by step: Duration, until what: @autoclosure () -> String, timeout: Duration = .seconds(20), _ condition: () async throws -> Bool
    ) async throws {
        try await waitUntil(what(), timeout: timeout, every: .milliseconds(5)) {
            if try await condition() { return true }
            self.advance(by: step)
            return false
        }
    }
}
