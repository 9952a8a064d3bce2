import Foundation
import NIOCore
import NIOPosix

/// Where executables, ports and scratch directories come from.
public enum LocalEnvironment {
    /// The path of `name` on `PATH`, or in the system directories a non-login `PATH` often lacks (Debian installs
    /// mosquitto in `/usr/sbin`).
    public static func findExecutable(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]
        return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// A TCP port on 127.0.0.1 that nothing listens on right now (bound to port 0, read back, released), for a
    /// child process to listen on. A server in this process binds port 0 itself instead, which has no race.
    public static func freeLoopbackPort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let port = channel.localAddress?.port
        try await channel.close()
        guard let port else { throw BenchError.system("getsockname", 0) }
        return port
    }

    /// A new empty directory under the system's temporary directory.
    public static func makeTemporaryDirectory(prefix: String) throws -> String {
        let name = "\(prefix)-\(UUID().uuidString.prefix(8).lowercased())"
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(name).path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        return path
    }
}
