import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PostgresNIO
import ServiceLifecycle

/// The fan-out of nodes that share one PostgreSQL store: `LISTEN/NOTIFY` wake-ups over the store's event log, a
/// presence table mirrored in every node's memory, and ephemeral frames as notifications.
///
/// - Events: the committing node hands its events to its devices at once when they follow, in their partition, what
///   it handed over already; everything else (other nodes' commits, a gap) is read from the log by the tail, woken
///   by `NOTIFY pigeon_events_<epoch>` (sent after commit, coalesced, outside the writing transaction) and every
///   second. The notifications carry no data, so a lost one costs at most the poll.
/// - Presence: each node writes the streams it has open to the `presence` table, one versioned change set per
///   transaction, and announces each change set (`NOTIFY pigeon_presence_<epoch>`). Every node mirrors the table
///   in memory: change sets apply in version order, and a gap (a lost notification, a new node) reloads the table.
///   A node that stops heart-beating (every 2 s) stops counting after 10 s; its rows are deleted.
/// - Ephemeral frames (typing): `NOTIFY pigeon_ephemeral_<epoch>`, best effort.
/// - Revocations: the revoking node acts at once and wakes the others (`NOTIFY pigeon_events_<epoch>`, `r:<node id>`);
///   every node reads the store's revocations after the last one it read, when woken and every
///   ``revocationPollInterval``, so a lost notification delays a revocation on a node by at most that.
public final class PostgresFanout: Fanout, Service {
    /// Reads the events of `users` (`nil`: every user's) after the given offset of each partition and up to its
    /// head, at most `pageSize` per partition, each partition's in offset order; answers them and each partition's
    /// head as read before them.
    package typealias EventReader = @Sendable (_ after: [Int64], _ users: [String]?, _ pageSize: Int) async throws -> (
        events: [StoredEvent], heads: [Int64]
    )

    /// Reads the revocations numbered after `after`, in order, at most `limit`; answers them and the number of the last
    /// one read (`after` when none).
    package typealias RevocationReader = @Sendable (_ after: Int64, _ limit: Int) async throws -> (revocations: [DeviceRevocation], through: Int64)

    /// A node that has not heart-beaten for this long is gone: its devices no longer count as online.
    package static let nodeTimeoutMillis = PostgresSchema.nodeTimeoutMillis
    /// The longest a node takes to act on another node's revocation when the wake-up is lost (docs/API.md).
    package static let revocationPollInterval = Duration.seconds(1)
    /// What begins the payload of a revocation wake-up on the events' channel (the rest is the node id).
    package static let revocationPrefix = "r:"

    private let client: PostgresClient
    private let local: LocalFanout
    private let readEvents: EventReader
    private let nodeId: String
    private let logger: Logger
    /// Where the tail reports how long its reads take (`tail_read`).
    private let stageTimer: ProcessingStageTimer
    private let eventChannel: String
    private let ephemeralChannel: String
    private let presenceChannel: String
    /// What runs when another node announces a membership change (``announceMembersChange(_:)``).
    private let membersChanged = NIOLockedValueBox<Callback<String>?>(nil)
    private let readRevocations: RevocationReader
    /// The number of the last revocation this node read.
    private let revocationsRead: NIOLockedValueBox<Int64>
    private let revocationWakeUp = AsyncSignal()
    /// Set after a local revocation: the other nodes are to be woken.
    private let revocationNotifyWakeUp = AsyncSignal()

    /// Per partition, the last offset handed to the local devices (by ``publish(_:)`` or the tail).
    private let handedOver: NIOLockedValueBox<[Int64]>
    private let tailWakeUp = AsyncSignal()
    /// Set after local commits: the other nodes are to be told (one `NOTIFY` at a time, coalesced).
    private let notifyWakeUp = AsyncSignal()

    private let ephemeralOutbox: AsyncStream<EphemeralFrame>.Continuation
    private let ephemeralQueue: AsyncStream<EphemeralFrame>

    private let pendingPresence = NIOLockedValueBox([DeviceIdentity: Bool]())
    private let presenceWakeUp = AsyncSignal()
    private let view = NIOLockedValueBox(PresenceView())
    /// When this node last wrote its heartbeat (milliseconds since the epoch).
    private let lastHeartbeatAt = NIOLockedValueBox<Int64?>(nil)
    private let reloadWakeUp = AsyncSignal()

    /// `head`: the newest offset of each partition when the node starts (its devices get what comes after);
    /// `revocationHead`: the number of the newest revocation then (its caches are empty: older ones are in the store).
    package init(
        client: PostgresClient, epoch: String, nodeId: String, head: [Int64], revocationHead: Int64, local: LocalFanout, logger: Logger,
        stageTimer: ProcessingStageTimer = .none, readEvents: @escaping EventReader, readRevocations: @escaping RevocationReader
    ) {
        self.client = client
        self.stageTimer = stageTimer
        self.local = local
        self.readEvents = readEvents
        self.nodeId = nodeId
        self.logger = logger
        self.eventChannel = "pigeon_events_\(epoch)"
        self.ephemeralChannel = "pigeon_ephemeral_\(epoch)"
        self.presenceChannel = "pigeon_presence_\(epoch)"
        self.readRevocations = readRevocations
        self.revocationsRead = NIOLockedValueBox(revocationHead)
        self.handedOver = NIOLockedValueBox(head)
        (self.ephemeralQueue, self.ephemeralOutbox) = AsyncStream.makeStream(of: EphemeralFrame.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    /// Runs the listeners, the tail, the notifier and the presence writer until cancelled (the store's ``run()``
    /// runs it beside its connection pool).
    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            // A node's own notifications wake nothing: it handed its commits over already (or woke its tail for a gap),
            // and acted on its revocations. Revocations share the events' channel (a LISTEN holds a pooled
            // connection): their payload is the node id after "r:"; a (re)connection wakes their reader, as revocations
            // may have been missed meanwhile.
            group.addTask {
                await self.listen(on: self.eventChannel) {
                    [tailWakeUp = self.tailWakeUp, revocationWakeUp = self.revocationWakeUp, nodeId = self.nodeId] payload in
                    if let payload, payload.hasPrefix(Self.revocationPrefix) {
                        if payload.dropFirst(Self.revocationPrefix.count) != nodeId { revocationWakeUp.notify() }
                    } else if payload != nodeId {
                        tailWakeUp.notify()
                        if payload == nil { revocationWakeUp.notify() }
                    }
                }
            }
            group.addTask { await self.listen(on: self.ephemeralChannel) { [weak self] payload in self?.receiveEphemeral(payload) } }
            group.addTask { await self.listen(on: self.presenceChannel) { [weak self] payload in self?.receivePresence(payload) } }
            group.addTask { await self.tail() }
            group.addTask { await self.notifyOtherNodes() }
            group.addTask { await self.sendEphemeralFrames() }
            group.addTask { await self.maintainPresence() }
            group.addTask { await self.reloadPresence() }
            group.addTask { await self.followRevocations() }
            group.addTask { await self.announceRevocations() }
            await group.waitForAll()
        }
    }

    // MARK: Events

    public func publish(_ committed: [StoredEvent]) {
        guard !committed.isEmpty else { return }
        notifyWakeUp.notify()
        for events in Self.partitionRuns(committed) where !handOver(events) { tailWakeUp.notify() }
    }

    /// `events` cut into runs of one partition each.
    private static func partitionRuns(_ events: [StoredEvent]) -> [ArraySlice<StoredEvent>] {
        var runs: [ArraySlice<StoredEvent>] = []
        var start = events.startIndex
        while start < events.endIndex {
            var end = start + 1
            while end < events.endIndex, events[end].partition == events[start].partition { end += 1 }
            runs.append(events[start..<end])
            start = end
        }
        return runs
    }

    /// Hands what the tail read of one partition to the local devices: the events after what they had, then
    /// everything up to `through` counts as handed over (the events of users with no stream here were not read).
    private func handOver(_ events: ArraySlice<StoredEvent>, partition: Int, through: Int64) {
        handedOver.withLockedValue { handed in
            guard partition < handed.count, through > handed[partition] else { return }
            let fresh = events.drop { $0.id <= handed[partition] }
            if !fresh.isEmpty { local.publish(Array(fresh)) }
            handed[partition] = through
        }
    }

    /// Hands one partition's events (consecutive offsets, ascending) to the local devices unless they had them;
    /// whether they followed what was handed over (false: a gap before them, nothing handed over).
    private func handOver(_ events: ArraySlice<StoredEvent>) -> Bool {
        guard let partition = events.first?.partition else { return true }
        return handedOver.withLockedValue { handed in
            guard partition < handed.count else { return true }
            let fresh = events.drop { $0.id <= handed[partition] }
            guard let first = fresh.first, let last = fresh.last else { return true }
            guard first.id == handed[partition] + 1 else { return false }
            handed[partition] = last.id
            // Under the lock, so that the committing path and the tail hand a partition's events over in order.
            local.publish(Array(fresh))
            return true
        }
    }

    /// Reads what the local devices have not had yet, in every partition, and hands it over.
    ///
    /// Only the events of users with a stream on this node are read: each node reads its own devices' share of the
    /// log, not all of it. A stream registered while a read was under way may have read its backlog from the store
    /// before that read's snapshot: the read is done again (three times at most, then for every user) so that no
    /// event falls between the stream's backlog and what the tail hands over.
    private func tail() async {
        let pageSize = 500
        while !Task.isCancelled {
            await tailWakeUp.wait(timeout: .seconds(1))
            if Task.isCancelled { return }
            do {
                var full = true
                while full {
                    full = false
                    let after = handedOver.withLockedValue { $0 }
                    var read: (events: [StoredEvent], heads: [Int64]) = ([], after)
                    let reading = ContinuousClock.now
                    defer { stageTimer.record(.tailRead, ContinuousClock.now - reading) }
                    for attempt in 0..<4 {
                        let connected = attempt < 3 ? local.connectedUsers() : nil
                        // Bounded: a read on a connection that died under it may never return (see ``withDeadline``).
                        read = try await withDeadline(.seconds(10)) { [readEvents] in
                            try await readEvents(after, connected?.users, pageSize)
                        }
                        guard let connected, local.connectedUsers()?.registrations != connected.registrations else { break }
                    }
                    let runs = Dictionary(grouping: Self.partitionRuns(read.events), by: { $0.first?.partition ?? 0 })
                    for partition in read.heads.indices {
                        let run = runs[partition]?.first ?? []
                        // A full page covers the partition up to its last event only.
                        let through = run.count == pageSize ? run.last!.id : read.heads[partition]
                        if run.count == pageSize { full = true }
                        handOver(run, partition: partition, through: through)
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("event tail failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                try? await Task.sleep(for: .milliseconds(200))
                tailWakeUp.notify()
            }
        }
    }

    /// One `NOTIFY` (a wake-up naming this node, no data) at a time, for every commit since the previous one. Outside the writing
    /// transaction: a `NOTIFY` inside it would hold PostgreSQL's database-wide notification lock through the commit,
    /// and every writer of every node would commit one at a time.
    private func notifyOtherNodes() async {
        while !Task.isCancelled {
            await notifyWakeUp.wait()
            if Task.isCancelled { return }
            do {
                _ = try await withDeadline(.seconds(10)) { [client, logger, eventChannel, nodeId] in
                    try await client.query("SELECT pg_notify(\(eventChannel), \(nodeId))", logger: logger)
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("event notification not sent", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    /// Listens on `channel` with reconnection; `handle` gets each payload, and `nil` after every (re)connection.
    private func listen(on channel: String, handle: @escaping @Sendable (String?) -> Void) async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        handle(nil)
                        delay = .milliseconds(100)
                        for try await notification in notifications {
                            handle(notification.payload)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("LISTEN connection lost; reconnecting", metadata: ["channel": "\(channel)", "error": "\(String(reflecting: error))"])
            }
            try? await Task.sleep(for: delay)
            delay = min(.seconds(2), delay * 2)
        }
    }

    // MARK: Membership changes

    /// The ephemeral frame type that carries a membership change between nodes (never sent to a device).
    package static let membersChangedFrame = "pigeon.members.changed"

    /// Sets what runs when another node announces a membership change of a conversation.
    package func onMembersChanged(_ handler: @escaping @Sendable (String) -> Void) {
        membersChanged.withLockedValue { $0 = Callback(handler) }
    }

    /// Tells the other nodes that the members of `conversationId` changed (after the change committed), on the
    /// ephemeral channel every node listens to already. Best effort: a lost notification leaves another node's cached
    /// list until its next processing batch of that conversation, which re-reads the members under the conversation's
    /// lock (the change moved its last seq).
    package func announceMembersChange(_ conversationId: String) async {
        let frame = EphemeralFrame(type: Self.membersChangedFrame, json: conversationId, users: [], node: nodeId)
        do {
            let payload = String(decoding: try JSONEncoder().encode(frame), as: UTF8.self)
            try await client.query("SELECT pg_notify(\(ephemeralChannel), \(payload))", logger: logger)
        } catch {
            logger.warning("membership change not announced", metadata: ["conversation": "\(conversationId)", "error": "\(String(reflecting: error))"])
        }
    }

    // MARK: Revocations

    public func deviceRevoked(_ revocation: DeviceRevocation) {
        local.deviceRevoked(revocation)
        revocationNotifyWakeUp.notify()
    }

    /// Reads the revocations after the last one read, when woken and every ``revocationPollInterval``, and acts on
    /// each on this node (its own ones again: harmless).
    private func followRevocations() async {
        while !Task.isCancelled {
            await revocationWakeUp.wait(timeout: Self.revocationPollInterval)
            if Task.isCancelled { return }
            do {
                var full = true
                while full {
                    let after = revocationsRead.withLockedValue { $0 }
                    let read = try await withDeadline(.seconds(10)) { [readRevocations] in try await readRevocations(after, 500) }
                    for revocation in read.revocations { local.deviceRevoked(revocation) }
                    revocationsRead.withLockedValue { $0 = max($0, read.through) }
                    full = read.revocations.count == 500
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning("reading revocations failed; retrying", metadata: ["error": "\(String(reflecting: error))"])
                try? await Task.sleep(for: .milliseconds(200))
                revocationWakeUp.notify()
            }
        }
    }

    /// Wakes the other nodes after local revocations (one `NOTIFY` naming this node, coalesced).
    private func announceRevocations() async {
        while !Task.isCancelled {
            await revocationNotifyWakeUp.wait()
            if Task.isCancelled { return }
            do {
                let payload = Self.revocationPrefix + nodeId
                _ = try await withDeadline(.seconds(10)) { [client, logger, eventChannel] in
                    try await client.query("SELECT pg_notify(\(eventChannel), \(payload))", logger: logger)
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("revocation notification not sent", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }

    // MARK: Ephemeral frames

    /// A frame that is pushed and never stored (typing), as relayed between nodes.
    package struct EphemeralFrame: Sendable, Codable, Equatable {
        package var type: String
        package var json: String
        package var users: [String]
        /// The node that sent it.
        package var node: String

        package enum CodingKeys: String, CodingKey {
            case type = "t", json = "j", users = "u", node = "n"
        }
    }

    public func broadcast(type: String, json: String, to users: [String]) {
        local.broadcast(type: type, json: json, to: users)
        ephemeralOutbox.yield(EphemeralFrame(type: type, json: json, users: users, node: nodeId))
    }

    private func sendEphemeralFrames() async {
        let encoder = JSONEncoder()
        for await frame in ephemeralQueue {
            // NOTIFY payloads must stay under 8,000 bytes: large member lists go in several frames.
            let budget = 7_000 - frame.json.utf8.count - frame.type.utf8.count - 64
            let perUser = (frame.users.map(\.utf8.count).max() ?? 0) + 3
            let chunkSize = max(1, budget / perUser)
            for start in stride(from: 0, to: frame.users.count, by: chunkSize) {
                var chunk = frame
                chunk.users = Array(frame.users[start..<min(frame.users.count, start + chunkSize)])
                guard let data = try? encoder.encode(chunk), data.count < 8_000 else { continue }
                do {
                    try await client.query("SELECT pg_notify(\(ephemeralChannel), \(String(decoding: data, as: UTF8.self)))", logger: logger)
                } catch {
                    if Task.isCancelled { return }
                    logger.debug("ephemeral frame not relayed", metadata: ["error": "\(String(reflecting: error))"])
                }
            }
        }
    }

    private func receiveEphemeral(_ payload: String?) {
        guard let payload, let frame = try? JSONDecoder().decode(EphemeralFrame.self, from: Data(payload.utf8)), frame.node != nodeId
        else { return }
        if frame.type == Self.membersChangedFrame {
            membersChanged.withLockedValue { $0 }?.call(frame.json)
            return
        }
        local.broadcast(type: frame.type, json: frame.json, to: frame.users)
    }

    // MARK: Presence

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

    /// One change set of a node's presence, as announced.
    package struct PresenceChange: Codable {
        package var node: String
        package var version: Int64
        /// The node forgot every earlier stream (it restarted).
        package var reset: Bool
        package var online: [[String]]
        package var offline: [[String]]

        package enum CodingKeys: String, CodingKey {
            case node = "n", version = "v", reset = "r", online = "on", offline = "off"
        }
    }

    public func onlineDevices(of users: [String]) -> Set<DeviceIdentity> {
        var devices = local.onlineDevices(of: users)
        let cutoff = WallClock.nowMillis() - Self.nodeTimeoutMillis
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
    public func devicePresence(_ device: DeviceIdentity, online: Bool) {
        pendingPresence.withLockedValue { $0[device] = online }
        presenceWakeUp.notify()
    }

    /// Applies another node's change set in version order; a gap or an unknown node reloads the table.
    private func receivePresence(_ payload: String?) {
        guard let payload else {
            // (Re)connected: changes may have been missed meanwhile.
            reloadWakeUp.notify()
            return
        }
        guard let change = try? JSONDecoder().decode(PresenceChange.self, from: Data(payload.utf8)), change.node != nodeId else { return }
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
    private func reloadPresence() async {
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
                try? await Task.sleep(for: .milliseconds(500))
                reloadWakeUp.notify()
            }
        }
    }

    /// Heart-beats every 2 s (and forgets nodes that stopped), and writes this node's presence changes as they come.
    private func maintainPresence() async {
        var lastHeartbeat = ContinuousClock.now - .seconds(60)
        // A restarted node (same id) had streams that are gone now.
        var resetPending = true
        while !Task.isCancelled {
            do {
                if resetPending {
                    try await withDeadline(.seconds(10)) { try await self.writePresence([:], reset: true) }
                    resetPending = false
                }
                if ContinuousClock.now - lastHeartbeat >= .seconds(2) {
                    try await withDeadline(.seconds(10)) { try await self.heartbeat() }
                    lastHeartbeat = .now
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
                try? await Task.sleep(for: .milliseconds(500))
            }
            await presenceWakeUp.wait(timeout: .seconds(2))
        }
    }

    /// Announces this node, forgets nodes silent for ``nodeTimeoutMillis``, and refreshes when the others were last
    /// seen; a node whose change sets this one missed is reloaded.
    private func heartbeat() async throws {
        let now = WallClock.nowMillis()
        let cutoff = now - Self.nodeTimeoutMillis
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
                let payload = String(decoding: try JSONEncoder().encode(change), as: UTF8.self)
                try await connection.query("SELECT pg_notify(\(presenceChannel), \(payload))", logger: logger)
            }
        }
    }
}

extension PostgresFanout: NodeRoster {
    /// This node's last heartbeat and the other nodes' as last read from the `nodes` table (no I/O).
    package func nodeHeartbeats() async throws -> [String: Int64] {
        var nodes = view.withLockedValue { view in view.nodes.mapValues(\.seenAt) }
        if let own = lastHeartbeatAt.withLockedValue({ $0 }) { nodes[nodeId] = own }
        return nodes
    }
}
