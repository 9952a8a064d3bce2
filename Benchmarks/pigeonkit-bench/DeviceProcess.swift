import Foundation
import PigeonBenchSupport
import PigeonKitBenchDevice

/// Runs a ``DeviceJob`` in a child process, `pigeonkit-device` (built beside this executable; it links PigeonKit and
/// nothing of the server), so that the memory it reports is the SDK's alone. The job goes to the child's standard input as JSON (the
/// device token stays off the command line) and the ``DeviceReport`` comes back on its standard output; its
/// standard error is passed through.
enum DeviceProcess {
    static func run(_ job: DeviceJob) async throws -> DeviceReport {
        let process = Process()
        process.executableURL = try sibling("pigeonkit-device")
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
            throw BenchError("pigeonkit-device exited with status \(status): \(String(decoding: data, as: UTF8.self))")
        }
        do {
            return try JSONDecoder().decode(DeviceReport.self, from: data)
        } catch {
            throw BenchError("pigeonkit-device answered \(String(decoding: data, as: UTF8.self)): \(error)")
        }
    }
}

/// An executable built beside this one (`swift build -c release --product <name>`; scripts/bench.sh pigeonkit builds
/// them all).
func sibling(_ name: String) throws -> URL {
    let directory = (Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])).deletingLastPathComponent()
    let url = directory.appendingPathComponent(name)
    guard FileManager.default.isExecutableFile(atPath: url.path) else {
        throw BenchError("\(url.path) is missing: build it beside pigeonkit-bench (swift build -c release --product \(name), or scripts/bench.sh pigeonkit)")
    }
    return url
}
