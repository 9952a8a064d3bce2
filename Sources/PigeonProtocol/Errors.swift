/// The error codes of the wire contract, each with its HTTP status.
public struct ErrorCode: RawRepresentable, Codable, Sendable, Hashable, CustomStringConvertible {
    public var rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// 400: malformed JSON, a missing or ill-typed field, a bad UUID or cursor.
    public static let invalidRequest = ErrorCode(rawValue: "invalid_request")
    /// 401: missing, malformed, expired or unknown token.
    public static let unauthorized = ErrorCode(rawValue: "unauthorized")
    /// 404: unknown conversation, or the caller is not a member (the two are never told apart).
    public static let notFound = ErrorCode(rawValue: "not_found")
    /// 413: request or message body over the limit.
    public static let payloadTooLarge = ErrorCode(rawValue: "payload_too_large")
    /// 429: per-device rate limit; `Retry-After` says when to try again.
    public static let rateLimited = ErrorCode(rawValue: "rate_limited")
    /// 503: ingest buffer full or a backend down; nothing was accepted.
    public static let overloaded = ErrorCode(rawValue: "overloaded")
    /// 500: a server fault; the request may or may not have taken effect, so retry idempotently.
    public static let internalError = ErrorCode(rawValue: "internal")
    /// 403: the caller is known but may not do this (a plain member removing someone else; a user at its device cap).
    public static let forbidden = ErrorCode(rawValue: "forbidden")
    /// 409: the action contradicts the target's state: reacting or replying to a deleted message, a message's
    /// reaction limit reached (API.md 1.2).
    public static let conflict = ErrorCode(rawValue: "conflict")
    /// 403: the app's before-send hook refused the message; nothing was stored (API.md 1.2).
    public static let rejected = ErrorCode(rawValue: "rejected")
    /// 405: the path exists but not with this method.
    public static let methodNotAllowed = ErrorCode(rawValue: "method_not_allowed")
    /// 416: a download's `Range` lies past the attachment's end (API.md 1.2); `Content-Range: bytes */<size>`.
    public static let rangeNotSatisfiable = ErrorCode(rawValue: "range_not_satisfiable")

    /// The HTTP status that goes with this code.
    public var httpStatus: Int {
        switch self {
        case .invalidRequest: 400
        case .unauthorized: 401
        case .forbidden, .rejected: 403
        case .conflict: 409
        case .notFound: 404
        case .methodNotAllowed: 405
        case .payloadTooLarge: 413
        case .rangeNotSatisfiable: 416
        case .rateLimited: 429
        case .overloaded: 503
        default: 500
        }
    }

    /// Whether a client should try the same request again later (the server de-duplicates sends).
    public var isTransient: Bool {
        self == .rateLimited || self == .overloaded || self == .internalError
    }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// The `error` member of every error body.
public struct ErrorDetail: Codable, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String

    public init(code: ErrorCode, message: String) {
        self.code = code
        self.message = message
    }
}

/// Every error answer: `{"error": {"code", "message"}}`.
public struct ErrorBody: Codable, Sendable, Equatable {
    public var error: ErrorDetail

    public init(code: ErrorCode, message: String) {
        self.error = ErrorDetail(code: code, message: message)
    }
}
