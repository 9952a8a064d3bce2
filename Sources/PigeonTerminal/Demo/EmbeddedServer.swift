import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonServer
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A Pigeon server (embedded store and buffer) inside this process, on a fixed loopback port and data directory,
/// so it can be stopped and started again with its data: the demo's "server restart".
final class EmbeddedServer: Sendable {
    let port: Int
    let dataDirectory: String
    private let running = NIOLockedValueBox<(group: ServiceGroup, task: Task<Void, any Error>)?>(nil)

    var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    init(dataDirectory: String, port: Int? = nil) throws {
        self.port = try port ?? Self.freePort()
        self.dataDirectory = dataDirectory
    }

    /// Starts the server and returns when it is listening.
    func start() async throws {
        var configuration = ServerConfiguration()
        configuration.port = port
        configuration.dataDirectory = dataDirectory
        configuration.keepAliveInterval = .seconds(30)
        configuration.shutdownDrainTimeout = .seconds(3)
        var logger = Logger(label: "pigeon-demo-server")
        logger.logLevel = .critical
        let app = try await PigeonApplication.make(configuration: configuration, logger: logger)
        let group = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
        running.withLockedValue { $0 = (group, Task { try await group.run() }) }
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if Self.accepts(port: port) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw CLIError("the embedded server did not start on port \(port)")
    }

    /// Stops it gracefully (what SIGTERM does to `pigeon-server`: it stores what it accepted) and waits.
    func stop() async {
        guard let (group, task) = running.withLockedValue({ running in
            defer { running = nil }
            return running
        }) else { return }
        await group.triggerGracefulShutdown()
        _ = await task.result
    }

    private static func socketFD() -> Int32 {
        #if canImport(Glibc)
        socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        socket(AF_INET, SOCK_STREAM, 0)
        #endif
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    /// Whether something listens on the loopback port.
    private static func accepts(port: Int) -> Bool {
        let fd = socketFD()
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// A loopback port nobody listens on now.
    static func freePort() throws -> Int {
        let fd = socketFD()
        guard fd >= 0 else { throw CLIError("cannot open a socket") }
        defer { close(fd) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { throw CLIError("cannot find a free port on 127.0.0.1") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
