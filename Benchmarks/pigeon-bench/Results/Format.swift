import Foundation
import PigeonBenchSupport

/// Rows of text printed in aligned columns.
struct Table {
    private var rows: [[String]]

    init(header: [String]) {
        rows = [header]
    }

    /// Adds a row, cut to the header's number of columns.
    mutating func add(_ row: [String]) {
        rows.append(Array(row.prefix(rows[0].count)))
    }

    func print() {
        let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        for row in rows {
            let cells = zip(row, widths).map { cell, width in cell + String(repeating: " ", count: width - cell.count) }
            Swift.print(String(cells.joined(separator: "  ").reversed().drop { $0 == " " }.reversed()))
        }
    }
}

/// pigeon-bench's figures (``Format`` has the counts and memory sizes both benchmarks show).
extension Format {
    static func rate(_ perSecond: Double?) -> String {
        guard let perSecond else { return "n/a" }
        return "\(count(Int(perSecond.rounded()))) msg/s"
    }

    static func ratio(_ numerator: Double?, _ denominator: Double?) -> String {
        guard let numerator, let denominator, denominator > 0 else { return "n/a" }
        return String(format: "%.2f", numerator / denominator)
    }

    static func seconds(_ value: Double) -> String {
        String(format: "%.1f s", value)
    }

    static func milliseconds(_ value: Double) -> String {
        String(format: "%.2f ms", value)
    }

    static func bytes(_ value: Double?) -> String {
        guard let value else { return "n/a" }
        return "\(count(Int(value.rounded()))) bytes"
    }

    static func latency(_ summary: LatencySummary) -> String {
        "p50 \(milliseconds(summary.p50Ms)), p99 \(milliseconds(summary.p99Ms)), max \(milliseconds(summary.maxMs)) "
            + "(\(count(summary.count)) messages)"
    }

    static func percentiles(_ summary: LatencySummary?) -> String {
        guard let summary, summary.count > 0 else { return "n/a" }
        return String(format: "%.2f / %.2f / %.2f ms", summary.p50Ms, summary.p99Ms, summary.maxMs)
    }

    static func errors(_ errors: [String: Int]) -> String {
        guard !errors.isEmpty else { return "0" }
        return errors.sorted { $0.key < $1.key }.map { "\($0.key) \(count($0.value))" }.joined(separator: ", ")
    }

    static func microseconds(_ value: Double?) -> String {
        value.map { String(format: "%.1f µs", $0) } ?? "n/a"
    }

    /// Context switches per message.
    static func switches(_ value: Double?) -> String {
        value.map { String(format: "%.2f", $0) } ?? "n/a"
    }

    /// "" when no server thread exited in the window, else a warning that their context switches are missed.
    static func exitedThreads(_ load: LoadSample) -> String {
        let exited = load.serverThreadsExited
        guard exited > 0 else { return "" }
        return " (\(count(exited)) server thread\(exited == 1 ? "" : "s") exited in the window: \(exited == 1 ? "its" : "their") context switches there are missed)"
    }

    static func cores(_ value: Double?) -> String {
        value.map { String(format: "%.2f", $0) } ?? "n/a"
    }

    /// The servers' memory, then the CPU cores of every observed process during the window.
    static func load(_ load: LoadSample) -> String {
        let single = load.servers.count == 1
        func name(_ index: Int) -> String { single ? "server" : "node \(index + 1)" }
        let memory = load.servers.enumerated().map { index, server in
            "\(name(index)) RSS \(mebibytes(server.residentBytesAtStart)) at start, \(mebibytes(server.peakResidentBytes)) peak"
        }
        let cpu =
            load.servers.enumerated().map { index, server in "\(name(index)) \(cores(server.cores))" }
            + load.serviceCores.sorted { $0.key < $1.key }.map { "\($0.key) \(cores($0.value))" }
            + ["bench \(cores(load.benchCores))"]
        return memory.joined(separator: ", ") + "; CPU cores during the window: " + cpu.joined(separator: ", ")
    }
}
