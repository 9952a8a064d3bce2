import Logging
import PigeonDomain
import PigeonProtocol

/// Everything a Pigeon server can be told. Defaults are the embedded development setup.
public struct ServerConfiguration: Sendable {
    /// Which store to run.
    public enum StoreBackend: Sendable, Equatable {
        /// SQLite under the data directory.
        case embedded
        /// PostgreSQL at this URL (`postgres://user@host:port/db`).
        case postgres(String)
    }

    /// Which ingest buffer to run.
    public enum BufferBackend: Sendable, Equatable {
        /// A SQLite log under the data directory.
        case embedded
        /// Redis Streams at this URL (`redis://host:port/db`).
        case redis(String)
    }

    public var host = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var port = 8080
    public var dataDirectory = "./pigeon-data"
    public var store = StoreBackend.embedded
    public var buffer = BufferBackend.embedded
    /// This node's name among the nodes sharing Redis and PostgreSQL (its Redis consumer and lease holder, its
    /// presence rows). With the Redis buffer the node claims it in Redis for as long as it runs, and refuses to start
    /// when another live process holds it (``PigeonCore/open(configuration:logger:)``). `nil`: with a shared backend a
    /// fresh random id at every start (a data directory is no identity: several nodes may be started from one);
    /// with the embedded store and buffer, the one kept in `<dataDirectory>/node-id`, created at the first start.
    public var nodeId: String?
    /// fsync every commit (a ✓ survives power loss). Off: survives a crash of the process only.
    public var durable = true
    /// With the embedded store and buffer: keep accepted messages in a separate SQLite buffer (`buffer.sqlite`) and
    /// store them in batches, two durable writes per message (accept → buffer → store, as production runs). Off (the default): a send is
    /// written straight into the store, one durable write (``DirectAcceptPath``).
    public var separateEmbeddedBuffer = false
    public var logLevel = Logger.Level.info
    /// Encryption at rest (`--encryption-key-file`): the key ring the store seals bodies, payloads, push data and
    /// attachment bytes with (SECURITY.md, "Encryption at rest"). ``AtRestCipher/off``: stored as they are.
    public var atRest = AtRestCipher.off

    /// Largest request body or WebSocket message, in bytes.
    public var maxBodyBytes = 65_536
    /// Attachments (API.md 1.2): upload size, per-user quota, and how often the sweep removes what no message carries.
    public var attachments = AttachmentConfiguration()
    public var maxMembers = 1_000
    /// Open device registration (`POST /v1/devices` without credentials); `nil`: on only for the embedded
    /// store and buffer bound to a loopback address without a JWT key (see ``isOpenRegistrationEnabled``).
    public var openRegistration: Bool?
    /// Bearer token of the admin routes (dead letters, stats, conversations); also turns on the operator's page
    /// (`GET /admin`). `nil`: neither exists.
    public var adminToken: String?
    /// Push notifications through a Matrix push gateway (off without a gateway URL).
    public var push = PushConfiguration()
    /// The app's backend (API.md 1.2): webhooks, the before-send hook, the server API's credential, consent.
    public var appBackend = AppBackendConfiguration()
    /// Bearer token `/metrics` asks for; `nil`: `/metrics` is open (bind it to a private interface, or set this).
    public var metricsToken: String?
    /// Origins of the web pages that may call the `/v1` API from a browser (CORS): `https://app.example.com`, or `*`
    /// for any (``CORSPolicy``). When set, a WebSocket request from a page of another origin is refused. Empty (the
    /// default): no CORS header is ever sent, and every origin may open the WebSocket.
    public var corsOrigins: [String] = []
    /// Serve the web demo page at `GET /` (``WebDemoPage``: alice and bob side by side, over the WebSocket and SSE,
    /// with their ticks live). Off by default: then `/` is not a route (`404`).
    public var webDemo = false
    /// Reverse proxies in front of the server: from these peers (and only these) the client address of the
    /// per-address limits is read from `X-Forwarded-For` (``ClientAddress``).
    public var trustedProxies: [AddressBlock] = []
    /// Device tokens: opaque registration tokens and the app backend's JWTs (keys, claims, lifetimes).
    public var auth = AuthConfiguration()
    /// What one client address may open and how long a request head may take (slowloris, descriptors).
    public var connectionLimits = ConnectionLimits()
    /// What one device or stream may make the server hold (streams per device, outbound bytes, typing).
    public var streamLimits = StreamLimits()
    /// What one user may make the server store, and how fast (registrations, devices, conversations, bytes).
    public var abuseLimits = AbuseLimits()
    /// Sends per second per device; 0 turns the limit off.
    public var rateLimitPerDevice: Double = 0
    public var rateLimitBurst: Double = 100
    /// Accepted-but-unprocessed messages beyond which sends answer `overloaded`.
    public var maxBufferedMessages = 100_000

    /// Largest batch the processor stores in one transaction.
    public var batchSize = 1_000
    /// How many batches the processor stores at once, each of another buffer partition (a conversation's messages
    /// are always in one partition, so they keep their order). The embedded buffer has one partition: one at a time.
    public var processingConcurrency = 8
    /// Processing attempts before a message is dead-lettered.
    public var maxAttempts = 3
    /// Delay before the first retry of a failed message; doubles per attempt.
    public var retryBaseDelay = Duration.milliseconds(100)
    /// Longest delay between retries of a store that is down.
    public var maxRetryDelay = Duration.seconds(5)
    /// How long the processor waits for the store to answer a batch before it gives up on that attempt and tries
    /// the batch again (a database connection that died mid-transaction may never answer).
    public var storeTimeout = Duration.seconds(10)
    /// How long graceful shutdown keeps processing what is buffered.
    public var shutdownDrainTimeout = Duration.seconds(10)

    /// How long events are kept for cursor resumption.
    public var eventRetention = Duration.seconds(7 * 24 * 3600)
    /// How often old events are pruned.
    public var pruneInterval = Duration.seconds(3600)
    /// SSE keep-alive comment interval.
    public var keepAliveInterval = Duration.seconds(15)
    /// A typing indicator not refreshed for this long is turned off.
    public var typingTimeout = Duration.seconds(10)
    /// The shortest time between two writes of one device's `lastSeenAt` (``DeviceActivity``).
    public var deviceLastSeenInterval = Duration.seconds(60)
    /// The clock the server's waits and deadlines run on: the processor's backoffs and held-up batches, the push
    /// dispatcher's loops, typing expiry, the pruning interval and the coalescing of `lastSeenAt` writes. Tests
    /// inject a manual clock; what bounds real I/O (socket and request timeouts, the store timeout race, stream
    /// write timeouts, the Redis buffer's heartbeats and leases, which Redis expires in real time) and the wall
    /// clock written to the store stay on real time.
    public var clock: any Clock<Duration> = ContinuousClock()

    /// Test hook: called for each message inside the processing transaction; throwing fails that message.
    public var processingFaultInjector: ProcessingFaultInjector?

    public init() {}

    /// A node id: 1–64 characters of `[A-Za-z0-9._-]`.
    /// Both the store and the buffer are the embedded SQLite files: one process, its data directory its own.
    public var isEmbedded: Bool { store == .embedded && buffer == .embedded }

    public static func isValidNodeId(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count) && id.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }

    /// Whether `POST /v1/devices` registers devices without credentials: as configured, else only for a
    /// development setup (embedded store and buffer, a loopback address, no JWT keys). A production store never
    /// defaults to open.
    public var isOpenRegistrationEnabled: Bool {
        if let openRegistration { return openRegistration }
        return store == .embedded && buffer == .embedded && !auth.hasJWTKeys && Self.isLoopback(host)
    }

    /// Whether `host` names only this machine (`127.0.0.0/8`, `::1`, `localhost`).
    public static func isLoopback(_ host: String) -> Bool {
        let host = host.lowercased()
        return host == "localhost" || host == "::1" || host == "[::1]" || host.hasPrefix("127.")
    }
}

/// Limits and upkeep of attachments (API.md 1.2).
public struct AttachmentConfiguration: Sendable {
    /// Largest upload, in bytes (`413` as soon as a body passes it).
    public var maxBytes: Int64 = AttachmentLimits.defaultMaxBytes
    /// Bytes one user's uploads may take in storage (`403` past it).
    public var quotaBytes: Int64 = AttachmentLimits.defaultQuotaBytes
    /// Uploads one device may start per minute (`429`; 0: no limit).
    public var uploadsPerMinute: Double = Double(AttachmentLimits.defaultUploadsPerMinute)
    /// How often the sweep runs: unreferenced uploads older than 24 hours, and the uploads of messages deleted for
    /// everyone, are erased at the next sweep.
    public var sweepInterval: Duration = .seconds(60)

    public init() {}
}
