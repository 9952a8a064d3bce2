import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Committed events to this node's devices, whichever node committed them: the committing node hands its events to
/// its devices at once when they follow, in their partition, what it handed over already; everything else (other
/// nodes' commits, a gap) is read from the log by the tail, woken by ``NodeNotification/committed(node:partitions:)``
/// (sent after commit, coalesced, outside the writing transaction, naming the partitions written since the last one:
/// the woken tail reads only those) and every second (every partition). The notifications carry no events, so a lost
/// one costs at most the poll.
package final class PostgresEventTail: Sendable {
    private let local: LocalFanout
    private let readEvents: PostgresFanout.EventReader
    private let notifications: PostgresNotifications
    private let nodeId: String
    private let logger: Logger
    /// Where the tail reports how long its reads take (`tail_read`).
    private let stageTimer: ProcessingStageTimer
    /// Per partition, the last offset handed to the local devices (by ``publish(_:)`` or the tail).
    private let handedOver: NIOLockedValueBox<[Int64]>
    private let clock: ElapsedClock
    private let tailWakeUp: AsyncSignal
    /// Set after local commits: the other nodes are to be told (one notification at a time, coalesced).
    private let notifyWakeUp = AsyncSignal()
    /// The partitions this node committed to since its last notification.
    private let committedSinceNotify = NIOLockedValueBox(PartitionMask.none)
    /// The partitions the tail was woken for since its last read (none when only the poll's timeout woke it: every one).
    private let wokenFor = NIOLockedValueBox(PartitionMask.none)

    /// `head`: the newest offset of each partition when the node starts (its devices get what comes after).
    package init(
        local: LocalFanout, head: [Int64], readEvents: @escaping PostgresFanout.EventReader, notifications: PostgresNotifications,
        nodeId: String, stageTimer: ProcessingStageTimer, clock: ElapsedClock, logger: Logger
    ) {
        self.clock = clock
        self.tailWakeUp = AsyncSignal(clock: clock)
        self.local = local
        self.handedOver = NIOLockedValueBox(head)
        self.readEvents = readEvents
        self.notifications = notifications
        self.nodeId = nodeId
        self.stageTimer = stageTimer
        self.logger = logger
    }

    /// Another node committed to `partitions`, or (``PartitionMask/all``) the listener (re)connected: read them.
    package func wake(_ partitions: PartitionMask = .all) {
        wokenFor.withLockedValue { $0.formUnion(partitions) }
        tailWakeUp.notify()
    }

    package func publish(_ committed: [StoredEvent]) {
        guard !committed.isEmpty else { return }
        committedSinceNotify.withLockedValue { $0.formUnion(PartitionMask(partitionsOf: committed.map(\.partition))) }
        notifyWakeUp.notify()
        for events in Self.partitionRuns(committed) where !handOver(events) {
            wake(PartitionMask(partitionsOf: [events.first?.partition ?? 0]))
        }
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

    /// Reads what the local devices have not had yet, in the partitions it was woken for (every one after a second
    /// without a wake-up), and hands it over.
    ///
    /// Only the events of users with a stream on this node are read: each node reads its own devices' share of the
    /// log, not all of it. A stream registered while a read was under way may have read its backlog from the store
    /// before that read's snapshot: the read is done again (three times at most, then for every user) so that no
    /// event falls between the stream's backlog and what the tail hands over.
    package func tail() async {
        let pageSize = 500
        while !Task.isCancelled {
            await tailWakeUp.wait(timeout: .seconds(1))
            if Task.isCancelled { return }
            let woken = wokenFor.withLockedValue { woken in
                defer { woken = .none }
                return woken
            }
            let partitions = (woken.isEmpty ? PartitionMask.all : woken).partitions(below: handedOver.withLockedValue(\.count))
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
                            try await readEvents(after, partitions, connected?.users, pageSize)
                        }
                        guard let connected, local.connectedUsers()?.registrations != connected.registrations else { break }
                    }
                    let runs = Dictionary(grouping: Self.partitionRuns(read.events), by: { $0.first?.partition ?? 0 })
                    for partition in partitions {
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
                try? await clock.sleep(for: .milliseconds(200))
                wake(PartitionMask(partitionsOf: partitions))
            }
        }
    }

    /// One notification (a wake-up naming this node and the partitions written, no events) at a time, for every commit
    /// since the previous one.
    /// Outside the writing transaction: a `NOTIFY` inside it would hold PostgreSQL's database-wide notification lock
    /// through the commit, and every writer of every node would commit one at a time.
    func notifyOtherNodes() async {
        while !Task.isCancelled {
            await notifyWakeUp.wait()
            if Task.isCancelled { return }
            do {
                let partitions = committedSinceNotify.withLockedValue { committed in
                    defer { committed = .none }
                    return committed
                }
                try await notifications.send(.committed(node: nodeId, partitions: partitions))
            } catch {
                if Task.isCancelled { return }
                logger.debug("event notification not sent", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
    }
}
