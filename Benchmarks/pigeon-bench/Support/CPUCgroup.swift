import Foundation
import PigeonBenchSupport

#if canImport(Glibc)
import Glibc
#endif

/// A cgroup this run created (see ``CgroupCPUController/makeGroup(name:cores:)``) whose members together get at most
/// `cores` of CPU time: the kernel throttles them for the rest of each 100 ms period once they have used their quota.
/// Whoever creates one removes it with ``remove(within:)`` once its processes have exited.
struct CPUCgroup: Sendable {
    /// The group's directory.
    let path: String
    /// The group as `/proc/PID/cgroup` names it.
    let relativePath: String
    let version: CgroupCPUController.Version
    /// The limit set when the group was made, in cores.
    let cores: Double

    /// Moves every thread of `pid` into the group (threads it starts later are born there), then checks that each
    /// one is in it.
    func add(_ pid: pid_t) throws {
        do {
            try Self.writeControlFile(path + "/cgroup.procs", "\(pid)")
        } catch {
            // cgroup v1 also takes threads one by one.
            guard version == .v1 else { throw error }
            for thread in Self.threads(of: pid) {
                try Self.writeControlFile(path + "/tasks", "\(thread)")
            }
        }
        let outside = Self.threads(of: pid).filter { contains(thread: $0, of: pid) == false }
        guard outside.isEmpty else {
            throw BenchError.commandFailed("threads \(outside) of process \(pid) are not in \(path) after moving it there")
        }
    }

    /// Whether every thread of `pid` is in the group (`false` if the process is gone).
    func containsAllThreads(of pid: pid_t) -> Bool {
        let threads = Self.threads(of: pid)
        return !threads.isEmpty && threads.allSatisfy { contains(thread: $0, of: pid) != false }
    }

    /// Sets the group's limit to `cores`.
    func limit(to cores: Double) throws {
        let period = CgroupCPUController.periodMicroseconds
        // The kernel refuses quotas below 1 ms.
        let quota = max(1000, Int((cores * Double(period)).rounded()))
        switch version {
        case .v1:
            try Self.writeControlFile(path + "/cpu.cfs_period_us", "\(period)")
            try Self.writeControlFile(path + "/cpu.cfs_quota_us", "\(quota)")
        case .v2:
            try Self.writeControlFile(path + "/cpu.max", "\(quota) \(period)")
        }
    }

    /// Takes the limit away (the processes stay in the group).
    func lift() throws {
        switch version {
        case .v1: try Self.writeControlFile(path + "/cpu.cfs_quota_us", "-1")
        case .v2: try Self.writeControlFile(path + "/cpu.max", "max \(CgroupCPUController.periodMicroseconds)")
        }
    }

    /// The group's bandwidth counters so far (`cpu.stat`), or `nil` if they cannot be read.
    func throttling() -> CPUThrottling? {
        guard let stat = ProcessStats.kernelFileText(path + "/cpu.stat") else { return nil }
        var values: [Substring: Int] = [:]
        for line in stat.split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count == 2, let value = Int(fields[1]) { values[fields[0]] = value }
        }
        guard let periods = values["nr_periods"], let throttled = values["nr_throttled"] else { return nil }
        return CPUThrottling(periods: periods, throttledPeriods: throttled)
    }

    /// Removes the group, trying again while it still has members (a process that was just stopped may take a moment
    /// to leave) until `limit` has passed. Returns what was left behind, in words, or `nil` when it is gone.
    func remove(within limit: Duration) async -> String? {
        let deadline = ContinuousClock.now + limit
        var lastError: Int32 = 0
        let removed = (try? await waitUntil(deadline, polling: .milliseconds(50)) {
            if rmdir(path) == 0 || errno == ENOENT { return true }
            lastError = errno
            return false
        }) ?? false
        return removed ? nil : "cgroup \(path) (rmdir failed with errno \(lastError); remove it with `rmdir \(path)`)"
    }

    /// Writes `value` into the control file at `path` in one write, as the cgroup interface expects.
    static func writeControlFile(_ path: String, _ value: String) throws {
        let descriptor = open(path, O_WRONLY)
        guard descriptor >= 0 else { throw BenchError.system("open \(path)", errno) }
        defer { close(descriptor) }
        let bytes = Array(value.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw BenchError.system("writing \"\(value)\" to \(path)", errno) }
    }

    /// Whether the thread is in the group; `nil` if it has ended since it was listed.
    private func contains(thread: pid_t, of pid: pid_t) -> Bool? {
        guard let membership = ProcessStats.kernelFileText("/proc/\(pid)/task/\(thread)/cgroup") else { return nil }
        // Lines are `ID:CONTROLLERS:PATH`; v2's has no controllers (`0::PATH`), v1's cpu line lists `cpu`.
        return membership.split(separator: "\n").contains { line in
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[2] == relativePath else { return false }
            return version == .v2 ? fields[1].isEmpty : fields[1].split(separator: ",").contains("cpu")
        }
    }

    private static func threads(of pid: pid_t) -> [pid_t] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).compactMap { pid_t($0) }.sorted()
    }
}

/// A cgroup's CPU bandwidth counters: how many 100 ms periods its members ran in, and in how many of them they used
/// up the quota and were made to wait.
struct CPUThrottling: Codable, Sendable {
    var periods: Int
    var throttledPeriods: Int

    /// The counters from `earlier` to this reading.
    func since(_ earlier: CPUThrottling) -> CPUThrottling {
        CPUThrottling(periods: periods - earlier.periods, throttledPeriods: throttledPeriods - earlier.throttledPeriods)
    }

    /// Throttled periods / periods, or `nil` without periods.
    var throttledFraction: Double? { periods > 0 ? Double(throttledPeriods) / Double(periods) : nil }
}
