/// An event persisted in a user's event log, ready to push.
///
/// `payload` is the event's JSON object without its cursor; ``frame(cursor:)`` adds it.
public struct StoredEvent: Sendable, Equatable {
    /// The event's offset in its partition: 1, 2, 3 … in commit order, no gap.
    public var id: Int64
    /// The partition of the log it is in: its conversation's (``EventPartitioning``).
    public var partition: Int
    public var type: String
    /// The user whose devices receive it.
    public var userId: String
    /// Only this device receives it (`message.stored`, `message.failed`).
    public var deviceId: String?
    /// Every device of the user but this one receives it (the sender's own `message.new`).
    public var excludedDeviceId: String?
    public var payload: String

    public init(id: Int64, partition: Int = 0, type: String, userId: String, deviceId: String?, excludedDeviceId: String?, payload: String) {
        self.id = id
        self.partition = partition
        self.type = type
        self.userId = userId
        self.deviceId = deviceId
        self.excludedDeviceId = excludedDeviceId
        self.payload = payload
    }

    /// Whether `device` of ``userId`` receives this event.
    public func isVisible(to device: String) -> Bool {
        if let deviceId, deviceId != device { return false }
        if let excludedDeviceId, excludedDeviceId == device { return false }
        return true
    }

    /// The event as sent on the wire: the payload with `"cursor"` added.
    public func frame(cursor: String) -> String {
        "{\"cursor\":\"\(cursor)\"," + payload.dropFirst()
    }
}

/// Where committed events reach this node's connected devices: the stream hub. A ``Fanout`` feeds it.
public protocol EventSink: Sendable {
    /// Called with committed events, each partition's in offset order and each event once; a partition's events
    /// come in commit order (calls for different partitions may interleave).
    func publish(_ events: [StoredEvent])
}
