import Foundation
import Logging
import PigeonBenchSupport
import PigeonKitBenchDevice

// pigeonkit-bench's receiving device: a DeviceJob (JSON) on standard input, its DeviceReport (JSON) on standard output,
// the log on standard error. Started by pigeonkit-bench (DeviceProcess); links PigeonKit and nothing of the server.
let memoryAtStartup = MemorySnapshot.now
LoggingSystem.bootstrap { label in
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = .warning
    return handler
}
do {
    let input = try FileHandle.standardInput.readToEnd() ?? Data()
    let job = try JSONDecoder().decode(DeviceJob.self, from: input)
    let report = try await DevicePhases.run(job, memoryAtStartup: memoryAtStartup)
    try FileHandle.standardOutput.write(contentsOf: JSONEncoder().encode(report))
} catch {
    FileHandle.standardError.write(Data("pigeonkit-device: \(error)\n".utf8))
    exit(1)
}
