import Foundation
import Logging
import PigeonServer
import PigeonTestSupport
import PostgresNIO

/// Which store and buffer the server tests run against: `PIGEON_TEST_BACKEND` = `embedded` (default), `postgres`
/// (PostgreSQL store, embedded buffer), `production` (PostgreSQL store, Redis Streams buffer) or `redisBuffer`
/// (embedded store, Redis Streams buffer): every store × buffer pair the server accepts. The services'
/// URLs come from `PIGEON_TEST_POSTGRES_URL` and `PIGEON_TEST_REDIS_URL` (scripts/test.sh starts them); a
/// backend whose service is not configured is an error, never a skip.
enum TestBackend: String {
    case embedded, postgres, production, redisBuffer

    static var current: TestBackend {
        guard let name = ProcessInfo.processInfo.environment["PIGEON_TEST_BACKEND"], !name.isEmpty else { return .embedded }
        guard let backend = TestBackend(rawValue: name) else { fatalError("PIGEON_TEST_BACKEND must be embedded, postgres, production or redisBuffer, not \(name)") }
        return backend
    }

    var usesPostgres: Bool { self == .postgres || self == .production }
    var usesRedis: Bool { self == .production || self == .redisBuffer }

    static func environmentURL(_ name: String) throws -> String {
        guard let url = ProcessInfo.processInfo.environment[name], !url.isEmpty else {
            throw TestFailure("\(name) is not set: run the tests through scripts/test.sh, which starts PostgreSQL and Redis")
        }
        return url
    }
}

/// The services one test's server uses (and its restarts reuse): a fresh PostgreSQL schema and a fresh Redis
/// key prefix, so tests running in parallel never see each other's data.
struct TestBackendInstance: Sendable {
    var store: ServerConfiguration.StoreBackend = .embedded
    var buffer: ServerConfiguration.BufferBackend = .embedded
    var schemaName: String?

    /// `leaseMilliseconds`: the Redis buffer's partition lease (short in tests that kill a node).
    static func make(_ backend: TestBackend = .current, leaseMilliseconds: Int? = nil) async throws -> TestBackendInstance {
        var instance = TestBackendInstance()
        let suffix = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(12).lowercased()
        if backend.usesPostgres {
            // A schema per test (creating a database per test is slow when dozens run at once).
            let name = "pigeon_t_\(suffix)"
            instance.schemaName = name
            // A small pool: the crowded passes run 150+ servers at once, and 20 connections each (the default) went
            // past PostgreSQL's max_connections ("too many clients"), stalling requests past their 30 s timeout.
            instance.store = .postgres(try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL") + "?schema=\(name)&max_connections=4")
        }
        if backend.usesRedis {
            var url = try TestBackend.environmentURL("PIGEON_TEST_REDIS_URL") + "?prefix=t\(suffix)"
            if let leaseMilliseconds { url += "&lease_ms=\(leaseMilliseconds)" }
            instance.buffer = .redis(url)
        }
        return instance
    }

    /// Drops the schema (the Redis keys of a prefix are small and go with the test Redis).
    func tearDown() async {
        if let schemaName { try? await TestPostgres.execute("DROP SCHEMA IF EXISTS \(schemaName) CASCADE") }
    }

    func apply(to configuration: inout ServerConfiguration) {
        configuration.store = store
        configuration.buffer = buffer
        // A production store or buffer never opens registration by default; the tests register their own devices.
        if store != .embedded || buffer != .embedded { configuration.openRegistration = true }
    }

    /// The `pigeon-server serve` arguments for these backends.
    var serverArguments: [String] {
        var arguments: [String] = []
        if case .postgres(let url) = store { arguments += ["--store", url] }
        if case .redis(let url) = buffer { arguments += ["--buffer", url] }
        // A production store or buffer never opens registration by default; the tests register their own devices.
        if store != .embedded || buffer != .embedded { arguments.append("--open-registration") }
        return arguments
    }
}

/// Administrative statements on the test PostgreSQL server.
enum TestPostgres {
    static func execute(_ sql: String) async throws {
        _ = try await withConnection { connection, logger in
            try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
        }
    }

    /// The first column of each row `sql` answers, as text.
    static func texts(_ sql: String) async throws -> [String] {
        try await withConnection { connection, logger in
            var texts: [String] = []
            for try await text in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).decode(String.self) {
                texts.append(text)
            }
            return texts
        }
    }

    private static func withConnection<T>(_ body: (PostgresConnection, Logger) async throws -> T) async throws -> T {
        let base = try TestBackend.environmentURL("PIGEON_TEST_POSTGRES_URL")
        guard let components = URLComponents(string: base), let host = components.host, let user = components.user else {
            throw TestFailure("PIGEON_TEST_POSTGRES_URL is not a postgres://user@host:port/db URL: \(base)")
        }
        var logger = Logger(label: "pigeon-test-postgres")
        logger.logLevel = .error
        let connection = try await PostgresConnection.connect(
            configuration: .init(
                host: host, port: components.port ?? 5432, username: user, password: components.password,
                database: components.path.isEmpty ? "postgres" : String(components.path.dropFirst()), tls: .disable),
            id: 1, logger: logger)
        let result: T
        do {
            // A statement held up by a lock a leaked session keeps fails after a minute instead of hanging the run.
            try await connection.query("SET lock_timeout = '60s'", logger: logger)
            result = try await body(connection, logger)
        } catch {
            try? await connection.close()
            throw error
        }
        try await connection.close()
        return result
    }
}
