/// Where and how to connect to Redis.
public struct RedisConfiguration: Sendable, Equatable {
    /// The host name or IP address of the server.
    public var host: String
    /// The TCP port of the server (6379 by default).
    public var port: Int
    /// The database selected on every connection (`SELECT`), 0 by default.
    public var database: Int
    /// The ACL user for `AUTH`; `nil` authenticates as the default user (when a password is set).
    public var username: String?
    /// The password for `AUTH`; `nil` sends no `AUTH`.
    public var password: String?
    /// How long opening a TCP connection may take.
    public var connectTimeout: Duration
    /// The query items of the URL (`?prefix=pigeon&partitions=16`), for callers' own options; the client ignores them.
    public var queryItems: [String: String]

    public init(
        host: String = "127.0.0.1", port: Int = 6379, database: Int = 0, username: String? = nil, password: String? = nil,
        connectTimeout: Duration = .seconds(5), queryItems: [String: String] = [:]
    ) {
        self.host = host
        self.port = port
        self.database = database
        self.username = username
        self.password = password
        self.connectTimeout = connectTimeout
        self.queryItems = queryItems
    }

    /// Parses `redis://[[user]:password@]host[:port][/db][?name=value&...]`.
    ///
    /// The user and password may be percent-encoded; an IPv6 host is written in brackets (`redis://[::1]:6379`).
    /// Throws ``RedisError/invalidURL(_:)`` saying what is wrong.
    public init(url: String) throws {
        let scheme = "redis://"
        guard url.hasPrefix(scheme) else {
            if url.hasPrefix("rediss://") { throw RedisError.invalidURL("TLS (rediss://) is not supported: \(url)") }
            throw RedisError.invalidURL("expected redis://[user:password@]host[:port][/db][?query], got \(url)")
        }
        var rest = Substring(url.dropFirst(scheme.count))
        self.init()

        if let questionMark = rest.firstIndex(of: "?") {
            for item in rest[rest.index(after: questionMark)...].split(separator: "&") {
                let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = try Self.percentDecoded(parts[0], in: url)
                guard !name.isEmpty else { throw RedisError.invalidURL("empty query item name in \(url)") }
                queryItems[name] = try parts.count > 1 ? Self.percentDecoded(parts[1], in: url) : ""
            }
            rest = rest[..<questionMark]
        }
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            if !path.isEmpty {
                guard let database = Int(path), database >= 0 else {
                    throw RedisError.invalidURL("the database must be a non-negative number, got \"\(path)\" in \(url)")
                }
                self.database = database
            }
            rest = rest[..<slash]
        }
        if let at = rest.lastIndex(of: "@") {
            let userInfo = rest[..<at]
            if let colon = userInfo.firstIndex(of: ":") {
                let user = try Self.percentDecoded(userInfo[..<colon], in: url)
                username = user.isEmpty ? nil : user
                password = try Self.percentDecoded(userInfo[userInfo.index(after: colon)...], in: url)
            } else {
                // redis://secret@host: a single user-info part is the password (as redis-cli reads it).
                password = try Self.percentDecoded(userInfo, in: url)
            }
            rest = rest[rest.index(after: at)...]
        }
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw RedisError.invalidURL("unclosed [ in the host of \(url)") }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let afterHost = rest[rest.index(after: close)...]
            if !afterHost.isEmpty {
                guard afterHost.hasPrefix(":") else { throw RedisError.invalidURL("unexpected \"\(afterHost)\" after the host in \(url)") }
                portText = afterHost.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            portText = rest[rest.index(after: colon)...]
        } else {
            host = String(rest)
        }
        guard !host.isEmpty else { throw RedisError.invalidURL("missing host in \(url)") }
        if let portText {
            guard let port = Int(portText), (1...65535).contains(port) else {
                throw RedisError.invalidURL("the port must be 1...65535, got \"\(portText)\" in \(url)")
            }
            self.port = port
        }
    }

    private static func percentDecoded(_ text: Substring, in url: String) throws -> String {
        guard text.contains("%") else { return String(text) }
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(Self.hexValue), let low = iterator.next().flatMap(Self.hexValue) else {
                    throw RedisError.invalidURL("invalid percent-encoding in \(url)")
                }
                bytes.append(high << 4 | low)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension RedisConfiguration: CustomStringConvertible {
    /// The address and database, without credentials (safe to log).
    public var description: String {
        let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        return "redis://\(address)/\(database)"
    }
}
