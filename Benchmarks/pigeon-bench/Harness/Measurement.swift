import PigeonBenchSupport


extension Duration {
    /// The duration in whole microseconds, rounded down and never negative (the histograms' unit).
    var microseconds: UInt64 {
        let (seconds, attoseconds) = components
        return UInt64(max(0, seconds * 1_000_000 + attoseconds / 1_000_000_000_000))
    }
}

/// The timeline of one run: a warm-up whose results are not counted, then the measured window. Senders stop
/// sending when the window ends.
struct MeasurementWindow: Sendable {
    /// When measuring starts (the warm-up ends).
    let start: ContinuousClock.Instant
    /// When measuring and sending stop.
    let end: ContinuousClock.Instant

    /// A window that starts after `warmup` from now and lasts `duration`.
    init(warmup: Duration, duration: Duration) {
        start = .now + warmup
        end = start + duration
    }

    func contains(_ instant: ContinuousClock.Instant) -> Bool {
        instant >= start && instant < end
    }

    var seconds: Double { (end - start).seconds }
}
