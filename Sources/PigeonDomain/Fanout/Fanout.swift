/// How what happens on one node reaches the devices connected to every node: committed events, which devices have
/// a stream open, and frames that are never stored (typing).
///
/// Delivery contract:
/// - ``publish(_:)`` takes the events a commit of this node's store wrote, right after that commit, each partition's
///   in offset order. Every node's connected devices get every committed event, whichever node committed it, each
///   partition's in offset order and each once: the store's log is the source, so a fan-out may lose a wake-up or a
///   node, never an event (a node that dies right after its commit delays the others' delivery by at most a poll).
/// - ``onlineDevices(of:)`` answers from memory, without I/O: the devices of this node at once, those of other live
///   nodes as last heard (a stream opened or closed there counts here within milliseconds; a node that stops
///   heart-beating stops counting within seconds). It is the evidence for `recipientsOnline`, not a guarantee.
/// - ``broadcast(type:json:to:)`` is best effort and at most once: a frame reaches the devices of `users` connected to
///   this node and to the other nodes it can reach now; it is never stored, repeated or replayed.
/// - ``deviceRevoked(_:)`` takes a revocation committed by this node's store. This node acts on it before the call
///   returns (its cached tokens of the device are forgotten, its streams of the device end); every other live node
///   within about a second, even when a wake-up is lost (the store's revocations are the source, and are re-read).
///   Acting on a revocation twice is harmless.
public protocol Fanout: EventFanout, Presence {}

/// The events half of the fan-out (centrifuge's broker): committed events, frames never stored, revocations.
public protocol EventFanout: Sendable {
    /// Hands events committed by this node to the devices connected to every node.
    func publish(_ committed: [StoredEvent])
    /// Sends a frame that is never stored to the connected devices of `users` on every node.
    func broadcast(type: String, json: String, to users: [String])
    /// Ends a revoked device's access on every node: cached tokens forgotten, streams of tokens issued before the
    /// revocation ended (WebSocket close code 4001, SSE finished).
    func deviceRevoked(_ revocation: DeviceRevocation)
}

/// The presence half of the fan-out (centrifuge's presence manager): which devices have a stream open on any node.
public protocol Presence: Sendable {
    /// The devices of `users` with a stream open on any live node, as far as this node knows now.
    func onlineDevices(of users: [String]) -> Set<DeviceIdentity>
    /// Tells the other nodes that `device` opened its first stream on this node (`online`) or closed its last one; the
    /// stream hub calls it. A single node's presence is its hub's, and it has nothing to tell.
    func devicePresence(_ device: DeviceIdentity, online: Bool)
}

extension Presence {
    /// The devices of `users` with a stream open anywhere, not counting `excludedDevice` (the sender's own).
    package func onlineDeviceCount(of users: [String], excluding excludedDevice: DeviceIdentity) -> Int {
        onlineDevices(of: users).count { $0 != excludedDevice }
    }
}
