import Foundation
import PigeonDomain
import PostgresNIO

/// `postgres://user[:password]@host[:port]/database[?sslmode=disable|prefer|require][&schema=NAME][&event_partitions=N]`
/// `[&max_connections=N]`, parsed.
///
/// `schema` keeps Pigeon's tables in a schema of their own (created at start-up when missing), e.g. to share a
/// database with an application. `event_partitions` (1–64, default 16) is how many partitions the event log has:
/// see ``PostgresSchema/applyLayout(_:partitions:logger:)``. `max_connections` (2–1000, default 20) caps this node's
/// connection pool (its LISTEN connection included): the nodes' sum must stay under the server's `max_connections`.
package struct PostgresURL: Sendable {
    package enum SSLMode: String, Sendable { case disable, prefer, require }

    package var host: String
    package var port: Int
    package var user: String
    package var password: String?
    package var database: String?
    package var sslMode: SSLMode
    package var schema: String?
    /// How many partitions the event log should have.
    package var eventPartitions = 16
    /// The most connections this node's pool opens; `nil`: the caller's default.
    package var maxConnections: Int?

    package init(_ url: String) throws {
        guard let components = URLComponents(string: url), let scheme = components.scheme, ["postgres", "postgresql"].contains(scheme)
        else { throw PigeonError.invalid("--store must be 'embedded' or a postgres://user@host:port/database URL, not '\(url)'") }
        guard let host = components.host, !host.isEmpty else { throw PigeonError.invalid("the PostgreSQL URL '\(url)' has no host") }
        guard let user = components.user, !user.isEmpty else { throw PigeonError.invalid("the PostgreSQL URL '\(url)' has no user") }
        let query = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { _, last in last })
        let mode = query["sslmode"] ?? "disable"
        guard let sslMode = SSLMode(rawValue: mode == "verify-full" ? "require" : mode) else {
            throw PigeonError.invalid("the PostgreSQL URL's sslmode '\(mode)' is not one of disable, prefer, require")
        }
        if let schema = query["schema"] {
            guard !schema.isEmpty, schema.count <= 63, schema.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }),
                !schema.first!.isNumber
            else { throw PigeonError.invalid("the PostgreSQL URL's schema '\(schema)' must be a plain identifier (letters, digits, _)") }
            self.schema = schema.lowercased()
        }
        if let text = query["event_partitions"] {
            guard let partitions = Int(text), (1...64).contains(partitions) else {
                throw PigeonError.invalid("the PostgreSQL URL's event_partitions must be an integer from 1 to 64, not '\(text)'")
            }
            self.eventPartitions = partitions
        }
        if let text = query["max_connections"] {
            guard let count = Int(text), (2...1000).contains(count) else {
                throw PigeonError.invalid("the PostgreSQL URL's max_connections must be an integer from 2 to 1000, not '\(text)'")
            }
            self.maxConnections = count
        }
        if let unknown = query.keys.sorted().first(where: { !["sslmode", "schema", "event_partitions", "max_connections"].contains($0) }) {
            throw PigeonError.invalid(
                "the PostgreSQL URL has an unknown option '\(unknown)' (known: sslmode, schema, event_partitions, max_connections)")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        self.host = host
        self.port = components.port ?? 5432
        self.user = user
        self.password = components.password
        self.database = database.isEmpty ? nil : database
        self.sslMode = sslMode
    }

    package func clientConfiguration(maxConnections: Int) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        switch sslMode {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(.makeClientConfiguration())
        case .require: tls = .require(.makeClientConfiguration())
        }
        var configuration = PostgresClient.Configuration(host: host, port: port, username: user, password: password, database: database, tls: tls)
        configuration.options.maximumConnections = self.maxConnections ?? maxConnections
        configuration.options.minimumConnections = 2
        configuration.options.connectTimeout = .seconds(5)
        if let schema { configuration.options.additionalStartupParameters = [("search_path", schema)] }
        return configuration
    }

    /// A single connection with the same settings (migrations at start-up).
    package func connectionConfiguration() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch sslMode {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: tls)
        if let schema { configuration.options.additionalStartupParameters = [("search_path", schema)] }
        return configuration
    }
}
