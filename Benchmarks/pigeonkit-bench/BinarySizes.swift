import Foundation
import PigeonBenchSupport

/// Measurement 5: what PigeonKit adds to an app, as the stripped size of executables built beside this one:
/// `pigeonkit-size-probe` (the smallest app that uses PigeonKit) less `empty-probe` (an empty Swift executable), and
/// the terminal client `pigeon`. Each is copied and stripped with `strip` (binutils); the originals are left alone.
struct BinarySizes {
    var empty: Int64
    var probe: Int64
    /// `nil` when `pigeon` was not built beside this executable.
    var terminalClient: Int64?

    /// What PigeonKit adds to an app.
    var increase: Int64 { probe - empty }

    /// The executables beside this one, or in `directory` (another build of them, e.g. optimised for size).
    static func measure(workspace: String, directory: String? = nil) throws -> BinarySizes {
        func binary(_ name: String) throws -> URL {
            guard let directory else { return try sibling(name) }
            let url = URL(fileURLWithPath: directory).appendingPathComponent(name)
            guard FileManager.default.isExecutableFile(atPath: url.path) else { throw BenchError("\(url.path) is missing") }
            return url
        }
        let empty = try strippedSize(of: binary("empty-probe"), workspace: workspace)
        let probe = try strippedSize(of: binary("pigeonkit-size-probe"), workspace: workspace)
        let client = try? strippedSize(of: binary("pigeon"), workspace: workspace)
        return BinarySizes(empty: empty, probe: probe, terminalClient: client)
    }

    private static func strippedSize(of binary: URL, workspace: String) throws -> Int64 {
        let copy = URL(fileURLWithPath: workspace).appendingPathComponent("stripped-" + binary.lastPathComponent)
        try? FileManager.default.removeItem(at: copy)
        try FileManager.default.copyItem(at: binary, to: copy)
        let strip = Process()
        strip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        strip.arguments = ["strip", copy.path]
        try strip.run()
        strip.waitUntilExit()
        guard strip.terminationStatus == 0 else { throw BenchError("strip \(copy.path) failed with status \(strip.terminationStatus)") }
        let size = (try FileManager.default.attributesOfItem(atPath: copy.path)[.size] as? NSNumber)?.int64Value ?? 0
        try? FileManager.default.removeItem(at: copy)
        return size
    }
}
