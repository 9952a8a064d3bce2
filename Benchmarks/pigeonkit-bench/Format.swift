import Foundation

/// How the figures are printed.
enum Format {
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

    /// Megabytes of 1,000,000 bytes (the unit of the target), with MiB beside.
    static func megabytes(_ bytes: UInt64?) -> String {
        guard let bytes else { return "n/a" }
        return String(format: "%.1f MB (%.1f MiB)", Double(bytes) / 1_000_000, Double(bytes) / 1_048_576)
    }

    /// The resident set size with its parts.
    static func memory(_ snapshot: MemorySnapshot?) -> String {
        guard let snapshot else { return "n/a (no /proc/self/status on this system)" }
        func mb(_ bytes: UInt64) -> String { String(format: "%.1f", Double(bytes) / 1_000_000) }
        return "\(megabytes(snapshot.resident)): anonymous \(mb(snapshot.residentAnonymous)) MB + file-backed \(mb(snapshot.residentFile)) MB"
    }

    static func seconds(_ value: Double) -> String {
        value < 10 ? String(format: "%.3f s", value) : String(format: "%.1f s", value)
    }

    static func count(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (offset, digit) in digits.enumerated() {
            if offset > 0, (digits.count - offset) % 3 == 0 { grouped.append(",") }
            grouped.append(digit)
        }
        return value < 0 ? "-" + grouped : grouped
    }

    static func verdict(_ met: Bool?) -> String {
        switch met {
        case true?: "PASS"
        case false?: "MISS"
        case nil: "n/a"
        }
    }
}

extension Duration {
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

/// Writes a line to standard output at once (unbuffered, so that progress shows when the output is piped).
func say(_ line: String = "") {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
