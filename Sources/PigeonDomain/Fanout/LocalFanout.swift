import NIOConcurrencyHelpers

/// The streams open on this node, as the fan-out reaches them: the stream hub (`PigeonServer`'s `StreamHub`).
public protocol LocalStreams: EventSink {
    /// The devices of `users` with a stream open on this node.
    func onlineDevices(of users: [String]) -> Set<DeviceIdentity>
    /// The users with a stream open on this node, and how many registrations the hub has seen (it changes whenever
    /// the set may have).
    func connectedUsers() -> (registrations: UInt64, users: [String])
    /// Sends a frame that is never stored to the streams of `users` on this node, but `excludedDevice`'s.
    func publishEphemeral(type: String, json: String, to users: [String], excluding excludedDevice: DeviceIdentity?)
    /// Ends this node's streams of the revoked device opened with tokens the revocation refuses; how many.
    @discardableResult
    func endStreams(revokedBy revocation: DeviceRevocation) -> Int
}

/// The fan-out of a single node: committed events and frames go straight to its stream hub, presence is the hub's.
public final class LocalFanout: Fanout {
    private let sink: any EventSink
    private let hub: (any LocalStreams)?
    /// Told of every revocation this node acts on, before the hub ends the device's streams (the authenticator's caches).
    private let revocationObservers = NIOLockedValueBox<[@Sendable (DeviceRevocation) -> Void]>([])

    /// The fan-out of a node's own stream hub.
    public init(hub: any LocalStreams) {
        self.sink = hub
        self.hub = hub
    }

    /// A fan-out into `sink` alone, with no devices online (tools and tests of a store).
    public init(sink: any EventSink) {
        self.sink = sink
        self.hub = nil
    }

    /// Told after each publication, once the hub has the events (the push dispatcher collects then, the webhook
    /// dispatcher looks for events).
    private let publicationObserver = NIOLockedValueBox<Callback<Void>?>(nil)

    public func publish(_ committed: [StoredEvent]) {
        sink.publish(committed)
        publicationObserver.withLockedValue { $0 }?.call(())
    }

    /// Calls `observer` after every publication of committed events on this node (its own commits, and the other
    /// nodes' as its tail reads them), after the observers added before it.
    package func observePublications(_ observer: @escaping @Sendable () -> Void) {
        publicationObserver.withLockedValue { slot in
            let earlier = slot
            slot = Callback { _ in
                earlier?.call(())
                observer()
            }
        }
    }

    public func onlineDevices(of users: [String]) -> Set<DeviceIdentity> {
        hub?.onlineDevices(of: users) ?? []
    }

    /// The users whose events this node must deliver, with the hub's registration count (see
    /// ``LocalStreams/connectedUsers()``); `nil`: every user's (a sink without a hub).
    package func connectedUsers() -> (registrations: UInt64, users: [String])? {
        hub?.connectedUsers()
    }

    /// Nothing to tell: this node's presence is its hub's.
    public func devicePresence(_ device: DeviceIdentity, online: Bool) {}

    public func broadcast(type: String, json: String, to users: [String]) {
        hub?.publishEphemeral(type: type, json: json, to: users, excluding: nil)
    }

    /// Calls `observer` with every revocation this node acts on (its own, and the other nodes' as they arrive), before
    /// the device's streams end.
    package func observeRevocations(_ observer: @escaping @Sendable (DeviceRevocation) -> Void) {
        revocationObservers.withLockedValue { $0.append(observer) }
    }

    /// Acts on a revocation on this node: the observers first (so a reconnect is refused), then the device's streams
    /// of tokens issued before it end.
    public func deviceRevoked(_ revocation: DeviceRevocation) {
        for observer in revocationObservers.withLockedValue({ $0 }) { observer(revocation) }
        hub?.endStreams(revokedBy: revocation)
    }
}
