import Foundation
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A Pigeon server running inside this process (a demo, an app's integration tests), on a loopback port and data
/// directory that stay the same across ``stop()`` and ``start()``: a restart keeps its data, and clients reconnect to
/// the same URL.
public final class InProcessServer: Sendable {
    /// The configuration it runs with; its port is the one chosen (a free one when it was given as 0).
    public let configuration: ServerConfiguration
    private let logger: Logger
    private let running = NIOLockedValueBox<(group: ServiceGroup, task: Task<Void, any Error>)?>(nil)

    public var port: Int { configuration.port }
    public var url: URL { URL(string: "http://127.0.0.1:\(configuration.port)")! }

    /// Nothing runs yet; port 0 picks a loopback port nobody listens on now.
    public init(configuration: ServerConfiguration, logger: Logger) throws {
        var configuration = configuration
        if configuration.port == 0 { configuration.port = try Self.freePort() }
        self.configuration = configuration
        self.logger = logger
    }

    /// Starts the server and returns once it accepts connections.
    public func start() async throws {
        let app = try await PigeonApplication.make(configuration: configuration, logger: logger)
        // A service group of its own, so `stop` is a graceful shutdown (what SIGTERM does to pigeon-server).
        let group = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
        running.withLockedValue { $0 = (group, Task { try await group.run() }) }
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if Self.accepts(port: port) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        await stop()
        throw InProcessServerError(message: "the in-process server did not start listening on 127.0.0.1:\(port)")
    }

    /// Stops it gracefully (it stores what it accepted and closes the streams) and waits until it is down.
    public func stop() async {
        guard let (group, task) = running.withLockedValue({ running in
            defer { running = nil }
            return running
        }) else { return }
        await group.triggerGracefulShutdown()
        _ = await task.result
    }

    public func restart() async throws {
        await stop()
        try await start()
    }

    private static func socketDescriptor() -> Int32 {
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
        let descriptor = socketDescriptor()
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
        guard connected else { return false }
        // A port in the ephemeral range with no listener can "accept" a connection from itself (TCP simultaneous
        // open): the probe then holds the port the server is about to bind. Only a connection from another port
        // proves a listener.
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        } == 0
        return named && Int(UInt16(bigEndian: local.sin_port)) != port
    }

    /// A loopback port nobody listens on now (bound to port 0, read back, released).
    private static func freePort() throws -> Int {
        let descriptor = socketDescriptor()
        guard descriptor >= 0 else { throw InProcessServerError(message: "cannot open a socket: errno \(errno)") }
        defer { close(descriptor) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
        }
        guard bound else { throw InProcessServerError(message: "cannot find a free port on 127.0.0.1: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// Why an ``InProcessServer`` could not start.
public struct InProcessServerError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
