import AsyncHTTPClient
import Foundation

/// The Pigeon server under test: one this run spawned on a fresh data directory, or one already running.
struct PigeonServer: Sendable {
    /// `http://127.0.0.1:PORT`.
    let baseURL: String
    /// The server's process id, for memory and CPU figures; `nil` when unknown.
    let pid: pid_t?

    /// Spawns `binary serve` on a free loopback port with a data directory in `workDirectory`, waits until
    /// `GET /readyz` answers 200, runs `body`, and stops the server with SIGTERM whatever happens.
    static func withSpawned<T>(
        binary: String,
        arguments extraArguments: [String] = [],
        workDirectory: String,
        http: HTTPClient,
        startupTimeout: Duration,
        _ body: (PigeonServer) async throws -> T
    ) async throws -> T {
        let port = try await LocalEnvironment.freeLoopbackPort()
        let dataDirectory = workDirectory + "/data"
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        let process = try ChildProcess(
            name: "pigeon-server",
            executable: binary,
            arguments: ["serve", "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDirectory] + extraArguments,
            logPath: workDirectory + "/pigeon-server.log"
        )
        let server = PigeonServer(baseURL: "http://127.0.0.1:\(port)", pid: process.pid)
        let result: T
        do {
            try await server.waitUntilReady(http: http, timeout: startupTimeout, process: process)
            result = try await body(server)
        } catch {
            await process.stop()
            throw error
        }
        let stopTimeout = Duration.seconds(15)
        if let stopTime = await process.stop(timeout: stopTimeout) {
            print("pigeon-server stopped on SIGTERM in \(Format.seconds(stopTime.seconds))")
        } else {
            print("pigeon-server did not stop within \(stopTimeout) of SIGTERM and was killed")
        }
        return result
    }

    /// Polls `GET /readyz` until it answers 200.
    func waitUntilReady(http: HTTPClient, timeout: Duration, process: ChildProcess? = nil) async throws {
        let api = PigeonAPI(http: http, baseURL: baseURL)
        let ready = try await waitUntil(.now + timeout, polling: .milliseconds(100)) {
            try process?.checkRunning()
            return await api.isReady()
        }
        guard ready else { throw BenchError.timedOut("\(baseURL)/readyz did not answer 200 within \(timeout)") }
    }
}
