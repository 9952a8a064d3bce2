import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A PostgreSQL cluster of a test's own (initdb in a temporary directory, loopback on a free port), for tests that
/// restart or stop the database. Run as the `postgres` user when the tests run as root (PostgreSQL refuses root).
/// Missing binaries are an error, never a skip.
public final class PostgresServerProcess: @unchecked Sendable {
    public let port: Int
    public let directory: URL
    public var url: String { "postgres://postgres@127.0.0.1:\(port)/postgres" }

    private var dataDirectory: String { directory.appendingPathComponent("data").path }
    private var logPath: String { directory.appendingPathComponent("postgres.log").path }

    public init() async throws {
        self.port = try freePort()
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try await Self.run(["chmod", "755", directory.path])
        if Self.isRoot { try await Self.run(["chown", "postgres:postgres", directory.path]) }
        try await asPostgres([try Self.binary("initdb"), "-D", dataDirectory, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8"])
        try await start()
    }

    /// Starts the cluster and waits until it accepts connections.
    public func start() async throws {
        try await asPostgres([
            try Self.binary("pg_ctl"), "-D", dataDirectory, "-l", logPath, "-w", "-t", "60",
            "-o", "-c listen_addresses=127.0.0.1 -p \(port) -k \(directory.path) -c max_connections=100", "start",
        ])
    }

    /// Stops it; `immediate` is a crash (no checkpoint, recovery from the WAL at the next start).
    public func stop(immediate: Bool = false) async throws {
        try await asPostgres([try Self.binary("pg_ctl"), "-D", dataDirectory, "-m", immediate ? "immediate" : "fast", "-w", "stop"])
    }

    /// A crash-restart: immediate stop, then start (recovery replays the WAL).
    public func restart() async throws {
        try await stop(immediate: true)
        try await start()
    }

    public func logTail() -> String {
        String(((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").suffix(2_000))
    }

    /// Stops the cluster (immediate: nothing of a test's data needs a checkpoint) without waiting: the postmaster
    /// takes SIGQUIT as `pg_ctl stop -m immediate` sends it, and a thread of its own waits for it to go and removes
    /// the directory. Nothing here blocks a thread of the concurrency pool.
    deinit {
        let directory = self.directory
        let pidFile = dataDirectory + "/postmaster.pid"
        let postmaster = (try? String(contentsOfFile: pidFile, encoding: .utf8))?.split(separator: "\n").first.flatMap { pid_t($0) }
        if let postmaster { _ = kill(postmaster, SIGQUIT) }
        Thread {
            if let postmaster {
                let deadline = Date().addingTimeInterval(30)
                while kill(postmaster, 0) == 0 && Date() < deadline { usleep(20_000) }
            }
            try? FileManager.default.removeItem(at: directory)
        }.start()
    }

    // MARK: Processes

    private static var isRoot: Bool { getuid() == 0 }

    private func asPostgres(_ arguments: [String]) async throws {
        try await Self.run(Self.isRoot ? ["runuser", "-u", "postgres", "--"] + arguments : arguments)
    }

    /// `name` from PATH or the newest /usr/lib/postgresql/*/bin.
    static func binary(_ name: String) throws -> String {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let path = "/usr/lib/postgresql/\(version)/bin/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        throw TestFailure("\(name) not found: install PostgreSQL (scripts/services.sh start does)")
    }

    static func run(_ arguments: [String]) async throws {
        try await Command.run(arguments)
    }
}
