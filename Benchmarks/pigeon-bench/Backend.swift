import ArgumentParser
import Foundation

/// A server set-up `pigeon-bench` spawns and measures.
enum Backend: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// One node with the embedded store and buffer (SQLite files in a fresh data directory).
    case embedded
    /// One node with the PostgreSQL store and the Redis buffer.
    case production
    /// Two nodes sharing one PostgreSQL schema and one Redis key prefix: one service.
    case production2 = "production-2"

    /// The number of server processes.
    var nodes: Int { self == .production2 ? 2 : 1 }

    /// Whether it runs on PostgreSQL and Redis.
    var isProduction: Bool { self != .embedded }

    /// One line that says what runs, for the output.
    var summary: String {
        switch self {
        case .embedded: "1 node, embedded store and buffer"
        case .production: "1 node, PostgreSQL store and Redis buffer"
        case .production2:
            "2 nodes sharing the PostgreSQL store and Redis buffer; connections alternate between the nodes, "
                + "and each latency receiver is on the other node than its sender"
        }
    }
}

/// A comma-separated list of backends, e.g. `embedded,production,production-2`.
struct BackendList: ExpressibleByArgument, Sendable {
    /// The backends in the order given, without repeats.
    var backends: [Backend]

    init?(argument: String) {
        var backends: [Backend] = []
        for name in argument.split(separator: ",") {
            guard let backend = Backend(rawValue: name.trimmingCharacters(in: .whitespaces)) else { return nil }
            if !backends.contains(backend) { backends.append(backend) }
        }
        guard !backends.isEmpty else { return nil }
        self.backends = backends
    }

    static var allValueStrings: [String] { Backend.allCases.map(\.rawValue) }
}
