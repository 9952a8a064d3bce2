import PigeonProtocol

/// An error with a wire code of API.md: the one place server failures map to HTTP statuses and error bodies.
public struct PigeonError: Error, Sendable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    /// Seconds a client should wait before trying again (`Retry-After`), for `rate_limited` and `overloaded`.
    public var retryAfter: Int?

    public init(_ code: ErrorCode, _ message: String, retryAfter: Int? = nil) {
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    public static func invalid(_ message: String) -> PigeonError { .init(.invalidRequest, message) }
    public static let unauthorized = PigeonError(.unauthorized, "missing, malformed or unknown bearer token")
    public static let conversationNotFound = PigeonError(.notFound, "conversation not found")
    /// An invited member (`--consent invites`) reads the conversation; it sends, reacts and types once it accepts.
    public static let invitationPending = PigeonError(
        .forbidden, "you are invited to this conversation: accept the invitation first (POST /v1/conversations/{id}/accept)")
    public static func overloaded(_ message: String) -> PigeonError { .init(.overloaded, message, retryAfter: 1) }

    public var detail: ErrorDetail { ErrorDetail(code: code, message: message) }
    public var description: String { "\(code): \(message)" }

    /// Whether processing should try this message again (store trouble) rather than dead-letter it at once (bad input).
    package var isPermanent: Bool { code == .invalidRequest || code == .notFound || code == .payloadTooLarge }
}
