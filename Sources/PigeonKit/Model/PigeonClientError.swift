import PigeonProtocol

/// An error of the client SDK: a local refusal, or the server's or the network's answer to a call.
public struct PigeonClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of error it is: compare with the static members (`error.code == .timeout`). New codes may be
    /// added; a `switch` needs a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String {
            case invalidArgument, unknownConversation, unknownMessage, notRetryable, localDatabase
            case server, network, webSocketRefused, timeout, wrongDatabase, closed
            case forbidden, notMember, invitationPending
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
        /// The server refused a member or name change because this user's role does not allow it (`403`): only the
        /// owner and admins add and remove others and rename, only the owner sets roles.
        public static let forbidden = Code(.forbidden)
        /// This user is no longer a member of the conversation (removed, or left): the server answers `404`, and the
        /// device keeps it read-only (``PigeonConversation/leftAtSeq``).
        public static let notMember = Code(.notMember)
        /// This user is invited to the conversation and has not accepted (API.md 1.2): accept it
        /// (``PigeonClient/acceptInvitation(_:)``) before sending or reacting there.
        public static let invitationPending = Code(.invitationPending)

        /// The code's name, e.g. `timeout`.
        public var description: String { base.rawValue }
    }

    /// What kind of error it is.
    public var code: Code
    /// What went wrong, for a log or a developer; not meant for end users.
    public var message: String
    /// The server's error body (API.md's error codes), for ``Code-swift.struct/server``.
    public var serverError: ErrorDetail?
    /// The HTTP status of the server's answer, when the error came from one (an error frame on the WebSocket
    /// carries the status its code maps to).
    public var httpStatus: Int?
    /// The server's `Retry-After`, in seconds, when it sent one.
    public var retryAfterSeconds: Int?

    /// An error with its code and message, and the server's answer when there was one.
    public init(_ code: Code, _ message: String, serverError: ErrorDetail? = nil, httpStatus: Int? = nil, retryAfterSeconds: Int? = nil) {
        self.code = code
        self.message = message
        self.serverError = serverError
        self.httpStatus = httpStatus
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// The server's code, status and message when it answered; else ``message``.
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
