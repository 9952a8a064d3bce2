import Foundation
import NIOCore

/// Where a URL points, as a connection needs it: scheme, host, port, and the path and query to request.
struct ServerAddress: Sendable, Hashable {
    /// `https` or `wss`: the connection is TLS.
    var secure: Bool
    /// The host without IPv6 brackets.
    var host: String
    var port: Int
    /// The path and query, percent-encoded as sent.
    var uri: String
    /// The URL named its port (the `Host` header then does too).
    var explicitPort: Bool

    /// `nil` for a URL that is not `http`, `https`, `ws` or `wss` with a host.
    init?(_ url: String) {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let host = components.host, !host.isEmpty
        else { return nil }
        switch scheme {
        case "http", "ws": secure = false
        case "https", "wss": secure = true
        default: return nil
        }
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        port = components.port ?? (secure ? 443 : 80)
        explicitPort = components.port != nil
        let path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
        uri = path + (components.percentEncodedQuery.map { "?" + $0 } ?? "")
    }

    /// The connection this address needs: requests to two addresses with the same key can share one.
    var connectionKey: String {
        "\(secure ? "https" : "http")://\(host):\(port)"
    }

    /// The `Host` header.
    var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return explicitPort ? "\(name):\(port)" : name
    }

    /// The name sent for TLS's server name indication: none for an IP address, which SNI does not allow.
    var serverName: String? {
        (try? SocketAddress(ipAddress: host, port: port)) == nil ? host : nil
    }
}
