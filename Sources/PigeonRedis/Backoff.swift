/// Reconnection delays: `initial` doubling after each failure up to `maximum`, with ±20% jitter so that many
/// clients do not reconnect in lockstep.
struct Backoff: Sendable {
    var initial: Duration = .milliseconds(50)
    var maximum: Duration = .seconds(2)

    /// The delay before the attempt that follows `failures` consecutive failures.
    func delay(afterFailures failures: Int) -> Duration {
        let base = min(maximum, initial * (1 << min(failures, 20)))
        return base * Double.random(in: 0.8...1.2)
    }
}
