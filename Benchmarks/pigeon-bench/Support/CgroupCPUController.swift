import Foundation
import PigeonBenchSupport

#if canImport(Glibc)
import Glibc
#endif

/// The cgroup cpu controller of this machine, through which ``CPUCgroup``s confine processes to a share of a core:
/// cgroup v2 (`cpu.max` in the unified hierarchy) or cgroup v1 (`cpu.cfs_quota_us` in the cpu hierarchy). A value
/// only exists once a probe group was created, limited and removed again, so a controller that is mounted but not
/// writable (no root, a read-only mount, a v2 group that holds processes) is reported as unavailable, with why.
struct CgroupCPUController: Sendable {
    /// Which interface the controller has.
    enum Version: String, Codable, Sendable {
        case v1 = "cgroup v1"
        case v2 = "cgroup v2"
    }

    let version: Version
    /// The mount point of the hierarchy; groups are created directly below it.
    let mountPoint: String

    /// The bandwidth period the limits use, in microseconds (the kernel's default).
    static let periodMicroseconds = 100_000

    /// The usable controller: v2 when the unified hierarchy offers `cpu`, else v1's cpu hierarchy; or why there is
    /// none, in words for the output.
    static func locate() async -> Result<CgroupCPUController, Unavailable> {
        guard let mounts = ProcessStats.kernelFileText("/proc/self/mounts") else {
            return .failure(Unavailable(reason: "cannot read /proc/self/mounts (not Linux?)"))
        }
        var candidates: [CgroupCPUController] = []
        var notes: [String] = []
        for line in mounts.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 4 else { continue }
            let mountPoint = String(fields[1])
            if fields[2] == "cgroup2" {
                let controllers = ProcessStats.kernelFileText(mountPoint + "/cgroup.controllers") ?? ""
                if controllers.split(whereSeparator: \.isWhitespace).contains("cpu") {
                    candidates.insert(CgroupCPUController(version: .v2, mountPoint: mountPoint), at: 0)
                } else {
                    notes.append("cgroup v2 at \(mountPoint) has no cpu controller (it is bound to v1)")
                }
            } else if fields[2] == "cgroup", fields[3].split(separator: ",").contains("cpu") {
                candidates.append(CgroupCPUController(version: .v1, mountPoint: mountPoint))
            }
        }
        guard !candidates.isEmpty else {
            return .failure(Unavailable(reason: (["no cgroup hierarchy with the cpu controller is mounted"] + notes).joined(separator: "; ")))
        }
        for candidate in candidates {
            do {
                try await candidate.probe()
                return .success(candidate)
            } catch {
                notes.append("\(candidate.version.rawValue) at \(candidate.mountPoint): \(error)")
            }
        }
        return .failure(Unavailable(reason: notes.joined(separator: "; ")))
    }

    /// Creates the group `name` below the mount point, limited to `cores` (a fraction of one core, or more).
    func makeGroup(name: String, cores: Double) throws -> CPUCgroup {
        let path = mountPoint + "/" + name
        guard mkdir(path, 0o755) == 0 else { throw BenchError.system("mkdir \(path)", errno) }
        let group = CPUCgroup(path: path, relativePath: "/" + name, version: version, cores: cores)
        do {
            try group.limit(to: cores)
        } catch {
            _ = rmdir(path)
            throw error
        }
        return group
    }

    /// Proves the controller usable: on v2 the cpu controller is enabled for the mount point's child groups (done
    /// here if it is not yet), then a group is created, limited and removed.
    private func probe() async throws {
        if version == .v2 {
            let subtreeControl = mountPoint + "/cgroup.subtree_control"
            let enabled = ProcessStats.kernelFileText(subtreeControl) ?? ""
            if !enabled.split(whereSeparator: \.isWhitespace).contains("cpu") {
                try CPUCgroup.writeControlFile(subtreeControl, "+cpu")
            }
        }
        let group = try makeGroup(name: "pigeon-bench-probe-\(getpid())", cores: 0.5)
        if let leftover = await group.remove(within: .seconds(2)) { throw BenchError.commandFailed(leftover) }
    }

    /// Why processes cannot be confined here.
    struct Unavailable: Error, CustomStringConvertible {
        let reason: String
        var description: String { reason }
    }
}
