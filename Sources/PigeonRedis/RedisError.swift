/// Why a Redis command or connection failed.
public enum RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Redis answered with an error reply, such as `NOSCRIPT No matching script` or
    /// `WRONGTYPE Operation against a key holding the wrong kind of value`; ``code`` is its first word.
    case server(String)
    /// The connection was lost while the command was in flight: it may or may not have run.
    case connectionClosed
    /// There is no connection right now (it is being re-established, or was closed): the command was not sent.
    case notConnected(String)
    /// Redis sent something that is not valid RESP, or a reply nobody asked for; the connection is closed.
    case protocolError(String)
    /// Connecting took longer than the configured timeout.
    case timeout
    /// A Redis URL that cannot be used, with the reason.
    case invalidURL(String)

    /// The error prefix of a ``server(_:)`` error reply (`NOSCRIPT`, `WRONGTYPE`, `ERR`, `BUSYGROUP`...), `nil` for
    /// other errors.
    public var code: String? {
        guard case .server(let message) = self else { return nil }
        return message.split(separator: " ", maxSplits: 1).first.map(String.init) ?? message
    }

    public var description: String {
        switch self {
        case .server(let message): "Redis error: \(message)"
        case .connectionClosed: "the Redis connection was lost with the command in flight (it may or may not have run)"
        case .notConnected(let reason): "not connected to Redis (\(reason)); the command was not sent"
        case .protocolError(let reason): "Redis protocol error: \(reason)"
        case .timeout: "timed out connecting to Redis"
        case .invalidURL(let reason): "invalid Redis URL: \(reason)"
        }
    }
}
