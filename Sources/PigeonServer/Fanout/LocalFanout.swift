/// The fan-out of a single node: committed events and frames go straight to its stream hub, presence is the hub's.
public final class LocalFanout: Fanout {
    private let sink: any EventSink
    private let hub: StreamHub?

    /// The fan-out of a node's own stream hub.
    public init(hub: StreamHub) {
        self.sink = hub
        self.hub = hub
    }

    /// A fan-out into `sink` alone, with no devices online (tools and tests of a store).
    public init(sink: any EventSink) {
        self.sink = sink
        self.hub = nil
    }

    public func publish(_ committed: [StoredEvent]) {
        sink.publish(committed)
    }

    public func onlineDevices(of users: [String]) -> Set<DeviceIdentity> {
        hub?.onlineDevices(of: users) ?? []
    }

    /// The users whose events this node must deliver, with the hub's registration count (see
    /// ``StreamHub/connectedUsers()``); `nil`: every user's (a sink without a hub).
    func connectedUsers() -> (registrations: UInt64, users: [String])? {
        hub?.connectedUsers()
    }

    public func broadcast(type: String, json: String, to users: [String]) {
        hub?.publishEphemeral(type: type, json: json, to: users, excluding: nil)
    }
}
