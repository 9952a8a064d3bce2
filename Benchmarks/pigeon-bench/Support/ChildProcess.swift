import Foundation
import PigeonBenchSupport

/// A server process this run started (pigeon-server or mosquitto), its output going to a log file.
/// Whoever launches one stops it with ``stop()``.
final class ChildProcess: Sendable {
    let name: String
    let logPath: String
    private let process: Process

    var pid: pid_t { process.processIdentifier }

    /// Starts `executable` with `arguments`, its standard output and error written to a new file at `logPath`.
    init(name: String, executable: String, arguments: [String], logPath: String) throws {
        self.name = name
        self.logPath = logPath
        guard FileManager.default.createFile(atPath: logPath, contents: nil) else {
            throw BenchError.system("creating \(logPath)", errno)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
        try log.close()
    }

    /// The last lines of the log, for error messages.
    func logTail(lines: Int = 20) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    /// Throws if the process has already exited.
    func checkRunning() throws {
        guard process.isRunning else {
            throw BenchError.processExited(name, status: process.terminationStatus, logTail: logTail())
        }
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit, then SIGKILL. Returns how long the graceful
    /// stop took, or `nil` if it had to be killed.
    @discardableResult
    func stop(timeout: Duration = .seconds(15)) async -> Duration? {
        guard process.isRunning else { return .zero }
        let start = ContinuousClock.now
        process.terminate()
        let exited = (try? await waitUntil(start + timeout) { !process.isRunning }) ?? false
        if exited { return .now - start }
        kill(process.processIdentifier, SIGKILL)
        _ = try? await waitUntil(.now + .seconds(5)) { !process.isRunning }
        return nil
    }
}
