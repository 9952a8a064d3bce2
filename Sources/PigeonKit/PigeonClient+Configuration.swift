import Foundation
import Logging

extension PigeonClient {
    /// A device's identity on the server: what ``PigeonClient/registerDevice(serverURL:userId:deviceName:existingDevice:timeout:trustedCertificates:)``
    /// returns, or what the app's backend minted (a JWT with `sub` = userId and `did` = deviceId).
    /// The token is a secret: store it as one (the Keychain on Apple platforms). A database opened with
    /// credentials of another user or device throws ``PigeonClientError/Code-swift.struct/wrongDatabase``.
    public struct Credentials: Sendable, Equatable, Codable {
        /// The user this device belongs to (the JWT's `sub`).
        public var userId: String
        /// This device, as the server registered it (the JWT's `did`): its receipts, cursor and outbox are its own.
        public var deviceId: String
        /// The bearer token of every request and stream. When the server no longer accepts it (401: the device was
        /// revoked), the client signs out (``ConnectionState/signedOut``): messages stay queued and
        /// ``PigeonClient/lastConnectionError`` says `unauthorized`.
        public var token: String

        /// Credentials as the app's backend minted them, or as stored from an earlier ``PigeonClient/registerDevice(serverURL:userId:deviceName:existingDevice:timeout:trustedCertificates:)``.
        public init(userId: String, deviceId: String, token: String) {
            self.userId = userId
            self.deviceId = deviceId
            self.token = token
        }
    }

    /// Which event stream the client opens.
    public enum StreamTransport: Sendable, Equatable {
        /// A WebSocket, falling back to server-sent events when the upgrade is refused.
        case automatic
        /// A WebSocket only (`GET /v1/ws`): events in, sends and receipts out on the same socket. A refused upgrade
        /// is a failed connection attempt, retried with backoff.
        case webSocket
        /// Server-sent events only (`GET /v1/events`): events in; sends, receipts and typing go out as HTTP requests.
        case serverSentEvents
    }

    /// Everything a ``PigeonClient`` needs. Defaults follow docs/TARGETS.md (10 s ACK timeout, 3 tries,
    /// 30 s catch-up).
    public struct Configuration: Sendable {
        /// The server, e.g. `http://127.0.0.1:8080`.
        public var serverURL: URL
        /// The SQLite file of this device (created if missing; its `-wal` and `-shm` files sit beside it).
        public var databasePath: String
        /// Who this device is; also what the database is checked against when it is opened.
        public var credentials: Credentials
        /// ACK timeout, tries and backoff of the outbox (10 s, 3 tries, 1 s to 60 s by default).
        public var retryPolicy = RetryPolicy()
        /// Which event stream to open (a WebSocket with fallback to server-sent events by default).
        public var streamTransport = StreamTransport.automatic
        /// How long opening the stream may take before the attempt counts as failed.
        public var connectTimeout = Duration.seconds(10)
        /// Timeout of one REST call (history pages, conversations, HTTP sends).
        public var requestTimeout = Duration.seconds(30)
        /// WebSocket ping interval; a pong missing for as long closes the connection (SSE: silence for twice as long).
        public var livenessInterval = Duration.seconds(15)
        /// Reconnection backoff: doubles from `reconnectBaseDelay` to `reconnectMaxDelay`, with jitter.
        public var reconnectBaseDelay = Duration.milliseconds(500)
        /// The longest wait between two connection attempts (see ``reconnectBaseDelay``).
        public var reconnectMaxDelay = Duration.seconds(30)
        /// Period of the catch-up that covers a stream that stalled without closing.
        public var catchUpInterval = Duration.seconds(30)
        /// How long receipts are gathered before they are sent (one per conversation and kind).
        public var receiptDelay = Duration.milliseconds(50)
        /// Messages per history request during gap recovery and catch-up (the server allows up to 500).
        public var fetchPageSize = 500
        /// Largest message body `send` accepts, in UTF-8 bytes (the server's default limit).
        public var maxBodyBytes = 65_536
        /// The most bytes of downloaded attachments kept on the device (200 MiB by default), in
        /// `<databasePath>-attachments/cache/`: past it, the least recently used downloads are removed (and fetched
        /// again when asked for). This device's copies of what it sent (in `…-attachments/sent/`) do not count: they
        /// stay as long as their messages.
        public var attachmentCacheLimit: Int64 = 200 * 1024 * 1024
        /// PEM certificates trusted besides the system's roots for an `https` server: the certificate of a private
        /// authority that signed the server's, or a self-signed one for development. Empty by default: the system's
        /// roots alone. A text that is not a PEM certificate fails the first request (`invalidArgument`).
        public var trustedCertificates: [String] = []
        /// `true`: every local write is flushed to disk (survives a power loss; costs a disk flush per send).
        /// `false` (default): a write survives the app being killed or crashing, without a flush per send.
        public var flushEveryWrite = false
        /// Where the client logs: connection failures and retries at `debug`, local database failures at `error`.
        public var logger = Logger(label: "PigeonKit")
        /// The clock every wait of the network side runs on: ACK timeouts, retry and reconnection backoffs, the
        /// receipt delay, gap-fetch retries, the catch-up period, and the deadlines of ``PigeonClient/sync(timeout:)``
        /// and ``PigeonClient/handlePush(_:deadline:)`` (with the latter's retry backoff). Not public: tests inject a
        /// manual clock to move time instead of sleeping. The transport's own timeouts (connecting, requests,
        /// liveness) stay on real time: they bound real I/O.
        package var clock: any Clock<Duration> = ContinuousClock()
        /// The jitter of every backoff, a value in 0...1 for each draw (random by default). Not public: tests fix it
        /// to make backoffs exact.
        package var jitter: @Sendable () -> Double = { Double.random(in: 0...1) }

        /// A configuration with the defaults above; nothing is opened until ``PigeonClient/init(configuration:)``.
        public init(serverURL: URL, databasePath: String, credentials: Credentials) {
            self.serverURL = serverURL
            self.databasePath = databasePath
            self.credentials = credentials
        }
    }
}
