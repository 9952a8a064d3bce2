import Foundation

/// What a ``LoadMonitor`` saw of the server while a scenario ran.
struct LoadSample: Codable, Sendable {
    /// The resident set size when the scenario started, in bytes (what earlier scenarios left behind shows here).
    var residentBytesAtStart: UInt64?
    /// The highest resident set size sampled, in bytes.
    var peakResidentBytes: UInt64?
    /// CPU cores the server used on average during the measured window.
    var serverCores: Double?
    /// CPU cores this benchmark process used on average during the measured window.
    var benchCores: Double?
}

/// Samples a server's memory every 100 ms while a scenario runs, and the CPU use of the server and of the benchmark
/// itself over the measured window (on 2 cores the load generator competes with the server, so both matter).
enum LoadMonitor {
    /// Runs `body` while sampling `serverPID`; `window` is the measured part of the run.
    static func measure<T>(
        serverPID: pid_t?,
        window: MeasurementWindow,
        _ body: () async throws -> T
    ) async throws -> (T, LoadSample) {
        guard let serverPID else { return (try await body(), LoadSample()) }
        return try await withThrowingTaskGroup(of: LoadSample.self) { group in
            group.addTask { await sample(serverPID: serverPID, window: window) }
            let result: T
            do {
                result = try await body()
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            return (result, try await group.next() ?? LoadSample())
        }
    }

    /// Samples until cancelled, waking exactly at the window's edges for the CPU figures.
    private static func sample(serverPID: pid_t, window: MeasurementWindow) async -> LoadSample {
        var sample = LoadSample()
        var cpuAtStart: (at: ContinuousClock.Instant, server: Double?, bench: Double?)?
        var nextEdge: ContinuousClock.Instant? = window.start
        while !Task.isCancelled {
            let now = ContinuousClock.now
            if let rss = ProcessStats.residentBytes(of: serverPID) {
                sample.residentBytesAtStart = sample.residentBytesAtStart ?? rss
                sample.peakResidentBytes = max(sample.peakResidentBytes ?? 0, rss)
            }
            if let edge = nextEdge, now >= edge {
                let server = ProcessStats.cpuSeconds(of: serverPID)
                let bench = ProcessStats.cpuSeconds(of: ProcessStats.currentPID)
                if let start = cpuAtStart {
                    let seconds = (now - start.at).seconds
                    func cores(_ before: Double?, _ after: Double?) -> Double? {
                        guard let before, let after else { return nil }
                        return (after - before) / seconds
                    }
                    sample.serverCores = cores(start.server, server)
                    sample.benchCores = cores(start.bench, bench)
                    nextEdge = nil
                } else {
                    cpuAtStart = (now, server, bench)
                    nextEdge = window.end
                }
            }
            let wake = min(now + .milliseconds(100), nextEdge ?? .now + .milliseconds(100))
            try? await Task.sleep(until: wake)
        }
        return sample
    }
}
