import Foundation
import PigeonBenchSupport

/// Samples what PostgreSQL's client backends wait for while a measured window runs: `pg_stat_activity` every
/// ``interval``, through one `psql` connection (one process, one backend, one short query and a `pg_sleep` per
/// sample, each in a transaction of its own), so that sampling costs the machine little. A sample is a snapshot of
/// every backend of the database that is not idle, with its wait event and the start of its query; which of them
/// belong to the nodes under test is decided afterwards (``LockWaitSummary``).
struct PostgresWaitSampler: Sendable {
    /// `postgres://…` of the database the nodes use.
    let postgresURL: String

    static let interval = Duration.milliseconds(100)

    /// Samples from `window.start` until `window.end` and returns the samples taken inside the window (by
    /// PostgreSQL's clock, which is this machine's). Bounded by count as well: ``interval`` apart at most, so
    /// window / interval samples.
    func sample(window: MeasurementWindow) async throws -> [ActivitySample] {
        let now = ContinuousClock.now
        let wallNow = Date().timeIntervalSince1970
        let wallStart = wallNow + (window.start - now).seconds
        let wallEnd = wallNow + (window.end - now).seconds
        let count = Int((window.end - window.start) / Self.interval)
        var arguments = ["-X", "-q", "-A", "-t", "-F", String(Self.separator), "-d", postgresURL]
        for _ in 0..<count {
            arguments += ["-c", Self.sampleQuery, "-c", "SELECT pg_sleep(\(Self.interval.seconds))"]
        }
        try await Task.sleep(until: window.start)
        let output = try await ExternalCommand.output(of: "psql", arguments, timeout: window.end - window.start + .seconds(30))
        var samples: [ActivitySample] = []
        for line in output.split(separator: "\n") {
            let fields = line.split(separator: Self.separator, omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 6 else { continue }
            if fields[0] == "sample", let at = Double(fields[1]) {
                samples.append(ActivitySample(at: at, backends: []))
            } else if fields[0] == "backend", !samples.isEmpty {
                samples[samples.count - 1].backends.append(
                    BusyBackend(clientPort: Int(fields[1]), state: fields[2], waitEventType: fields[3], waitEvent: fields[4], query: fields[5])
                )
            }
        }
        return samples.filter { $0.at >= wallStart && $0.at < wallEnd }
    }

    /// The field separator of psql's output (the ASCII unit separator: no query text holds it).
    private static let separator: Character = "\u{1F}"

    /// One `sample` row with PostgreSQL's clock, then a `backend` row for each other busy client backend of the
    /// database: its client port, state, wait event and the first 100 characters of its query, whitespace collapsed.
    private static let sampleQuery = """
        SELECT 'sample', extract(epoch FROM clock_timestamp())::text, '', '', '', '' \
        UNION ALL \
        SELECT 'backend', coalesce(client_port::text, ''), coalesce(state, ''), coalesce(wait_event_type, ''), \
        coalesce(wait_event, ''), left(regexp_replace(query, '\\s+', ' ', 'g'), 100) \
        FROM pg_stat_activity \
        WHERE backend_type = 'client backend' AND datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'
        """
}

/// One snapshot of `pg_stat_activity`.
struct ActivitySample: Sendable {
    /// When it was taken, seconds since 1970 by PostgreSQL's clock.
    var at: Double
    /// The database's client backends that were not idle (running a statement, or in a transaction between two).
    var backends: [BusyBackend]
}

/// A client backend of one ``ActivitySample``.
struct BusyBackend: Sendable {
    /// The TCP port of the client's end of the connection (`nil` for a Unix socket).
    var clientPort: Int?
    /// `active`, `idle in transaction`, …
    var state: String
    /// `Lock`, `LWLock`, `IO`, `Client`, …; empty when it is not waiting.
    var waitEventType: String
    var waitEvent: String
    /// The start of its current (or last) statement, whitespace collapsed.
    var query: String

    /// Whether it waits for a heavyweight lock (a row, a transaction id, a relation) or a lightweight one.
    var isWaitingForLock: Bool { waitEventType == "Lock" || waitEventType == "LWLock" }

    /// Whether it is inside a transaction and waits for its client's next statement (the locks it took are held).
    var isIdleInTransaction: Bool { state.hasPrefix("idle in transaction") }
}

/// The lock waits of the nodes' backends over a window's samples: how often a backend was seen waiting for each
/// lock (wait event) in each statement. A backend waiting in 30 of 100 samples counts 30: the counts are
/// backend-samples, proportional to the time spent waiting.
struct LockWaitSummary: Codable, Sendable {
    /// One wait event in one statement.
    struct Wait: Codable, Sendable {
        /// `Lock` or `LWLock`.
        var waitEventType: String
        /// E.g. `transactionid` (waiting for another transaction to end, as a row lock does), `tuple`, `WALWrite`.
        var waitEvent: String
        /// The start of the waiting statement, whitespace collapsed.
        var query: String
        /// Backend-samples seen waiting so.
        var count: Int
    }

    var samples: Int
    var intervalMilliseconds: Int
    /// The nodes' backends that were busy (not idle), on average per sample.
    var meanBusyBackends: Double
    /// The nodes' backends inside a transaction waiting for the node's next statement (holding the transaction's
    /// locks meanwhile), on average per sample.
    var meanIdleInTransactionBackends: Double
    /// The nodes' backends waiting for a lock, on average per sample.
    var meanWaitingBackends: Double
    /// Most frequent first.
    var waits: [Wait]
    /// Lock waits of backends that are not the nodes' (other clients of the same PostgreSQL), in backend-samples.
    var otherClientsWaits: Int

    /// Summarises `samples`, counting as the nodes' the backends whose client port is in `nodePorts`.
    init(samples: [ActivitySample], nodePorts: Set<Int>) {
        self.samples = samples.count
        intervalMilliseconds = Int(PostgresWaitSampler.interval.seconds * 1000)
        var busy = 0
        var idleInTransaction = 0
        var waiting = 0
        var others = 0
        var counts: [String: Wait] = [:]
        for sample in samples {
            for backend in sample.backends {
                guard let port = backend.clientPort, nodePorts.contains(port) else {
                    if backend.isWaitingForLock { others += 1 }
                    continue
                }
                busy += 1
                if backend.isIdleInTransaction { idleInTransaction += 1 }
                guard backend.isWaitingForLock else { continue }
                waiting += 1
                let key = [backend.waitEventType, backend.waitEvent, backend.query].joined(separator: "\u{1F}")
                counts[key, default: Wait(waitEventType: backend.waitEventType, waitEvent: backend.waitEvent, query: backend.query, count: 0)]
                    .count += 1
            }
        }
        meanBusyBackends = samples.isEmpty ? 0 : Double(busy) / Double(samples.count)
        meanIdleInTransactionBackends = samples.isEmpty ? 0 : Double(idleInTransaction) / Double(samples.count)
        meanWaitingBackends = samples.isEmpty ? 0 : Double(waiting) / Double(samples.count)
        waits = counts.values.sorted { ($0.count, $1.query) > ($1.count, $0.query) }
        otherClientsWaits = others
    }

    /// The waits of several summaries added up (the rounds of one node count), most frequent first.
    static func combinedWaits(_ summaries: [LockWaitSummary]) -> [Wait] {
        var counts: [String: Wait] = [:]
        for wait in summaries.flatMap(\.waits) {
            let key = [wait.waitEventType, wait.waitEvent, wait.query].joined(separator: "\u{1F}")
            counts[key, default: Wait(waitEventType: wait.waitEventType, waitEvent: wait.waitEvent, query: wait.query, count: 0)]
                .count += wait.count
        }
        return counts.values.sorted { ($0.count, $1.query) > ($1.count, $0.query) }
    }
}
