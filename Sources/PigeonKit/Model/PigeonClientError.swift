import PigeonProtocol

/// An error of the client SDK: a local refusal, or the server's or the network's answer to a call.
public struct PigeonClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String {
            case invalidArgument, unknownConversation, unknownMessage, notRetryable, localDatabase
            case server, network, webSocketRefused, timeout, wrongDatabase, closed
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The input is refused before anything is written (bad type, empty or oversized body, U+0000, bad id).
        public static let invalidArgument = Code(.invalidArgument)
        /// The conversation is not in the local database (create it, or sync first).
        public static let unknownConversation = Code(.unknownConversation)
        /// No message with that local id.
        public static let unknownMessage = Code(.unknownMessage)
        /// ``PigeonClient/retry(localId:)`` on a message that has not failed, or was not sent from this device.
        public static let notRetryable = Code(.notRetryable)
        /// The local database failed.
        public static let localDatabase = Code(.localDatabase)
        /// The server answered with an error (``PigeonClientError/serverError`` says which).
        public static let server = Code(.server)
        /// The server could not be reached or the connection broke.
        public static let network = Code(.network)
        /// The server, or a proxy on the way, refused the WebSocket upgrade (the client falls back to server-sent
        /// events when its stream transport is automatic).
        public static let webSocketRefused = Code(.webSocketRefused)
        /// No answer in time.
        public static let timeout = Code(.timeout)
        /// The database belongs to another user or device than the credentials.
        public static let wrongDatabase = Code(.wrongDatabase)
        /// The client was closed.
        public static let closed = Code(.closed)

        public var description: String { base.rawValue }
    }

    public var code: Code
    public var message: String
    /// The server's error body and HTTP status, for ``Code/server``.
    public var serverError: ErrorDetail?
    public var httpStatus: Int?
    /// The server's `Retry-After`, in seconds, when it sent one.
    public var retryAfterSeconds: Int?

    public init(_ code: Code, _ message: String, serverError: ErrorDetail? = nil, httpStatus: Int? = nil, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.message = message
        self.serverError = serverError
        self.httpStatus = httpStatus
        self.retryAfterSeconds = retryAfterSeconds
    }

    public var description: String {
        if let serverError, let httpStatus { return "\(serverError.code.rawValue) (\(httpStatus)): \(serverError.message)" }
        return message
    }

    /// Whether the same request may succeed later: network trouble, timeouts, and the server's 429, 503 and 500.
    public var isTransient: Bool {
        switch code {
        case .network, .webSocketRefused, .timeout: true
        case .server: serverError?.code.isTransient ?? true
        default: false
        }
    }

    static func invalid(_ message: String) -> PigeonClientError { PigeonClientError(.invalidArgument, message) }
}
