import Foundation
import Logging
import PigeonBenchSupport
import PigeonServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension InProcessServer {
    /// Runs a Pigeon server in this process on its embedded defaults (SQLite store and buffer under a fresh data
    /// directory, every commit fsynced when `durable`), on a loopback port it binds itself, for the duration of
    /// `body`, which gets its base URL once `GET /readyz` answers; then stops it (gracefully; a server that has not
    /// stopped 20 s later ends the process) and removes its data directory.
    static func run<T: Sendable>(durable: Bool, _ body: (URL) async throws -> T) async throws -> T {
        let directory = try LocalEnvironment.makeTemporaryDirectory(prefix: "pigeonkit-bench-server")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = ServerConfiguration()
        configuration.port = 0
        configuration.dataDirectory = directory
        configuration.durable = durable
        configuration.logLevel = .warning
        let logger = Logger(label: "pigeon-server") { ServerLogHandler(label: $0) }
        let server = InProcessServer(configuration: configuration, logger: logger)
        try await server.start()
        let result: Result<T, any Error>
        do {
            try await ServerHTTP.waitUntilReady(server.url, timeout: .seconds(30))
            result = .success(try await body(server.url))
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
        await server.stop()
        watchdog.cancel()
        return try result.get()
    }
}
