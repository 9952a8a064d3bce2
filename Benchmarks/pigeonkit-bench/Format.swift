import Foundation
import PigeonBenchSupport
import PigeonKitBenchDevice

/// pigeonkit-bench's figures (``Format`` has the counts and memory sizes both benchmarks show).
extension Format {
    /// A latency given in microseconds: µs below a millisecond, ms above.
    static func microseconds(_ value: Double) -> String {
        if value < 10 { return String(format: "%.2f µs", value) }
        if value < 1_000 { return String(format: "%.0f µs", value) }
        return String(format: "%.2f ms", value / 1_000)
    }

    static func latency(_ summary: LatencySummary) -> String {
        "p50 \(microseconds(summary.p50Microseconds)), p99 \(microseconds(summary.p99Microseconds)), "
            + "max \(microseconds(summary.maxMicroseconds)) (\(count(summary.count)) samples)"
    }

    /// Seconds, to the millisecond below 10 s (the catch-up target is 1 s).
    static func seconds(_ value: Double) -> String {
        value < 10 ? String(format: "%.3f s", value) : String(format: "%.1f s", value)
    }

    static func verdict(_ met: Bool?) -> String {
        switch met {
        case true?: "PASS"
        case false?: "MISS"
        case nil: "n/a"
        }
    }
}

/// Writes a line to standard output at once (unbuffered, so that progress shows when the output is piped).
func say(_ line: String = "") {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
