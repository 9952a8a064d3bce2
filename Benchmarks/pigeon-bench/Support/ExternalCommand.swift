import Foundation
import PigeonBenchSupport

/// A command-line tool run to completion (`psql`, `redis-cli`), its output captured.
enum ExternalCommand {
    /// Runs `tool` (a name looked up like ``LocalEnvironment/findExecutable(_:)``) with `arguments` and returns its
    /// standard output. Throws if the tool is missing, exits with a non-zero status (the error carries its standard
    /// error), or runs longer than `timeout` (it is then killed).
    static func output(of tool: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws -> String {
        guard let executable = LocalEnvironment.findExecutable(tool) else {
            throw BenchError.missingExecutable("\(tool) not found on PATH")
        }
        // Files rather than pipes: nothing blocks on a full pipe, and the wait below stays asynchronous.
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-bench-\(tool)-\(UUID().uuidString.prefix(8))").path
        let outputPath = base + ".out"
        let errorPath = base + ".err"
        defer {
            try? FileManager.default.removeItem(atPath: outputPath)
            try? FileManager.default.removeItem(atPath: errorPath)
        }
        guard FileManager.default.createFile(atPath: outputPath, contents: nil),
            FileManager.default.createFile(atPath: errorPath, contents: nil)
        else { throw BenchError.system("creating \(base).out/.err", errno) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        let error = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
        process.standardOutput = output
        process.standardError = error
        try process.run()
        try output.close()
        try error.close()
        let command = ([tool] + arguments).joined(separator: " ")
        guard try await waitUntil(.now + timeout, { !process.isRunning }) else {
            process.terminate()
            throw BenchError.timedOut("\(command) did not finish within \(timeout)")
        }
        guard process.terminationStatus == 0 else {
            let message = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
            throw BenchError.commandFailed(
                "\(command) exited with status \(process.terminationStatus): \(message.trimmingCharacters(in: .whitespacesAndNewlines))"
            )
        }
        return try String(contentsOfFile: outputPath, encoding: .utf8)
    }
}
