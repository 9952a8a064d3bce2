import Foundation

/// How the benchmarks show numbers: thousands separators, fixed units, "n/a" for what was not measured. Each
/// benchmark adds the figures of its own (latencies, seconds at the precision its targets need) in an extension.
public enum Format {
    public static func count(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var grouped = ""
        for (offset, digit) in digits.enumerated() {
            if offset > 0, (digits.count - offset) % 3 == 0 { grouped.append(",") }
            grouped.append(digit)
        }
        return value < 0 ? "-" + grouped : grouped
    }

    public static func mebibytes(_ bytes: UInt64?) -> String {
        guard let bytes else { return "n/a" }
        return String(format: "%.1f MiB", Double(bytes) / 1_048_576)
    }

    /// Megabytes of 1,000,000 bytes (the unit of the client's memory target), with MiB beside.
    public static func megabytes(_ bytes: UInt64?) -> String {
        guard let bytes else { return "n/a" }
        return String(format: "%.1f MB (%.1f MiB)", Double(bytes) / 1_000_000, Double(bytes) / 1_048_576)
    }

    /// A resident set size with its parts.
    public static func memory(_ snapshot: MemorySnapshot?) -> String {
        guard let snapshot else { return "n/a (no /proc/self/status on this system)" }
        func mb(_ bytes: UInt64) -> String { String(format: "%.1f", Double(bytes) / 1_000_000) }
        return "\(megabytes(snapshot.resident)): anonymous \(mb(snapshot.residentAnonymous)) MB + file-backed \(mb(snapshot.residentFile)) MB"
    }
}

extension Duration {
    /// The duration as fractional seconds.
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
