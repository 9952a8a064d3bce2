import Foundation
import PigeonBenchSupport

/// The TCP connections a process holds, read from Linux's `/proc` (empty where it is unavailable).
enum TCPConnections {
    /// The local ports of `pid`'s TCP connections whose remote end is port `remotePort` (e.g. its PostgreSQL
    /// connections): what `pg_stat_activity.client_port` shows for them on a server on this machine.
    static func localPorts(of pid: pid_t, remotePort: Int) -> Set<Int> {
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
        var socketInodes: Set<Substring> = []
        for descriptor in descriptors {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(descriptor)"),
                target.hasPrefix("socket:[")
            else { continue }
            socketInodes.insert(Substring(target.dropFirst("socket:[".count).dropLast()))
        }
        guard !socketInodes.isEmpty else { return [] }
        var ports: Set<Int> = []
        for table in ["tcp", "tcp6"] {
            guard let text = ProcessStats.kernelFileText("/proc/\(pid)/net/\(table)") else { continue }
            // After a header line: `sl local_address rem_address st … uid timeout inode …`, addresses as HEX:PORT.
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(whereSeparator: \.isWhitespace)
                guard fields.count > 9, socketInodes.contains(fields[9]),
                    port(of: fields[2]) == remotePort, let local = port(of: fields[1])
                else { continue }
                ports.insert(local)
            }
        }
        return ports
    }

    private static func port(of address: Substring) -> Int? {
        address.split(separator: ":").last.flatMap { Int($0, radix: 16) }
    }
}
