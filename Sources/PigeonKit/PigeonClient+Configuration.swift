import Foundation
import Logging

extension PigeonClient {
    /// A device's identity on the server: what ``PigeonClient/registerDevice(serverURL:userId:deviceName:)``
    /// returns, or what the app's backend minted (a JWT with `sub` = userId and `did` = deviceId).
    public struct Credentials: Sendable, Equatable, Codable {
        public var userId: String
        public var deviceId: String
        public var token: String

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
        case webSocket
        case serverSentEvents
    }

    /// Everything a ``PigeonClient`` needs. Defaults follow DESIGN.md (10 s ACK timeout, 3 tries, 30 s catch-up).
    public struct Configuration: Sendable {
        /// The server, e.g. `http://127.0.0.1:8080`.
        public var serverURL: URL
        /// The SQLite file of this device (created if missing; its `-wal` and `-shm` files sit beside it).
        public var databasePath: String
        public var credentials: Credentials
        public var retryPolicy = RetryPolicy()
        public var streamTransport = StreamTransport.automatic
        /// How long opening the stream may take before the attempt counts as failed.
        public var connectTimeout = Duration.seconds(10)
        /// Timeout of one REST call (history pages, conversations, HTTP sends).
        public var requestTimeout = Duration.seconds(30)
        /// WebSocket ping interval; a pong missing for as long closes the connection (SSE: silence for twice as long).
        public var livenessInterval = Duration.seconds(15)
        /// Reconnection backoff: doubles from `reconnectBaseDelay` to `reconnectMaxDelay`, with jitter.
        public var reconnectBaseDelay = Duration.milliseconds(500)
        public var reconnectMaxDelay = Duration.seconds(30)
        /// Period of the catch-up that covers a stream that stalled without closing.
        public var catchUpInterval = Duration.seconds(30)
        /// How long receipts are gathered before they are sent (one per conversation and kind).
        public var receiptDelay = Duration.milliseconds(50)
        /// Messages per history request during gap recovery and catch-up (the server allows up to 500).
        public var fetchPageSize = 500
        /// Largest message body `send` accepts, in UTF-8 bytes (the server's default limit).
        public var maxBodyBytes = 65_536
        /// `true`: every local write is flushed to disk (survives a power loss; costs a disk flush per send).
        /// `false` (default): a write survives the app being killed or crashing, without a flush per send.
        public var flushEveryWrite = false
        public var logger = Logger(label: "PigeonKit")

        public init(serverURL: URL, databasePath: String, credentials: Credentials) {
            self.serverURL = serverURL
            self.databasePath = databasePath
            self.credentials = credentials
        }
    }
}
