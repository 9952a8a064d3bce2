import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Resource figures of a process, read from Linux's `/proc` (`nil` where it is unavailable).
public enum ProcessStats {
    /// The resident set size (`VmRSS` of `/proc/PID/status`) in bytes.
    public static func residentBytes(of pid: pid_t) -> UInt64? {
        statusBytes(of: "\(pid)")?["VmRSS"]
    }

    /// The figures in kB of `/proc/<process>/status` (`VmRSS`, `RssAnon`, `VmHWM`, …), in bytes, by name;
    /// `process` is a pid or `self`.
    static func statusBytes(of process: String) -> [String: UInt64]? {
        guard let status = try? String(contentsOfFile: "/proc/\(process)/status", encoding: .utf8) else { return nil }
        var fields: [String: UInt64] = [:]
        for line in status.split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == ":" || $0 == " " || $0 == "\t" })
            if parts.count == 3, parts[2] == "kB", let kibibytes = UInt64(parts[1]) { fields[String(parts[0])] = kibibytes * 1024 }
        }
        return fields
    }

    /// User plus system CPU time consumed so far (`utime` + `stime` of `/proc/PID/stat`), in seconds (to the clock tick).
    public static func cpuSeconds(of pid: pid_t) -> Double? {
        guard let fields = statFields(of: pid), let user = Double(fields[utime]), let system = Double(fields[stime]) else { return nil }
        return (user + system) / clockTicksPerSecond
    }

    /// CPU time this process has used so far (every thread, user and system), in seconds, to the nanosecond.
    public static var cpuSecondsOfThisProcess: Double {
        var time = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// CPU time of `pid` and its children so far, in seconds: its own, that of the children it has waited for
    /// (`cutime` + `cstime`), and that of its live children. The difference of two readings counts a service that
    /// forks a process per connection (PostgreSQL) fully, whether the children exit in between or not.
    public static func cpuSecondsWithChildren(of pid: pid_t) -> Double? {
        guard let fields = statFields(of: pid) else { return nil }
        var ticks = 0.0
        for field in [utime, stime, cutime, cstime] {
            guard let value = Double(fields[field]) else { return nil }
            ticks += value
        }
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for name in processes {
            guard let child = pid_t(name), child != pid, let childFields = statFields(of: child), childFields[parentPID] == "\(pid)",
                let user = Double(childFields[utime]), let system = Double(childFields[stime])
            else { continue }
            ticks += user + system
        }
        return ticks / clockTicksPerSecond
    }

    /// Context switches of each thread of `pid` so far, by thread id: `voluntary_ctxt_switches` +
    /// `nonvoluntary_ctxt_switches` of `/proc/PID/task/TID/status`; `nil` if the process is gone or the figures are
    /// unavailable.
    public static func threadContextSwitches(of pid: pid_t) -> [pid_t: Int]? {
        guard let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return nil }
        var switches: [pid_t: Int] = [:]
        for thread in threads {
            guard let tid = pid_t(thread),
                let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/status", encoding: .utf8)
            else { continue }
            for line in status.split(separator: "\n") {
                guard line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:"),
                    let value = line.split(whereSeparator: { $0 == ":" || $0 == " " || $0 == "\t" }).last.flatMap({ Int($0) })
                else { continue }
                switches[tid, default: 0] += value
            }
        }
        return switches.isEmpty ? nil : switches
    }

    /// The context switches of `pid`'s threads between two readings of ``threadContextSwitches(of:)``: for each
    /// thread alive at the second, its switches since the first (all of them if it was born in between), and how
    /// many threads of the first reading had exited by the second. A thread that exits in between takes the
    /// switches it made there with it: they are missed (the servers measured keep their threads, so `exited` is
    /// normally 0).
    public static func contextSwitches(from before: [pid_t: Int], to after: [pid_t: Int]) -> (switches: Int, exited: Int) {
        let switches = after.reduce(0) { total, thread in total + max(0, thread.value - (before[thread.key] ?? 0)) }
        return (switches, before.keys.filter { after[$0] == nil }.count)
    }

    /// The process's command name (`/proc/PID/comm`, e.g. `postgres`), or `nil` if there is no such process.
    public static func commandName(of pid: pid_t) -> String? {
        (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The parent's process id (`ppid` of `/proc/PID/stat`).
    public static func parentPID(of pid: pid_t) -> pid_t? {
        statFields(of: pid).flatMap { pid_t($0[parentPID]) }
    }

    /// The fields of `/proc/PID/stat` after the parenthesised command name, which start at field 3 (state): field N
    /// is at index N − 3. Only returned when it has at least the fields read here.
    private static func statFields(of pid: pid_t) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let afterName = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: afterName)...].split(separator: " ")
        return fields.count > cstime ? fields : nil
    }

    // Indexes into `statFields`: ppid is field 4; utime, stime, cutime and cstime are fields 14 to 17.
    private static let parentPID = 1
    private static let utime = 11
    private static let stime = 12
    private static let cutime = 13
    private static let cstime = 14

    private static var clockTicksPerSecond: Double { Double(sysconf(Int32(_SC_CLK_TCK))) }

    /// The whole text of a file of `/proc` or `/sys`, or `nil` if it cannot be read. Such files report a size of 0
    /// and hand out their text over several reads; `String(contentsOfFile:)` can stop after the first (4 KiB).
    public static func kernelFileText(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        do {
            return String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
        } catch {
            return nil
        }
    }

    /// This process's id.
    public static var currentPID: pid_t { getpid() }

    /// Raises this process's soft limit on open files to its hard limit, so that it (and any server it spawns,
    /// which inherits the limit) can hold thousands of sockets. Returns the new soft limit.
    public static func raiseOpenFileLimit() throws -> UInt64 {
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

/// This process's memory, from Linux's `/proc/self/status` (`nil` elsewhere: on Darwin the figures are skipped).
public struct MemorySnapshot: Codable, Sendable {
    /// The resident set size (`VmRSS`), in bytes.
    public var resident: UInt64
    /// Its anonymous part (`RssAnon`: heap, stacks) and its file-backed part (`RssFile`: the executable's and the
    /// libraries' pages that were touched).
    public var residentAnonymous: UInt64
    public var residentFile: UInt64
    /// The largest resident set size so far (`VmHWM`).
    public var peak: UInt64

    public static var now: MemorySnapshot? {
        guard let fields = ProcessStats.statusBytes(of: "self"), let resident = fields["VmRSS"] else { return nil }
        return MemorySnapshot(
            resident: resident, residentAnonymous: fields["RssAnon"] ?? 0, residentFile: fields["RssFile"] ?? 0,
            peak: fields["VmHWM"] ?? resident)
    }
}

/// Where a process's file-backed resident memory comes from (`Rss` of `/proc/self/smaps`, summed by mapping): its own
/// executable, the Swift runtime and Foundation (the toolchain's shared libraries), and the other libraries (the C
/// library, libstdc++, SQLite…). Pages of code that were touched; on a phone they are clean pages the system can drop,
/// not counted against the app the way its anonymous memory is.
public struct FileBackedMemory: Codable, Sendable {
    public var executable: UInt64
    public var swiftRuntimeAndFoundation: UInt64
    public var otherLibraries: UInt64
    /// Each mapped file's resident bytes, by file name (the executable's included).
    public var byFile: [String: UInt64] = [:]

    /// The `count` files with the most resident bytes, most first.
    public func largest(_ count: Int) -> [(name: String, bytes: UInt64)] {
        byFile.sorted { $0.value > $1.value }.prefix(count).map { (name: $0.key, bytes: $0.value) }
    }

    /// Toolchain libraries: the Swift runtime, its concurrency and Foundation libraries, Dispatch.
    private static let runtimePrefixes = ["libswift", "libFoundation", "lib_Foundation", "libdispatch", "libBlocksRuntime"]

    public static var now: FileBackedMemory? {
        guard let smaps = FileHandle(forReadingAtPath: "/proc/self/smaps").flatMap({ try? $0.readToEnd() }),
            let executable = Bundle.main.executablePath.map({ URL(fileURLWithPath: $0).resolvingSymlinksInPath().path })
        else { return nil }
        var memory = FileBackedMemory(executable: 0, swiftRuntimeAndFoundation: 0, otherLibraries: 0)
        var path: Substring = ""
        for line in String(decoding: smaps, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let first = fields.first, first.contains("-"), first.first?.isHexDigit == true {
                path = fields.count > 5 && fields[5].hasPrefix("/") ? fields[5] : ""
            } else if fields.first == "Rss:", fields.count >= 2, let kibibytes = UInt64(fields[1]), !path.isEmpty {
                let bytes = kibibytes * 1024
                let name = path.split(separator: "/").last.map(String.init) ?? ""
                memory.byFile[name, default: 0] += bytes
                if path == executable {
                    memory.executable += bytes
                } else if runtimePrefixes.contains(where: { name.hasPrefix($0) }) {
                    memory.swiftRuntimeAndFoundation += bytes
                } else {
                    memory.otherLibraries += bytes
                }
            }
        }
        return memory
    }
}
