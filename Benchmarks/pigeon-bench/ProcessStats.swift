import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Resource figures of a process, read from Linux's `/proc` (`nil` where it is unavailable).
enum ProcessStats {
    /// The resident set size (`VmRSS` of `/proc/PID/status`) in bytes.
    static func residentBytes(of pid: pid_t) -> UInt64? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 2, let kibibytes = UInt64(fields[1]) else { return nil }
            return kibibytes * 1024
        }
        return nil
    }

    /// User plus system CPU time consumed so far (`utime` + `stime` of `/proc/PID/stat`), in seconds.
    static func cpuSeconds(of pid: pid_t) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let afterName = stat.lastIndex(of: ")")
        else { return nil }
        // Fields after the parenthesised command name start at field 3 (state); utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: afterName)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// This process's id.
    static var currentPID: pid_t { getpid() }

    /// Raises this process's soft limit on open files to its hard limit, so that it (and any server it spawns,
    /// which inherits the limit) can hold thousands of sockets. Returns the new soft limit.
    static func raiseOpenFileLimit() throws -> UInt64 {
        var limit = rlimit()
        guard getrlimit(resourceOpenFiles, &limit) == 0 else { throw BenchError.system("getrlimit", errno) }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            guard setrlimit(resourceOpenFiles, &limit) == 0 else { throw BenchError.system("setrlimit", errno) }
        }
        return UInt64(limit.rlim_cur)
    }

    #if canImport(Glibc)
    private static let resourceOpenFiles = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
    private static let resourceOpenFiles = RLIMIT_NOFILE
    #endif
}
