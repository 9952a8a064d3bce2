import Foundation
import PigeonBenchSupport

/// What a ``LoadMonitor`` saw of one server process (a Pigeon node, or the broker).
struct ServerLoad: Codable, Sendable {
    /// The resident set size when the scenario started, in bytes (what earlier scenarios left behind shows here).
    var residentBytesAtStart: UInt64?
    /// The highest resident set size sampled, in bytes.
    var peakResidentBytes: UInt64?
    /// CPU cores the process used on average during the measured window.
    var cores: Double?
    /// CPU time (user + system, every thread) the process used during the measured window, in seconds.
    var cpuSeconds: Double?
    /// Context switches (voluntary + involuntary) of the process's threads during the measured window; a thread that
    /// exited inside the window is missed (see ``ProcessStats/contextSwitches(from:to:)``).
    var contextSwitches: Int?
    /// Threads of the process that exited inside the measured window (their switches there are missed).
    var threadsExited: Int?
}

/// A backing service whose CPU a ``LoadMonitor`` measures: the process and its children (PostgreSQL's backends).
struct ObservedService: Sendable {
    /// `postgres` or `redis`: the key of its figure in ``LoadSample/serviceCores``.
    let name: String
    let pid: pid_t
}

/// What a ``LoadMonitor`` saw while a scenario ran.
struct LoadSample: Codable, Sendable {
    /// Each server process, in node order.
    var servers: [ServerLoad]
    /// CPU cores this benchmark process used on average during the measured window.
    var benchCores: Double?
    /// CPU cores each backing service (with its child processes) used on average during the measured window, by
    /// name; empty without backing services. On a shared machine it includes whatever else uses them.
    var serviceCores: [String: Double] = [:]

    /// CPU seconds of all server processes together over the measured window.
    var serverCPUSeconds: Double? {
        let seconds = servers.compactMap(\.cpuSeconds)
        return seconds.isEmpty ? nil : seconds.reduce(0, +)
    }

    /// Context switches of all server processes together over the measured window.
    var serverContextSwitches: Int? {
        let switches = servers.compactMap(\.contextSwitches)
        return switches.isEmpty ? nil : switches.reduce(0, +)
    }

    /// The server's CPU time over the window per message, in microseconds; `nil` without a figure or messages.
    func serverCPUMicroseconds(per messages: Int) -> Double? {
        guard let seconds = serverCPUSeconds, messages > 0 else { return nil }
        return seconds / Double(messages) * 1_000_000
    }

    /// The server's context switches over the window per message; `nil` without a figure or messages.
    func serverContextSwitches(per messages: Int) -> Double? {
        guard let switches = serverContextSwitches, messages > 0 else { return nil }
        return Double(switches) / Double(messages)
    }

    /// Threads of all server processes together that exited inside the measured window.
    var serverThreadsExited: Int {
        servers.compactMap(\.threadsExited).reduce(0, +)
    }

    /// The highest resident set size of any server process.
    var peakResidentBytes: UInt64? { servers.compactMap(\.peakResidentBytes).max() }

    /// CPU cores of all server processes together.
    var serverCores: Double? {
        let cores = servers.compactMap(\.cores)
        return cores.isEmpty ? nil : cores.reduce(0, +)
    }
}

/// Samples the servers' memory every 100 ms while a scenario runs, and the CPU use of the servers, of the backing
/// services and of the benchmark itself over the measured window (on 2 cores the load generator competes with the
/// server, so all of them matter).
enum LoadMonitor {
    /// Runs `body` while sampling `servers` (a `nil` pid is not sampled) and `services`; `window` is the measured part
    /// of the run.
    static func measure<T>(
        servers: [pid_t?],
        services: [ObservedService] = [],
        window: MeasurementWindow,
        _ body: () async throws -> T
    ) async throws -> (T, LoadSample) {
        try await withThrowingTaskGroup(of: LoadSample.self) { group in
            group.addTask { await sample(servers: servers, services: services, window: window) }
            let result: T
            do {
                result = try await body()
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
            return (result, try await group.next() ?? LoadSample(servers: servers.map { _ in ServerLoad() }))
        }
    }

    /// CPU seconds consumed so far by every observed process.
    private struct CPUReading {
        let at: ContinuousClock.Instant
        let servers: [Double?]
        let serverSwitches: [[pid_t: Int]?]
        let services: [Double?]
        let bench: Double?

        init(servers: [pid_t?], services: [ObservedService]) {
            at = .now
            self.servers = servers.map { $0.flatMap(ProcessStats.cpuSeconds) }
            serverSwitches = servers.map { $0.flatMap(ProcessStats.threadContextSwitches) }
            self.services = services.map { ProcessStats.cpuSecondsWithChildren(of: $0.pid) }
            bench = ProcessStats.cpuSeconds(of: ProcessStats.currentPID)
        }
    }

    /// Samples until cancelled, waking exactly at the window's edges for the CPU figures.
    private static func sample(servers: [pid_t?], services: [ObservedService], window: MeasurementWindow) async -> LoadSample {
        var sample = LoadSample(servers: servers.map { _ in ServerLoad() })
        var cpuAtStart: CPUReading?
        var nextEdge: ContinuousClock.Instant? = window.start
        while !Task.isCancelled {
            let now = ContinuousClock.now
            for (index, pid) in servers.enumerated() {
                guard let pid, let rss = ProcessStats.residentBytes(of: pid) else { continue }
                sample.servers[index].residentBytesAtStart = sample.servers[index].residentBytesAtStart ?? rss
                sample.servers[index].peakResidentBytes = max(sample.servers[index].peakResidentBytes ?? 0, rss)
            }
            if let edge = nextEdge, now >= edge {
                let reading = CPUReading(servers: servers, services: services)
                if let start = cpuAtStart {
                    let seconds = (reading.at - start.at).seconds
                    func cores(_ before: Double?, _ after: Double?) -> Double? {
                        guard let before, let after else { return nil }
                        return (after - before) / seconds
                    }
                    for index in servers.indices {
                        sample.servers[index].cores = cores(start.servers[index], reading.servers[index])
                        if let before = start.servers[index], let after = reading.servers[index] {
                            sample.servers[index].cpuSeconds = after - before
                        }
                        if let before = start.serverSwitches[index], let after = reading.serverSwitches[index] {
                            let (switches, exited) = ProcessStats.contextSwitches(from: before, to: after)
                            sample.servers[index].contextSwitches = switches
                            sample.servers[index].threadsExited = exited
                        }
                    }
                    for (index, service) in services.enumerated() {
                        sample.serviceCores[service.name] = cores(start.services[index], reading.services[index])
                    }
                    sample.benchCores = cores(start.bench, reading.bench)
                    nextEdge = nil
                } else {
                    cpuAtStart = reading
                    nextEdge = window.end
                }
            }
            let wake = min(now + .milliseconds(100), nextEdge ?? .now + .milliseconds(100))
            try? await Task.sleep(until: wake)
        }
        return sample
    }
}
