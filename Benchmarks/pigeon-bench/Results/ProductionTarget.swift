import Foundation
import PigeonBenchSupport

/// The production mode's throughput targets: on one node it accepts at least 0.75× the embedded rate over
/// WebSocket, and two nodes accept more than one.
enum ProductionTarget: CaseIterable {
    case oneNodeAgainstEmbedded
    case twoNodesAgainstOne

    /// The backend whose rate is checked.
    var measured: Backend { self == .oneNodeAgainstEmbedded ? .production : .production2 }
    /// The backend it is compared with.
    var reference: Backend { self == .oneNodeAgainstEmbedded ? .embedded : .production }
    /// The lowest ratio measured / reference that meets the target (``isInclusive``: or more; else: more than that).
    var requiredRatio: Double { self == .oneNodeAgainstEmbedded ? 0.75 : 1.0 }
    var isInclusive: Bool { self == .oneNodeAgainstEmbedded }

    var description: String {
        "\(measured.rawValue) accepts \(isInclusive ? "≥" : ">") \(String(format: "%.2f", requiredRatio))× "
            + "the \(reference.rawValue) rate over WebSocket"
    }

    /// The check against `runs`, or `nil` when the measured backend did not run.
    func check(_ runs: [PigeonResults]) -> TargetCheck? {
        func rate(_ backend: Backend) -> Double? {
            runs.first { $0.deployment == backend.rawValue }?.wsThroughput?.acceptedPerSecond
        }
        guard runs.contains(where: { $0.deployment == measured.rawValue }) else { return nil }
        let measuredRate = rate(measured)
        let referenceRate = rate(reference)
        var ratio: Double?
        if let measuredRate, let referenceRate, referenceRate > 0 { ratio = measuredRate / referenceRate }
        return TargetCheck(
            target: description,
            measuredPerSecond: measuredRate,
            referencePerSecond: referenceRate,
            ratio: ratio,
            met: ratio.map { isInclusive ? $0 >= requiredRatio : $0 > requiredRatio }
        )
    }
}

/// A ``ProductionTarget`` checked against one run.
struct TargetCheck: Codable, Sendable {
    var target: String
    /// Accepted messages per second over WebSocket of the measured backend and of the reference.
    var measuredPerSecond: Double?
    var referencePerSecond: Double?
    var ratio: Double?
    /// `nil` when the run lacks a figure the target needs (the reference backend or ws-throughput did not run).
    var met: Bool?

    /// `PASS` or `FAIL` with the figures, or why it is not measured.
    var line: String {
        guard let met else { return "target \(target): not measured (needs the ws-throughput figures of both backends)" }
        return "target \(target): \(met ? "PASS" : "FAIL") — \(Format.ratio(measuredPerSecond, referencePerSecond))× "
            + "(\(Format.rate(measuredPerSecond)) against \(Format.rate(referencePerSecond)))"
    }
}
