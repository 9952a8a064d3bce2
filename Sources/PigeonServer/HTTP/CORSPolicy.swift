import Foundation
import HTTPTypes
import Hummingbird
import PigeonDomain
import PigeonProtocol

/// Which web pages may call the `/v1` API (and read the contract documents, ``ContractDocument``) from a browser
/// (CORS), from `ServerConfiguration.corsOrigins`.
///
/// - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) of a known `/v1` path from an allowed
///   origin is answered `204` with the allow headers (``preflight(methods:origin:)``); from another origin it is
///   refused `403 forbidden`, without any CORS header.
/// - Every other answer of a `/v1` path to an allowed origin carries `Access-Control-Allow-Origin` and exposes
///   `Retry-After` (``decorate(_:origin:)``); an answer to another origin, or to a request without `Origin`, carries
///   none (the browser then keeps it from the page; the server does not refuse the request for that).
/// - The WebSocket upgrade, which browsers do not subject to CORS, is refused `403` to an `Origin` not on the list
///   (``refusesWebSocket(origin:host:)``); a client that sends no `Origin` (not a browser) is not checked, nor a page
///   of the server's own origin.
///
/// `*` allows every origin, answered `Access-Control-Allow-Origin: *`. Credentials (cookies, HTTP authentication) are
/// never allowed: Pigeon's token travels in `Authorization` or `access_token`, which need none.
public struct CORSPolicy: Sendable {
    /// The request headers a page may send: the token, JSON bodies, and an `EventSource`'s reconnection cursor.
    static let allowedHeaders = "Authorization, Content-Type, Last-Event-ID"
    /// The answer headers a page may read beside the safelisted ones.
    static let exposedHeaders = "Retry-After"
    /// How long a browser may reuse a preflight's answer, in seconds.
    static let maxAgeSeconds = 600

    /// The allowed origins, lowercased.
    private let origins: Set<String>
    private let allowsAnyOrigin: Bool

    /// The policy of `origins` (each `*` or an origin, see ``isValidOrigin(_:)``); `nil` when there are none: then no
    /// CORS header is ever sent. An entry that is not an origin is a configuration error.
    init?(origins: [String]) throws {
        guard !origins.isEmpty else { return nil }
        for origin in origins where !Self.isValidOrigin(origin) {
            throw PigeonError.invalid(
                "the CORS origin '\(origin.prefix(200))' is not an origin: give scheme://host[:port] (like https://app.example.com, no path) or *")
        }
        self.allowsAnyOrigin = origins.contains("*")
        self.origins = Set(origins.map { $0.lowercased() })
    }

    /// Whether `text` can be a CORS origin of the configuration: `*`, or `scheme://host` with an optional `:port`,
    /// nothing after it (no path, not even `/`), no user info, no spaces. (A browser's `Origin: null` is allowed only
    /// by `*`.)
    public static func isValidOrigin(_ text: String) -> Bool {
        if text == "*" { return true }
        guard let separator = text.range(of: "://") else { return false }
        let scheme = text[..<separator.lowerBound]
        let authority = text[separator.upperBound...]
        func isLetter(_ byte: UInt8) -> Bool { (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) }
        func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
        guard let first = scheme.utf8.first, isLetter(first),
            scheme.utf8.allSatisfy({ isLetter($0) || isDigit($0) || "+-.".utf8.contains($0) })
        else { return false }
        guard !authority.isEmpty, authority.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }),
            !authority.utf8.contains(where: { "/?#@\\".utf8.contains($0) })
        else { return false }
        // A port, if any, is 1-5 digits after the last colon outside an IPv6 literal's brackets.
        if let colon = authority.lastIndex(of: ":"), !authority[colon...].contains("]") {
            let port = authority[authority.index(after: colon)...]
            guard (1...5).contains(port.utf8.count), port.utf8.allSatisfy(isDigit), authority.startIndex != colon else { return false }
        }
        return true
    }

    /// Whether a page of `origin` may read the API's answers.
    func allows(_ origin: String) -> Bool {
        allowsAnyOrigin || origins.contains(origin.lowercased())
    }

    /// The `Access-Control-Allow-Origin` of an answer to `origin`: `*` when every origin is allowed, else the origin
    /// itself when it is allowed, else `nil`.
    private func allowOrigin(for origin: String) -> String? {
        if allowsAnyOrigin { return "*" }
        return origins.contains(origin.lowercased()) ? origin : nil
    }

    /// The answer to a preflight from `origin` of a path served with `methods`: `204` with the allow headers, or
    /// `403 forbidden` for an origin that is not allowed.
    func preflight(methods: [HTTPRequest.Method], origin: String) -> Response {
        guard let allowOrigin = allowOrigin(for: origin) else {
            var response = JSONBody.errorResponse(
                PigeonError(.forbidden, "the origin \(origin.prefix(200)) may not call this server from a browser (--cors-origin)"))
            response.headers[.vary] = "Origin"
            return response
        }
        return Response(
            status: .noContent,
            headers: [
                .accessControlAllowOrigin: allowOrigin,
                .accessControlAllowMethods: methods.map(\.rawValue).joined(separator: ", "),
                .accessControlAllowHeaders: Self.allowedHeaders,
                .accessControlMaxAge: String(Self.maxAgeSeconds),
                .vary: "Origin",
            ])
    }

    /// Adds the CORS headers of an actual answer to a request from `origin` (none when `origin` is `nil` or not
    /// allowed), and `Vary: Origin` in every case, since the answer depends on it.
    func decorate(_ response: inout Response, origin: String?) {
        if let existing = response.headers[.vary] {
            if !existing.lowercased().contains("origin") { response.headers[.vary] = existing + ", Origin" }
        } else {
            response.headers[.vary] = "Origin"
        }
        guard let origin, let allowOrigin = allowOrigin(for: origin) else { return }
        response.headers[.accessControlAllowOrigin] = allowOrigin
        response.headers[.accessControlExposeHeaders] = Self.exposedHeaders
    }

    /// Whether a WebSocket upgrade with this `Origin` header, sent to this `Host`, is refused: a browser's page of an
    /// origin not allowed. Without the header (a native client) nothing is checked, and a page of the server's own
    /// origin (``isOwnOrigin(_:host:)``: the web demo at `/`) is never refused.
    func refusesWebSocket(origin: String?, host: String?) -> Bool {
        guard let origin else { return false }
        if let host, Self.isOwnOrigin(origin, host: host) { return false }
        return !allows(origin)
    }

    /// Whether `origin` is the server's own, for a request sent to `host` (its `Host` header): the origin's host and
    /// port are the `Host` (compared without regard to case). The scheme is not compared: behind a TLS proxy the server
    /// sees plain HTTP from a page of `https://` its own host. A page of another site cannot send it, since the browser
    /// sets both headers.
    static func isOwnOrigin(_ origin: String, host: String) -> Bool {
        guard let separator = origin.range(of: "://"), !host.isEmpty else { return false }
        return origin[separator.upperBound...].lowercased() == host.lowercased()
    }
}
