import PigeonBenchSupport

/// Every figure with its target.
struct Results {
    var send: SendLatency.Result
    var device: DeviceReport

    func printSummary(messages: Int, inProcess: Bool) {
        let memory = device.memoryAfterLoads?.resident
        let rows: [(String, String, Bool?)] = [
            ("send: call → pending event, p99 ≤ 1 ms", Format.microseconds(send.event.p99Microseconds), send.event.p99Microseconds <= 1_000),
            ("load 50, newest page, p99 ≤ 2 ms", Format.microseconds(device.newestPage.p99Microseconds), device.newestPage.p99Microseconds <= 2_000),
            ("load 50, scrolled back (before:), p99 ≤ 2 ms", Format.microseconds(device.olderPages.p99Microseconds),
             device.olderPages.p99Microseconds <= 2_000),
            ("RSS with \(Format.count(messages)) cached messages ≤ 30 MB", Format.megabytes(memory),
             inProcess ? nil : memory.map { $0 <= 30_000_000 }),
            ("catch-up of \(Format.count(messages)) missed messages ≤ 1 s", Format.seconds(device.catchUpSeconds), device.catchUpSeconds <= 1),
        ]
        say("\nsummary")
        let width = rows.map(\.0.count).max() ?? 0
        let valueWidth = rows.map(\.1.count).max() ?? 0
        for (target, value, met) in rows {
            let padded = target + String(repeating: " ", count: width - target.count)
            let paddedValue = value + String(repeating: " ", count: valueWidth - value.count)
            say("  \(padded)  \(paddedValue)  \(Format.verdict(met))")
        }
        if inProcess {
            say("  (memory: n/a with --in-process, the figure includes the server)")
        } else if let memory = device.memoryAfterLoads {
            say("  (RSS: anonymous \(Format.megabytes(memory.residentAnonymous)), file-backed \(Format.megabytes(memory.residentFile)): the")
            say("  latter is mostly code of this executable, which links the server too, and of the Swift runtime and Foundation)")
        }
        if messages != 10_000 { say("  (the targets are for 10,000 messages; this run used \(Format.count(messages)))") }
    }
}
