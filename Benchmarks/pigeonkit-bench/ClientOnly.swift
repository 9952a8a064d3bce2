import ArgumentParser
import Foundation
import PigeonBenchSupport

/// The receiving device's measurements in a process of its own, which `pigeonkit-bench` starts (see ``DeviceProcess``).
struct ClientOnly: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-only",
        abstract: "The receiving device's measurements: a DeviceJob (JSON) on standard input, a DeviceReport (JSON) on standard output.",
        shouldDisplay: false)

    func run() async throws {
        let memoryAtStartup = MemorySnapshot.now
        _ = loggingToStandardError
        let input = try FileHandle.standardInput.readToEnd() ?? Data()
        let job = try JSONDecoder().decode(DeviceJob.self, from: input)
        let report = try await DevicePhases.run(job, memoryAtStartup: memoryAtStartup)
        try FileHandle.standardOutput.write(contentsOf: JSONEncoder().encode(report))
    }
}
