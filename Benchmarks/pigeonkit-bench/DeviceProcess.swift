import Foundation
import PigeonBenchSupport

/// Runs a ``DeviceJob`` in a child process (this executable's `client-only` command), so that the memory it
/// reports is the client's without the in-process server. The job goes to the child's standard input as JSON (the
/// device token stays off the command line) and the ``DeviceReport`` comes back on its standard output; its
/// standard error is passed through.
enum DeviceProcess {
    static func run(_ job: DeviceJob) async throws -> DeviceReport {
        let process = Process()
        process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
        process.arguments = ["client-only"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        let exited = AsyncStream.makeStream(of: Int32.self)
        process.terminationHandler = { process in
            exited.continuation.yield(process.terminationStatus)
            exited.continuation.finish()
        }
        try process.run()
        try input.fileHandleForWriting.write(contentsOf: JSONEncoder().encode(job))
        try input.fileHandleForWriting.close()
        var status: Int32 = -1
        for await value in exited.stream { status = value }
        let data = try output.fileHandleForReading.readToEnd() ?? Data()
        guard status == 0 else {
            throw BenchError("the client-only process exited with status \(status): \(String(decoding: data, as: UTF8.self))")
        }
        do {
            return try JSONDecoder().decode(DeviceReport.self, from: data)
        } catch {
            throw BenchError("the client-only process answered \(String(decoding: data, as: UTF8.self)): \(error)")
        }
    }
}
