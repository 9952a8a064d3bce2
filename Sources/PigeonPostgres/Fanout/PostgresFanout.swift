import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO
import ServiceLifecycle

/// The fan-out of nodes that share one PostgreSQL store, in four parts that share one notification channel
/// (``PostgresNotifications``: one `LISTEN` connection, typed payloads):
///
/// - events (``PostgresEventTail``): commits to this node's devices, at once when the commit is this node's and
///   follows what they had, otherwise read from the store's log by the tail, woken by the committing node and every
///   second;
/// - presence (``PostgresPresence``): a presence table mirrored in every node's memory, with the nodes' heartbeats;
/// - frames (``PostgresFrames``): typing and membership changes, best effort;
/// - revocations (``PostgresRevocations``): acted on by the revoking node at once, by the others when woken or within a
///   second, read from the store.
///
/// The store's tables are the source of every part; a notification only wakes, so a lost one costs at most a poll.
/// The polls, the heartbeat and the pauses after a failed read run on `clock` (the real one unless a test injects
/// another); the `LISTEN` reconnection backoff and the reads' deadlines bound real I/O and stay on real time.
public final class PostgresFanout: Fanout, Service {
    /// Reads the events of `users` (`nil`: every user's) in `partitions` after the given offset of each partition and
    /// up to its head, at most `pageSize` per partition, each partition's in offset order; answers them and each
    /// partition's head as read before them (`after`'s offset for a partition not read).
    package typealias EventReader = @Sendable (_ after: [Int64], _ partitions: [Int], _ users: [String]?, _ pageSize: Int) async throws -> (
        events: [StoredEvent], heads: [Int64]
    )

    /// Reads the revocations numbered after `after`, in order, at most `limit`; answers them and the number of the last
    /// one read (`after` when none).
    package typealias RevocationReader = @Sendable (_ after: Int64, _ limit: Int) async throws -> (revocations: [DeviceRevocation], through: Int64)

    /// A node that has not heart-beaten for this long is gone: its devices no longer count as online.
    package static let nodeTimeoutMillis = PostgresSchema.nodeTimeoutMillis
    /// The longest a node takes to act on another node's revocation when the wake-up is lost (docs/API.md).
    package static let revocationPollInterval = Duration.seconds(1)

    private let nodeId: String
    private let notifications: PostgresNotifications
    private let events: PostgresEventTail
    private let presence: PostgresPresence
    private let frames: PostgresFrames
    private let revocations: PostgresRevocations

    /// `head`: the newest offset of each partition when the node starts (its devices get what comes after);
    /// `revocationHead`: the number of the newest revocation then (its caches are empty: older ones are in the store).
    package init(
        client: PostgresClient, epoch: String, nodeId: String, head: [Int64], revocationHead: Int64, local: LocalFanout, logger: Logger,
        stageTimer: ProcessingStageTimer = .none, clock: any Clock<Duration> = ContinuousClock(), readEvents: @escaping EventReader,
        readRevocations: @escaping RevocationReader
    ) {
        let clock = ElapsedClock(clock)
        let notifications = PostgresNotifications(client: client, epoch: epoch, logger: logger)
        self.nodeId = nodeId
        self.notifications = notifications
        self.events = PostgresEventTail(
            local: local, head: head, readEvents: readEvents, notifications: notifications, nodeId: nodeId, stageTimer: stageTimer, clock: clock,
            logger: logger)
        self.presence = PostgresPresence(client: client, local: local, notifications: notifications, nodeId: nodeId, clock: clock, logger: logger)
        self.frames = PostgresFrames(local: local, notifications: notifications, nodeId: nodeId, logger: logger)
        self.revocations = PostgresRevocations(
            local: local, head: revocationHead, readRevocations: readRevocations, notifications: notifications, nodeId: nodeId, clock: clock,
            logger: logger)
    }

    /// Runs the listener and every part's loops until cancelled (the store's ``run()`` runs it beside its connection
    /// pool).
    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.notifications.listen(as: self.nodeId) { [weak self] notification in self?.receive(notification) } }
            group.addTask { await self.events.tail() }
            group.addTask { await self.events.notifyOtherNodes() }
            group.addTask { await self.frames.send() }
            group.addTask { await self.presence.maintain() }
            group.addTask { await self.presence.reloadLoop() }
            group.addTask { await self.revocations.follow() }
            group.addTask { await self.revocations.announce() }
            await group.waitForAll()
        }
    }

    /// Another node's notification to the part it is for; `nil` (the listener (re)connected, notifications may have
    /// been missed) wakes every part that re-reads the store.
    private func receive(_ notification: NodeNotification?) {
        switch notification {
        case nil:
            events.wake()
            revocations.wake()
            presence.reload()
        case .committed(_, let partitions): events.wake(partitions)
        case .revoked: revocations.wake()
        case .frame(let frame): frames.receive(frame)
        case .membersChanged(_, let conversationId): frames.receiveMembersChange(conversationId)
        case .blocksChanged(_, let userId): frames.receiveBlocksChange(userId)
        case .presence(let change): presence.receive(change)
        }
    }

    // MARK: Fanout

    public func publish(_ committed: [StoredEvent]) { events.publish(committed) }

    public func broadcast(type: String, json: String, to users: [String]) { frames.broadcast(type: type, json: json, to: users) }

    public func deviceRevoked(_ revocation: DeviceRevocation) { revocations.deviceRevoked(revocation) }

    public func onlineDevices(of users: [String]) -> Set<DeviceIdentity> { presence.onlineDevices(of: users) }

    public func devicePresence(_ device: DeviceIdentity, online: Bool) { presence.devicePresence(device, online: online) }

    // MARK: Membership changes

    /// Sets what runs when another node announces a membership change of a conversation.
    package func onMembersChanged(_ handler: @escaping @Sendable (String) -> Void) { frames.onMembersChanged(handler) }

    /// Tells the other nodes that the members of `conversationId` changed (after the change committed).
    package func announceMembersChange(_ conversationId: String) async { await frames.announceMembersChange(conversationId) }

    // MARK: Blocks

    /// Sets what runs when another node announces that a block of a user was made or ended.
    package func onBlocksChanged(_ handler: @escaping @Sendable (String) -> Void) { frames.onBlocksChanged(handler) }

    /// Tells the other nodes that a block of `userId` was made or ended (after it committed).
    package func announceBlocksChange(_ userId: String) async { await frames.announceBlocksChange(userId) }
}

extension PostgresFanout: NodeRoster {
    /// This node's last heartbeat and the other nodes' as last read from the `nodes` table (no I/O).
    package func nodeHeartbeats() async throws -> [String: Int64] { presence.nodeHeartbeats() }
}
