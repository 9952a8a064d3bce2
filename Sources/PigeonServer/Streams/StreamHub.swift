import NIOConcurrencyHelpers
import PigeonDomain

/// The connected devices of this node and the event push to them: the local ``EventSink``.
///
/// Sessions are kept by user in 32 shards, so publishing for different users rarely contends.
public final class StreamHub: LocalStreams {
    private static let shardCount = 32
    private let shards: [NIOLockedValueBox<[String: [StreamSession]]>]
    private let nextSessionID = NIOLockedValueBox<UInt64>(0)
    private let openCount = NIOLockedValueBox<[String: Int]>([:])
    /// Counts registrations: a reader of ``connectedUsers()`` can tell whether a stream was added since.
    private let registrations = NIOLockedValueBox<UInt64>(0)
    /// Revocations of the last ``recentRevocationWindow``: a stream whose token was checked just before a revocation
    /// and that registers just after it ends at once.
    private let recentRevocations = NIOLockedValueBox<[DeviceIdentity: (revocation: DeviceRevocation, at: ContinuousClock.Instant)]>([:])
    private static let recentRevocationWindow = Duration.seconds(60)

    public init() {
        self.shards = (0..<Self.shardCount).map { _ in NIOLockedValueBox([:]) }
    }

    private func shard(_ userId: String) -> NIOLockedValueBox<[String: [StreamSession]]> {
        var hasher = Hasher()
        hasher.combine(userId)
        return shards[Int(UInt(bitPattern: hasher.finalize()) % UInt(Self.shardCount))]
    }

    /// A new session of `device`, opened with a token issued at `tokenIssuedAt` (``StreamSession/tokenIssuedAt``);
    /// `limitHit` counts the limits it hits (`PigeonMetrics.limitHit`).
    func makeSession(
        device: DeviceIdentity, tokenIssuedAt: Int64? = nil, transport: String, limits: StreamLimits,
        limitHit: @escaping @Sendable (String) -> Void
    ) -> StreamSession {
        let id = nextSessionID.withLockedValue { id -> UInt64 in
            id += 1
            return id
        }
        return StreamSession(device: device, tokenIssuedAt: tokenIssuedAt, id: id, transport: transport, limits: limits, limitHit: limitHit)
    }

    /// Told when a device gets its first stream on this node (`true`) or loses its last one (`false`).
    private let presenceObserver = NIOLockedValueBox<Callback<(DeviceIdentity, Bool)>?>(nil)

    /// Observes devices coming online and going offline on this node (the presence a multi-node ``Fanout`` shares).
    func observePresence(_ observer: @escaping @Sendable (DeviceIdentity, Bool) -> Void) {
        presenceObserver.withLockedValue { $0 = Callback { observer($0.0, $0.1) } }
    }

    /// Starts delivering the device's events to `session`. Past `maxStreamsPerDevice` open streams of its device
    /// (a userId and deviceId) on this node, the oldest ones end (``StreamSession/EndReason/replaced``): a phone
    /// whose old connections are half-dead gets through with its newest.
    func register(_ session: StreamSession, maxStreamsPerDevice: Int) {
        let (first, replaced) = shard(session.device.userId).withLockedValue { sessions -> (Bool, [StreamSession]) in
            let list = sessions[session.device.userId] ?? []
            let open = list.filter { $0.device == session.device && !$0.isEnding }
            let replaced = Array(open.sorted { $0.id < $1.id }.prefix(max(0, open.count - max(1, maxStreamsPerDevice) + 1)))
            sessions[session.device.userId, default: []].append(session)
            return (!list.contains { $0.device == session.device }, replaced)
        }
        registrations.withLockedValue { $0 &+= 1 }
        openCount.withLockedValue { $0[session.transport, default: 0] += 1 }
        for old in replaced {
            session.limitHit("streams_per_device")
            old.end(.replaced)
        }
        if first { presenceObserver.withLockedValue { $0 }?.call((session.device, true)) }
        if let recent = recentRevocations.withLockedValue({ $0[session.device]?.revocation }), recent.refuses(tokenIssuedAt: session.tokenIssuedAt) {
            session.end(.revoked)
        }
    }

    func unregister(_ session: StreamSession) {
        let (removed, last) = shard(session.device.userId).withLockedValue { sessions -> (Bool, Bool) in
            guard var list = sessions[session.device.userId], let index = list.firstIndex(where: { $0.id == session.id }) else { return (false, false) }
            list.remove(at: index)
            sessions[session.device.userId] = list.isEmpty ? nil : list
            return (true, !list.contains { $0.device == session.device })
        }
        if removed { openCount.withLockedValue { $0[session.transport, default: 1] -= 1 } }
        if last { presenceObserver.withLockedValue { $0 }?.call((session.device, false)) }
    }

    /// The users with a stream open on this node, and the registration count when they were read (compare it with a
    /// later read's to know whether a stream was added in between).
    public func connectedUsers() -> (registrations: UInt64, users: [String]) {
        let count = registrations.withLockedValue { $0 }
        var users: [String] = []
        for shard in shards { users.append(contentsOf: shard.withLockedValue { Array($0.keys) }) }
        return (count, users)
    }

    /// Open streams by transport (`ws`, `sse`).
    public var openStreams: [String: Int] { openCount.withLockedValue { $0 } }

    public func publish(_ events: [StoredEvent]) {
        for event in events {
            let sessions = shard(event.userId).withLockedValue { $0[event.userId] ?? [] }
            for session in sessions where event.isVisible(to: session.device.deviceId) {
                session.deliver(event)
            }
        }
    }

    /// The connected devices of `users` on this node.
    public func onlineDevices(of users: [String]) -> Set<DeviceIdentity> {
        var devices = Set<DeviceIdentity>()
        for user in Set(users) {
            for session in shard(user).withLockedValue({ $0[user] ?? [] }) { devices.insert(session.device) }
        }
        return devices
    }

    /// Sends a frame that is never stored (typing) to the connected devices of `users`, except `excludedDevice`.
    public func publishEphemeral(type: String, json: String, to users: [String], excluding excludedDevice: DeviceIdentity?) {
        for user in users {
            for session in shard(user).withLockedValue({ $0[user] ?? [] }) where session.device != excludedDevice {
                session.send(type: type, json: json)
            }
        }
    }

    /// Ends the streams of a revoked device opened with tokens the revocation refuses
    /// (``StreamSession/EndReason/revoked``); how many.
    @discardableResult
    public func endStreams(revokedBy revocation: DeviceRevocation) -> Int {
        let now = ContinuousClock.now
        recentRevocations.withLockedValue { recent in
            recent = recent.filter { now - $0.value.at < Self.recentRevocationWindow }
            if let known = recent[revocation.device]?.revocation, known.revokedAt >= revocation.revokedAt { return }
            recent[revocation.device] = (revocation, now)
        }
        let ending = shard(revocation.device.userId).withLockedValue { sessions in
            (sessions[revocation.device.userId] ?? []).filter {
                $0.device == revocation.device && revocation.refuses(tokenIssuedAt: $0.tokenIssuedAt)
            }
        }
        for session in ending { session.end(.revoked) }
        return ending.count
    }
}
