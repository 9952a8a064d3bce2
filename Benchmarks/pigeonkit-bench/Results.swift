import PigeonBenchSupport
import PigeonKitBenchDevice

/// Every figure with its target.
struct Results {
    var send: SendLatency.Result
    var device: DeviceReport
    var sizes: BinarySizes
    /// The same executables built for size (`--size-build`), when given.
    var sizeOptimised: BinarySizes?

    private func sizeRows(_ sizes: BinarySizes, build: String) -> [(String, String, Bool?)] {
        [
            ("app size increase (stripped: PigeonKit's smallest app less an empty one\(build)) < 5 MB",
             Format.megabytes(UInt64(max(sizes.increase, 0))), sizes.increase < 5_000_000),
            ("`pigeon`, the terminal client, stripped\(build) ≤ 12 MB", sizes.terminalClient.map { Format.megabytes(UInt64($0)) } ?? "not built",
             sizes.terminalClient.map { $0 <= 12_000_000 }),
        ]
    }

    func printSummary(messages: Int, inProcess: Bool) {
        let memory = device.memoryAfterLoads?.resident
        let rows: [(String, String, Bool?)] = [
            ("send: call → pending event, p99 ≤ 1 ms", Format.microseconds(send.event.p99Microseconds), send.event.p99Microseconds <= 1_000),
            ("load 50, newest page, p99 ≤ 2 ms", Format.microseconds(device.newestPage.p99Microseconds), device.newestPage.p99Microseconds <= 2_000),
            ("load 50, scrolled back (before:), p99 ≤ 2 ms", Format.microseconds(device.olderPages.p99Microseconds),
             device.olderPages.p99Microseconds <= 2_000),
            ("RSS with \(Format.count(messages)) cached messages ≤ 30 MB", Format.megabytes(memory),
             inProcess ? nil : memory.map { $0 <= 30_000_000 }),
            ("  its anonymous part (heap, stacks: the app's own memory)", Format.megabytes(device.memoryAfterLoads?.residentAnonymous), nil),
            ("catch-up of \(Format.count(messages)) missed messages ≤ 1 s", Format.seconds(device.catchUpSeconds), device.catchUpSeconds <= 1),
        ] + sizeRows(sizes, build: "") + (sizeOptimised.map { sizeRows($0, build: ", built for size") } ?? [])
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
            say("  latter is mostly code: PigeonKit's executable and its dependencies, the Swift runtime and Foundation)")
        }
        say("  (sizes, stripped: empty Swift executable \(Format.megabytes(UInt64(sizes.empty))), smallest PigeonKit app \(Format.megabytes(UInt64(sizes.probe))))")
        if let sizeOptimised {
            say("  (built for size: -Osize, lld with identical code folding and packed relocations; empty \(Format.megabytes(UInt64(sizeOptimised.empty))),")
            say("  smallest PigeonKit app \(Format.megabytes(UInt64(sizeOptimised.probe))))")
        }
        if messages != 10_000 { say("  (the targets are for 10,000 messages; this run used \(Format.count(messages)))") }
    }
}
