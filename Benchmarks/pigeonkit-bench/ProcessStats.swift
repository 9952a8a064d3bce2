import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// This process's memory, from Linux's `/proc/self/status` (`nil` elsewhere: on Darwin the figures are skipped).
struct MemorySnapshot: Codable, Sendable {
    /// The resident set size (`VmRSS`), in bytes: the figure the target is about.
    var resident: UInt64
    /// Its anonymous part (`RssAnon`: heap, stacks) and its file-backed part (`RssFile`: the executable's and the
    /// libraries' pages that were touched).
    var residentAnonymous: UInt64
    var residentFile: UInt64
    /// The largest resident set size so far (`VmHWM`).
    var peak: UInt64

    static var now: MemorySnapshot? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        var fields: [Substring: UInt64] = [:]
        for line in status.split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == ":" || $0 == " " || $0 == "\t" })
            if parts.count >= 2, let kibibytes = UInt64(parts[1]) { fields[parts[0]] = kibibytes * 1024 }
        }
        guard let resident = fields["VmRSS"] else { return nil }
        return MemorySnapshot(
            resident: resident, residentAnonymous: fields["RssAnon"] ?? 0, residentFile: fields["RssFile"] ?? 0,
            peak: fields["VmHWM"] ?? resident)
    }
}

/// CPU time this process has used so far (every thread, user and system), in seconds.
enum ProcessCPU {
    static var seconds: Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
