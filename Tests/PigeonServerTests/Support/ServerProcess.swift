import Foundation
import NIOConcurrencyHelpers
import PigeonTestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The built `pigeon-server` binary run as a child process, for tests that kill it.
final class ServerProcess: @unchecked Sendable {
    let port: Int
    let dataDirectory: String
    private let process: ChildProcess
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
    ///
    /// Without `port` it takes a free one; another process may bind it between that check and the server's own bind
    /// (a test's client connection can get it as its ephemeral port), so a server that exits with "Address already in
    /// use" before it was ready is started again on another free port (up to three times).
    ///
    /// Without `givesDataDirectory` the process gets no `--data-dir`: it runs in `dataDirectory` as its working
    /// directory, where its default `./pigeon-data` would be.
    init(
        dataDirectory: String, port: Int? = nil, backend: TestBackendInstance = TestBackendInstance(), arguments: [String] = [],
        environment: [String: String] = [:], waitUntilReady: Bool = true, givesDataDirectory: Bool = true
    ) async throws {
        self.dataDirectory = dataDirectory
        // In the data directory, or beside it when it does not exist yet (the server is to create it).
        let logDirectory = FileManager.default.fileExists(atPath: dataDirectory) ? dataDirectory : (dataDirectory as NSString).deletingLastPathComponent
        self.logPath = logDirectory + "/server-\(UUID().uuidString.prefix(8)).log"
        var attempt = 0
        while true {
            attempt += 1
            let chosenPort = try port ?? freePort()
            _ = FileManager.default.createFile(atPath: logPath, contents: nil)
            let process = try ChildProcess(
                [Self.binaryPath, "serve", "--host", "127.0.0.1", "--port", String(chosenPort), "--log-level", "warning"]
                    + (givesDataDirectory ? ["--data-dir", dataDirectory] : []) + backend.serverArguments + arguments,
                environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
                directory: givesDataDirectory ? nil : dataDirectory, stdout: logPath)
            if try await Self.becomesReady(process, port: chosenPort, path: waitUntilReady ? "/readyz" : "/healthz") {
                self.port = chosenPort
                self.process = process
                return
            }
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            if process.isRunning { process.signal(SIGKILL) }
            _ = try? await process.waitForExit(timeout: .seconds(30), what: "pigeon-server that did not become ready")
            if port == nil, attempt < 3, !process.isRunning, log.contains("Address already in use") { continue }
            throw TestFailure("pigeon-server did not become ready: \(log)")
        }
    }

    /// Polls `path` until it answers 200 while the process runs (true), the process exits or 30 s pass (false).
    private static func becomesReady(_ process: ChildProcess, port: Int, path: String) async throws -> Bool {
        let client = PigeonTestClient(port: port)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let answer = try? await client.request(.GET, path), answer.status == 200, process.isRunning { return true }
            guard process.isRunning else { return false }
            try await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// Runs `pigeon-server arguments…` to its end (a command that ends by itself: `backup`, a refused `serve`) without
    /// blocking a concurrency thread; its exit status and output (stdout and stderr).
    static func run(_ arguments: [String], timeout: Duration = .seconds(120)) async throws -> (status: Int32, output: String) {
        let outputPath = makeTemporaryDirectory() + "/output"
        defer { try? FileManager.default.removeItem(atPath: (outputPath as NSString).deletingLastPathComponent) }
        let child = try ChildProcess([binaryPath] + arguments, stdout: outputPath, truncate: true)
        let code = try await child.waitForExit(timeout: timeout, what: "pigeon-server \(arguments.joined(separator: " "))")
        return (code, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
    }

    var client: PigeonTestClient { PigeonTestClient(port: port) }
    var isRunning: Bool { process.isRunning }

    /// The process's user and system CPU time so far, from `/proc/<pid>/stat`: its own, whatever else this test
    /// process runs meanwhile.
    var cpuTime: Duration {
        get throws {
            let text = try String(contentsOfFile: "/proc/\(process.pid)/stat", encoding: .utf8)
            // The fields after the command name (which may hold spaces), from the third: utime and stime are the 14th
            // and 15th of the line.
            guard let end = text.lastIndex(of: ")") else { throw TestFailure("unexpected /proc stat: \(text)") }
            let fields = text[text.index(after: end)...].split(separator: " ")
            guard fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else {
                throw TestFailure("unexpected /proc stat: \(text)")
            }
            let ticksPerSecond = Int64(sysconf(Int32(_SC_CLK_TCK)))
            return .milliseconds((user + system) * 1000 / ticksPerSecond)
        }
    }

    /// The process's resident memory in bytes, from `/proc/<pid>/statm`.
    var residentBytes: Int {
        get throws {
            let text = try String(contentsOfFile: "/proc/\(process.pid)/statm", encoding: .utf8)
            guard let pages = text.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else {
                throw TestFailure("unexpected /proc statm: \(text)")
            }
            return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
        }
    }

    func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` and waits for the process to end; returns its exit status (128 + n for signal n). Past `timeout`
    /// it is killed and this throws. A server still running when this goes away is killed (``ChildProcess``).
    @discardableResult
    func stop(signal: Int32, timeout: Duration = .seconds(30)) async throws -> Int32 {
        process.signal(signal)
        return try await process.waitForExit(timeout: timeout, what: "pigeon-server after signal \(signal)")
    }
}
