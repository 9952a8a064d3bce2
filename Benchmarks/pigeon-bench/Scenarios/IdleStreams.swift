import PigeonBenchSupport
import PigeonProtocol
import Synchronization

/// Many idle event streams: opens `settings.streams` WebSockets spread over `settings.streamDevices` devices, at most
/// `settings.openConcurrency` opening at a time, measures the server's resident memory once all are open, then closes
/// them. Runs on one node.
struct IdleStreams {
    let api: PigeonAPI
    let server: PigeonServer
    let settings: BenchSettings
    /// Prefix of the user ids the run registers.
    let namePrefix: String

    func measure(residentBytesAtStartup: UInt64?) async throws -> IdleStreamsResult {
        let devices = try await api.registerDevices(count: settings.streamDevices, prefix: namePrefix, concurrency: 32)
        let residentBytesBefore = server.pid.flatMap(ProcessStats.residentBytes)
        let census = StreamCensus()
        let streams = settings.streams
        let limit = settings.openConcurrency
        let baseURL = api.baseURL
        let start = ContinuousClock.now
        let openDeadline = start + .seconds(60) + .milliseconds(10 * streams)
        let (openSeconds, residentBytesWithStreams) = try await withThrowingTaskGroup(of: Void.self) { group in
            var launched = 0
            while launched < streams {
                while launched < streams, launched - census.settled < limit {
                    let socket = PigeonWebSocket(baseURL: baseURL, token: devices[launched % devices.count].token)
                    group.addTask { await Self.hold(socket, census: census) }
                    launched += 1
                }
                try await Task.sleep(for: .milliseconds(5))
                guard ContinuousClock.now < openDeadline else { break }
            }
            guard try await waitUntil(openDeadline, { census.settled >= streams }) else {
                throw BenchError.timedOut("\(census.opened) of \(streams) streams opened (\(census.failed) failed)")
            }
            let openSeconds = (ContinuousClock.now - start).seconds
            try await Task.sleep(for: .seconds(1))
            let residentBytes = server.pid.flatMap(ProcessStats.residentBytes)
            group.cancelAll()
            return (openSeconds, residentBytes)
        }
        return IdleStreamsResult(
            streams: streams,
            devices: devices.count,
            opened: census.opened,
            failed: census.failed,
            closedByServer: census.closedEarly,
            firstError: census.firstError,
            openSeconds: openSeconds,
            residentBytesAtStartup: residentBytesAtStartup,
            residentBytesBefore: residentBytesBefore,
            residentBytesWithStreams: residentBytesWithStreams
        )
    }

    /// Opens one stream and reads it (answering pings) until cancelled.
    private static func hold(_ socket: PigeonWebSocket, census: StreamCensus) async {
        do {
            try await socket.run { frames, _ in
                census.didOpen()
                do {
                    for try await _ in frames {}
                } catch {}
                if !Task.isCancelled { census.didCloseEarly() }
            }
        } catch {
            if !Task.isCancelled { census.didFail(error) }
        }
    }
}

/// Counts the outcomes of opening many streams.
private final class StreamCensus: Sendable {
    private struct Counts {
        var opened = 0
        var failed = 0
        var closedEarly = 0
        var firstError: String?
    }

    private let counts = Mutex(Counts())

    func didOpen() {
        counts.withLock { $0.opened += 1 }
    }

    /// The stream could not be opened.
    func didFail(_ error: any Error) {
        counts.withLock {
            $0.failed += 1
            if $0.firstError == nil { $0.firstError = "\(error)" }
        }
    }

    /// The server ended an open stream before the scenario closed it.
    func didCloseEarly() {
        counts.withLock { $0.closedEarly += 1 }
    }

    var opened: Int { counts.withLock { $0.opened } }
    var failed: Int { counts.withLock { $0.failed } }
    var closedEarly: Int { counts.withLock { $0.closedEarly } }
    var firstError: String? { counts.withLock { $0.firstError } }
    /// Streams that are open or failed to open.
    var settled: Int { counts.withLock { $0.opened + $0.failed } }
}
