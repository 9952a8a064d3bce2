import Foundation
import NIOConcurrencyHelpers
import PigeonTestSupport

/// The built `pigeon-server` binary run as a child process, for tests that kill it.
final class ServerProcess: @unchecked Sendable {
    let port: Int
    let dataDirectory: String
    private let process = Process()
    let logPath: String

    /// The binary next to the test bundle (SwiftPM builds it: the test target depends on it), or `PIGEON_SERVER_BINARY`.
    static var binaryPath: String {
        if let path = ProcessInfo.processInfo.environment["PIGEON_SERVER_BINARY"] { return path }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = executable.deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("pigeon-server")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate.path }
            directory = directory.deletingLastPathComponent()
        }
        return executable.deletingLastPathComponent().appendingPathComponent("pigeon-server").path
    }

    /// Starts the server (on `backend`'s store and buffer, with `environment` added to this process's) and waits until
    /// `/readyz` answers 200.
    /// Without `waitUntilReady` it returns once `/healthz` answers (the process is up; `/readyz` may say 503).
    init(
        dataDirectory: String, port: Int? = nil, backend: TestBackendInstance = TestBackendInstance(), arguments: [String] = [],
        environment: [String: String] = [:], waitUntilReady: Bool = true
    ) async throws {
        self.port = try port ?? freePort()
        self.dataDirectory = dataDirectory
        self.logPath = dataDirectory + "/server-\(UUID().uuidString.prefix(8)).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Self.binaryPath)
        process.arguments = ["serve", "--host", "127.0.0.1", "--port", String(self.port), "--data-dir", dataDirectory, "--log-level", "warning"]
            + backend.serverArguments + arguments
        let logHandle = FileHandle(forWritingAtPath: logPath)
        process.standardOutput = logHandle
        process.standardError = logHandle
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        try process.run()
        let client = PigeonTestClient(port: self.port)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let answer = try? await client.request(.GET, waitUntilReady ? "/readyz" : "/healthz"), answer.status == 200 { return }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        process.terminate()
        throw TestFailure("pigeon-server did not become ready: \(log())")
    }

    var client: PigeonTestClient { PigeonTestClient(port: port) }
    var isRunning: Bool { process.isRunning }

    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` and waits for the process to end; returns its exit status.
    @discardableResult
    func stop(signal: Int32, timeout: Duration = .seconds(30)) async throws -> Int32 {
        kill(process.processIdentifier, signal)
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            guard ContinuousClock.now < deadline else {
                kill(process.processIdentifier, SIGKILL)
                throw TestFailure("pigeon-server did not stop within \(timeout) after signal \(signal)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
