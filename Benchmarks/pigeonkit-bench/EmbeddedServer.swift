import Foundation
import Logging
import PigeonServer
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A Pigeon server running inside this process on its embedded defaults (SQLite store and buffer under a fresh
/// data directory, every commit fsynced), on a free loopback port.
enum EmbeddedServer {
    /// Runs the server for the duration of `body`, which gets its base URL once `GET /readyz` answers; then stops it
    /// (gracefully; a server that has not stopped 20 s later ends the process) and removes its data directory.
    static func run<T: Sendable>(durable: Bool, _ body: @Sendable (URL) async throws -> T) async throws -> T {
        let directory = try temporaryDirectory("pigeonkit-bench-server")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = ServerConfiguration()
        configuration.port = try freeLoopbackPort()
        configuration.dataDirectory = directory
        configuration.durable = durable
        configuration.logLevel = .warning
        let logger = Logger(label: "pigeon-server") { ServerLogHandler(label: $0) }
        let app: any ApplicationRunnable = try await PigeonApplication.make(configuration: configuration, logger: logger)
        let url = URL(string: "http://127.0.0.1:\(configuration.port)")!
        let serverEnded = EndFlag()
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                defer { serverEnded.set() }
                try await app.runService()
                return nil
            }
            let result: Result<T, any Error>
            do {
                try await ServerHTTP.waitUntilReady(url, timeout: .seconds(30))
                result = .success(try await body(url))
            } catch {
                result = .failure(error)
            }
            ServerLogHandler.silence()
            let failure = (try? result.get()) == nil ? "\(result)" : nil
            let watchdog = Task.detached {
                try await Task.sleep(for: .seconds(20))
                FileHandle.standardError.write(Data("the in-process server did not stop within 20 s; exiting\n".utf8))
                if let failure { FileHandle.standardError.write(Data("error: \(failure)\n".utf8)) }
                exit(failure == nil ? 0 : 1)
            }
            // The way pigeon-server is stopped: SIGTERM, which `runService()` handles as a graceful shutdown (cancelling
            // the task instead left the server running in 6 of 8 tries). A server that already ended (it could not
            // start) has no handler left to catch the signal.
            if !serverEnded.isSet { kill(getpid(), SIGTERM) }
            while let _ = try? await group.next() {}
            watchdog.cancel()
            return try result.get()
        }
    }

    /// Set once the server's task has ended.
    private final class EndFlag: Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .releasing) }
        var isSet: Bool { value.load(ordering: .acquiring) }
    }

    /// A loopback port nobody listens on now (bound to port 0, read back, released).
    static func freeLoopbackPort() throws -> Int {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw BenchError("socket: errno \(errno)") }
        defer { close(descriptor) }
        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
            }
        }
        guard bound else { throw BenchError("binding a loopback port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A new empty directory under the system's temporary directory.
func temporaryDirectory(_ prefix: String) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}
