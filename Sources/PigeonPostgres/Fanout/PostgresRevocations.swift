import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Revocations on every node: the revoking node acts at once and wakes the others
/// (``NodeNotification/revoked(node:)``); every node reads the store's revocations after the last one it read, when
/// woken and every ``PostgresFanout/revocationPollInterval``, so a lost notification delays a revocation on a node by
/// at most that.
final class PostgresRevocations: Sendable {
    private let local: LocalFanout
    private let readRevocations: PostgresFanout.RevocationReader
    private let notifications: PostgresNotifications
    private let nodeId: String
    private let logger: Logger
    /// The number of the last revocation this node read.
    private let revocationsRead: NIOLockedValueBox<Int64>
    private let clock: ElapsedClock
    private let wakeUp: AsyncSignal
    /// Set after a local revocation: the other nodes are to be woken.
    private let notifyWakeUp = AsyncSignal()

    /// `head`: the number of the newest revocation when the node starts (its caches are empty: older ones are in the
    /// store).
    init(
        local: LocalFanout, head: Int64, readRevocations: @escaping PostgresFanout.RevocationReader, notifications: PostgresNotifications,
        nodeId: String, clock: ElapsedClock, logger: Logger
    ) {
        self.clock = clock
        self.wakeUp = AsyncSignal(clock: clock)
        self.local = local
        self.revocationsRead = NIOLockedValueBox(head)
        self.readRevocations = readRevocations
        self.notifications = notifications
        self.nodeId = nodeId
        self.logger = logger
    }

    /// Another node revoked, or the listener (re)connected: read the revocations.
    func wake() { wakeUp.notify() }

    func deviceRevoked(_ revocation: DeviceRevocation) {
        local.deviceRevoked(revocation)
        notifyWakeUp.notify()
    }

    /// Reads the revocations after the last one read, when woken and every poll interval, and acts on each on this
    /// node (its own ones again: harmless).
    func follow() async {
        while !Task.isCancelled {
            await wakeUp.wait(timeout: PostgresFanout.revocationPollInterval)
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
                try? await clock.sleep(for: .milliseconds(200))
                wakeUp.notify()
            }
        }
    }

    /// Wakes the other nodes after local revocations (one notification naming this node, coalesced).
    func announce() async {
        while !Task.isCancelled {
            await notifyWakeUp.wait()
            if Task.isCancelled { return }
            do {
                try await notifications.send(.revoked(node: nodeId))
            } catch {
                if Task.isCancelled { return }
                logger.debug("revocation notification not sent", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }
}
