import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Which devices have a stream open on any node: each node writes the streams it has open to the `presence` table, one
/// versioned change set per transaction, and announces each change set (``NodeNotification/presence(_:)``, in the
/// writing transaction, so in commit order). Every node mirrors the table in memory: change sets apply in version
/// order, and a gap (a lost notification, a new node) reloads the table. A node that stops heart-beating (every 2 s)
/// stops counting after ``PostgresFanout/nodeTimeoutMillis``; its rows are deleted. The heartbeats are also the node
/// roster of the operator's page.
final class PostgresPresence: Sendable {
    private let client: PostgresClient
    private let local: LocalFanout
    private let notifications: PostgresNotifications
    private let nodeId: String
    private let logger: Logger
    private let pendingPresence = NIOLockedValueBox([DeviceIdentity: Bool]())
    private let clock: ElapsedClock
    private let presenceWakeUp: AsyncSignal
    private let view = NIOLockedValueBox(PresenceView())
    /// When this node last wrote its heartbeat (milliseconds since the epoch).
    private let lastHeartbeatAt = NIOLockedValueBox<Int64?>(nil)
    private let reloadWakeUp = AsyncSignal()

    init(client: PostgresClient, local: LocalFanout, notifications: PostgresNotifications, nodeId: String, clock: ElapsedClock, logger: Logger) {
        self.clock = clock
        self.presenceWakeUp = AsyncSignal(clock: clock)
        self.client = client
        self.local = local
        self.notifications = notifications
        self.nodeId = nodeId
        self.logger = logger
    }

    /// Other nodes' open streams as this node knows them.
    package struct PresenceView {
        package struct Node {
            /// The last change set applied (the node's `presence_version`).
            package var version: Int64
            package var seenAt: Int64
            /// Device ids by user id (a presence question names users).
            package var devices: [String: Set<String>]

            package mutating func insert(_ device: DeviceIdentity) { devices[device.userId, default: []].insert(device.deviceId) }

            package mutating func remove(_ device: DeviceIdentity) {
                devices[device.userId]?.remove(device.deviceId)
                if devices[device.userId]?.isEmpty == true { devices[device.userId] = nil }
            }
        }

        package var nodes: [String: Node] = [:]
    }

    func onlineDevices(of users: [String]) -> Set<DeviceIdentity> {
        var devices = local.onlineDevices(of: users)
        let cutoff = WallClock.nowMillis() - PostgresFanout.nodeTimeoutMillis
        view.withLockedValue { view in
            for node in view.nodes.values where node.seenAt >= cutoff {
                for user in users {
                    for deviceId in node.devices[user] ?? [] { devices.insert(DeviceIdentity(userId: user, deviceId: deviceId)) }
                }
            }
        }
        return devices
    }

    /// Records that `device` got its first stream on this node (`online`) or lost its last one.
    func devicePresence(_ device: DeviceIdentity, online: Bool) {
        pendingPresence.withLockedValue { $0[device] = online }
        presenceWakeUp.notify()
    }

    /// The listener (re)connected: changes may have been missed meanwhile.
    func reload() { reloadWakeUp.notify() }

    /// Applies another node's change set in version order; a gap or an unknown node reloads the table.
    func receive(_ change: PresenceChange) {
        let applied = view.withLockedValue { view -> Bool in
            let known = view.nodes[change.node]
            if let known, change.version <= known.version { return true }
            guard change.reset || known.map({ change.version == $0.version + 1 }) == true else { return false }
            var node = change.reset ? PresenceView.Node(version: 0, seenAt: WallClock.nowMillis(), devices: [:]) : known!
            node.version = change.version
            node.seenAt = max(node.seenAt, WallClock.nowMillis())
            for pair in change.online where pair.count == 2 { node.insert(DeviceIdentity(userId: pair[0], deviceId: pair[1])) }
            for pair in change.offline where pair.count == 2 { node.remove(DeviceIdentity(userId: pair[0], deviceId: pair[1])) }
            view.nodes[change.node] = node
            return true
        }
        if !applied { reloadWakeUp.notify() }
    }

    /// Reloads the other nodes' presence from the table whenever asked (a gap, a reconnection).
    func reloadLoop() async {
        while !Task.isCancelled {
            await reloadWakeUp.wait()
            if Task.isCancelled { return }
            do {
                var nodes: [String: PresenceView.Node] = [:]
                for try await (node, version, seenAt, userId, deviceId) in try await client.query(
                    """
                    SELECT n.node_id, n.presence_version, n.seen_at, p.user_id, p.device_id
                    FROM nodes n LEFT JOIN presence p ON p.node_id = n.node_id WHERE n.node_id <> \(nodeId)
                    """, logger: logger
                ).decode((String, Int64, Int64, String?, String?).self) {
                    var entry = nodes[node] ?? PresenceView.Node(version: version, seenAt: seenAt, devices: [:])
                    if let userId, let deviceId { entry.insert(DeviceIdentity(userId: userId, deviceId: deviceId)) }
                    nodes[node] = entry
                }
                view.withLockedValue { view in
                    for (id, node) in nodes where (view.nodes[id]?.version ?? -1) <= node.version { view.nodes[id] = node }
                    for id in view.nodes.keys where nodes[id] == nil { view.nodes[id] = nil }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("presence reload failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                try? await clock.sleep(for: .milliseconds(500))
                reloadWakeUp.notify()
            }
        }
    }

    /// Heart-beats every 2 s (and forgets nodes that stopped), and writes this node's presence changes as they come.
    func maintain() async {
        var lastHeartbeat: ElapsedClock.Instant?
        // A restarted node (same id) had streams that are gone now.
        var resetPending = true
        while !Task.isCancelled {
            do {
                if resetPending {
                    try await withDeadline(.seconds(10)) { try await self.writePresence([:], reset: true) }
                    resetPending = false
                }
                if lastHeartbeat.map({ clock.now - $0 >= .seconds(2) }) ?? true {
                    try await withDeadline(.seconds(10)) { try await self.heartbeat() }
                    lastHeartbeat = clock.now
                }
                let changes = pendingPresence.withLockedValue { pending in
                    defer { pending = [:] }
                    return pending
                }
                if !changes.isEmpty {
                    do {
                        try await withDeadline(.seconds(10)) { try await self.writePresence(changes, reset: false) }
                    } catch {
                        // Put them back unless a newer change of the same device arrived meanwhile.
                        pendingPresence.withLockedValue { pending in for (device, change) in changes where pending[device] == nil { pending[device] = change } }
                        throw error
                    }
                }
            } catch {
                if Task.isCancelled { break }
                logger.warning("presence update failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                try? await clock.sleep(for: .milliseconds(500))
            }
            await presenceWakeUp.wait(timeout: .seconds(2))
        }
    }

    /// Announces this node, forgets nodes silent for ``PostgresFanout/nodeTimeoutMillis``, and refreshes when the others were last
    /// seen; a node whose change sets this one missed is reloaded.
    private func heartbeat() async throws {
        let now = WallClock.nowMillis()
        let cutoff = now - PostgresFanout.nodeTimeoutMillis
        try await client.query(
            "INSERT INTO nodes(node_id, seen_at) VALUES (\(nodeId), \(now)) ON CONFLICT (node_id) DO UPDATE SET seen_at = excluded.seen_at",
            logger: logger)
        lastHeartbeatAt.withLockedValue { $0 = now }
        try await client.query("DELETE FROM presence WHERE node_id IN (SELECT node_id FROM nodes WHERE seen_at < \(cutoff))", logger: logger)
        try await client.query("DELETE FROM nodes WHERE seen_at < \(cutoff)", logger: logger)
        var seen: [String: (version: Int64, seenAt: Int64)] = [:]
        for try await (node, version, seenAt) in try await client.query(
            "SELECT node_id, presence_version, seen_at FROM nodes WHERE node_id <> \(nodeId)", logger: logger
        ).decode((String, Int64, Int64).self) {
            seen[node] = (version, seenAt)
        }
        let behind = view.withLockedValue { view -> Bool in
            var behind = false
            for id in view.nodes.keys where seen[id] == nil { view.nodes[id] = nil }
            for (id, state) in seen {
                if let node = view.nodes[id], node.version >= state.version {
                    view.nodes[id]?.seenAt = state.seenAt
                } else {
                    behind = true
                }
            }
            return behind
        }
        if behind { reloadWakeUp.notify() }
    }

    /// Writes one or more change sets of this node's presence (each a version of its own, announced in the same
    /// transaction, so that other nodes apply them in commit order).
    private func writePresence(_ changes: [DeviceIdentity: Bool], reset: Bool) async throws {
        var sets: [[(DeviceIdentity, Bool)]] = [[]]
        var bytes = 0
        for change in changes.sorted(by: { ($0.key.userId, $0.key.deviceId) < ($1.key.userId, $1.key.deviceId) }) {
            let size = change.key.userId.utf8.count + change.key.deviceId.utf8.count + 8
            if bytes + size > 6_000 {
                sets.append([])
                bytes = 0
            }
            sets[sets.count - 1].append(change)
            bytes += size
        }
        for (index, set) in sets.enumerated() {
            let isReset = reset && index == 0
            let online = set.filter { $0.1 }.map(\.0)
            let offline = set.filter { !$0.1 }.map(\.0)
            try await client.withTransaction(logger: logger) { connection in
                var version: Int64 = 0
                for try await value in try await connection.query(
                    """
                    INSERT INTO nodes(node_id, seen_at, presence_version) VALUES (\(nodeId), \(WallClock.nowMillis()), 1)
                    ON CONFLICT (node_id) DO UPDATE SET presence_version = nodes.presence_version + 1, seen_at = excluded.seen_at
                    RETURNING presence_version
                    """, logger: logger
                ).decode(Int64.self) {
                    version = value
                }
                if isReset { try await connection.query("DELETE FROM presence WHERE node_id = \(nodeId)", logger: logger) }
                if !online.isEmpty {
                    try await connection.query(
                        """
                        INSERT INTO presence(node_id, device_id, user_id)
                        SELECT \(nodeId), d, u FROM unnest(\(online.map(\.deviceId))::text[], \(online.map(\.userId))::text[]) AS x(d, u)
                        ON CONFLICT DO NOTHING
                        """, logger: logger)
                }
                if !offline.isEmpty {
                    try await connection.query(
                        """
                        DELETE FROM presence p USING unnest(\(offline.map(\.deviceId))::text[], \(offline.map(\.userId))::text[]) AS x(d, u)
                        WHERE p.node_id = \(nodeId) AND p.device_id = x.d AND p.user_id = x.u
                        """, logger: logger)
                }
                let change = PresenceChange(
                    node: nodeId, version: version, reset: isReset, online: online.map { [$0.userId, $0.deviceId] },
                    offline: offline.map { [$0.userId, $0.deviceId] })
                try await notifications.send(.presence(change), in: connection)
            }
        }
    }
}

extension PostgresPresence {
    /// This node's last heartbeat and the other nodes' as last read from the `nodes` table (no I/O).
    func nodeHeartbeats() -> [String: Int64] {
        var nodes = view.withLockedValue { view in view.nodes.mapValues(\.seenAt) }
        if let own = lastHeartbeatAt.withLockedValue({ $0 }) { nodes[nodeId] = own }
        return nodes
    }
}
