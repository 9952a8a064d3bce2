/// Limits of what one user or client address may make the server create and store. Each is counted on this node
/// (with several nodes, a client spread over N of them gets up to N times as much).
public struct AbuseLimits: Sendable {
    /// Open registrations one client address may make at once (`429` with `Retry-After` past it) …
    public var registrationBurst: Double = 300
    /// … and per second after the burst (0: no limit).
    public var registrationsPerSecond: Double = 5
    /// Registered devices one user may have (`403 forbidden` past it).
    public var maxDevicesPerUser = 10
    /// Conversations one user may create per minute (`429`; 0: no limit).
    public var conversationsPerMinute: Double = 60
    /// Bytes one user may make the server store per minute (`429`; 0: no limit): a message costs its body and type
    /// plus ``storedRowBytes`` per member (its event rows), a conversation its payload plus that per member, a
    /// receipt that per member. The budget refills continuously; a user may run into debt by one request.
    public var storedBytesPerMinute = 64 << 20
    /// The cost this budget counts per row a request writes for each member (an event row and its index entries).
    public var storedRowBytes = 64
    /// Reactions (adds and removes) one device may make at once (`429` with `Retry-After` past it) …
    public var reactionBurst: Double = 50
    /// … and per second after the burst (0: no limit). Each one writes an event for every member.
    public var reactionsPerSecond: Double = 5

    public init() {}

    /// A user's budget of uploads and sends, in devices' worth of the per-device budgets (`--attachment-uploads-per-minute`,
    /// `--rate-limit`): however many devices it registers and revokes, a user gets at most this many devices' share.
    public static let devicesPerUserBudget: Double = 4
}
