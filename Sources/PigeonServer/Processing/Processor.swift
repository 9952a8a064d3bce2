import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Moves buffered messages into the store: in batches, one transaction per batch, several partitions at once.
///
/// - Event-driven: an append wakes it; an idle server stores a message about a millisecond after accepting it.
/// - The partitions of the buffer are stored concurrently (up to `processingConcurrency` batches in flight), each in
///   one batch at a time and in buffer order, so every conversation's messages are stored in order (a conversation is
///   in one partition) and a batch held up in the store holds up only its partitions. Reading from the buffer goes on
///   while batches are stored.
/// - A message that fails is retried with exponential backoff; later messages of its conversation wait behind it
///   (order), other conversations flow on. The `maxAttempts`-th failure, or a permanent one (the conversation is
///   gone), dead-letters it and sends `message.failed` to its sender.
/// - A store that fails as a whole (down, disk full, no answer within `storeTimeout`) is retried with backoff, one
///   batch at a time until it answers, without spending attempts.
/// - Buffer entries are acknowledged only after the store committed, in the background; what several batches
///   finished meanwhile goes in one acknowledgement. A crash in between hands them out again and the store recognises
///   them by serverId.
/// - On graceful shutdown it keeps going until the buffer is empty (bounded by `shutdownDrainTimeout`); when
///   cancelled it stops at once (the buffer keeps the rest; a store call in flight is abandoned, see
///   ``withDeadline(_:_:)``).
///
/// The decisions are ``ProcessingSchedule``'s; this type performs them. Its waits (retry backoffs, the store's
/// backoff, a partial batch held for company) are on `clock` (`ContinuousClock` in the server, a manual clock in tests).
final class Processor: Service {
    typealias Schedule = ProcessingSchedule

    /// What a child task of the processing loop reports.
    private enum Event: Sendable {
        case read([BufferEntry])
        case stored(Schedule.Batch, Result<[ProcessingResult], any Error>, duration: Duration)
        case timer(ElapsedClock.Instant)
        case gracefulShutdown
    }

    private let buffer: any IngestBuffer
    private let store: any MessageProcessing
    private let metrics: PigeonMetrics
    private let configuration: ServerConfiguration
    private let logger: Logger
    private let clock: ElapsedClock

    init(
        buffer: any IngestBuffer, store: any MessageProcessing, metrics: PigeonMetrics, configuration: ServerConfiguration, logger: Logger,
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.clock = ElapsedClock(clock)
        self.buffer = buffer
        self.store = store
        self.metrics = metrics
        self.configuration = configuration
        self.logger = logger
    }

    func run() async throws {
        let acknowledgements = AcknowledgementQueue()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while let entryIds = await acknowledgements.next() { try await self.acknowledge(entryIds) }
            }
            defer { acknowledgements.finish() }
            try await process(acknowledgements: acknowledgements, drainWithin: nil)
            acknowledgements.finish()
            try await group.waitForAll()
        }
    }

    /// Stores what the buffer holds and returns once it is empty (`true`) or `timeout` passed first (`false`, the rest
    /// stays buffered): a one-shot drain, for a buffer that nothing appends to any more (the `buffer.sqlite` left by a
    /// server that ran with `--separate-buffer`, drained at start before the direct accept path takes sends).
    func drain(within timeout: Duration) async throws -> Bool {
        let acknowledgements = AcknowledgementQueue()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while let entryIds = await acknowledgements.next() { try await self.acknowledge(entryIds) }
            }
            defer { acknowledgements.finish() }
            try await process(acknowledgements: acknowledgements, drainWithin: timeout)
            acknowledgements.finish()
            try await group.waitForAll()
        }
        return buffer.depth == 0
    }

    /// The processing loop; with `drainWithin`, draining from the start (as after a graceful shutdown).
    private func process(acknowledgements: AcknowledgementQueue, drainWithin: Duration?) async throws {
        var schedule = Schedule(settings: Schedule.Settings(configuration))
        if let drainWithin { schedule.startDraining(deadline: clock.now + drainWithin) }
        // Wake-ups asked for and not yet come.
        var timers: [ElapsedClock.Instant] = []
        // When entries were read and not yet in a batch (for the `queued` stage).
        var readAt: [String: ElapsedClock.Instant] = [:]
        let stageTimer = metrics.stageTimer
        try await withThrowingTaskGroup(of: Event.self) { group in
            // Whatever is still running when the loop ends (a blocking read, an abandoned batch) is not waited for.
            defer { group.cancelAll() }
            if drainWithin == nil {
                group.addTask {
                    try? await gracefulShutdown()
                    return .gracefulShutdown
                }
            }
            while true {
                // Cancelled (not a graceful shutdown): stop at once; what is buffered stays durable for the next start.
                if Task.isCancelled { return }
                if !schedule.isDraining, Task.isShuttingDownGracefully {
                    schedule.startDraining(deadline: clock.now + configuration.shutdownDrainTimeout)
                    logger.info("processor draining the buffer", metadata: ["depth": "\(buffer.depth)"])
                }
                let step = schedule.next(now: clock.now)
                switch step.finish {
                case .drained:
                    logger.info("processor drained the buffer")
                    return
                case .deadlinePassed:
                    logger.warning(
                        "processor stopped before the buffer was empty; the rest stays buffered",
                        metadata: ["depth": "\(buffer.depth)", "batchesAbandoned": "\(schedule.batchesInFlight)"])
                    return
                case nil:
                    break
                }
                for batch in step.batches {
                    if let earliest = batch.items.compactMap({ readAt.removeValue(forKey: $0.entry.id) }).min() {
                        stageTimer.record(.queued, clock.now - earliest)
                    }
                    group.addTask { await self.store(batch, acknowledgements: acknowledgements) }
                }
                if let read = step.read {
                    group.addTask { [buffer] in .read(try await buffer.nextBatch(max: read.max, wait: read.wait)) }
                }
                if let wakeAt = step.wakeAt, !timers.contains(where: { $0 <= wakeAt }) {
                    timers.append(wakeAt)
                    group.addTask { [clock] in
                        try? await clock.sleep(until: wakeAt)
                        return .timer(wakeAt)
                    }
                }
                guard let event = try await group.next() else {
                    // Cannot happen: the graceful shutdown watch runs until shutdown, and while draining (from then on, or
                    // from the start in a drain) the schedule always leaves something to wait for (ProcessingScheduleTests).
                    logger.critical("processor has nothing to wait for; stopping")
                    assertionFailure("the processing schedule left nothing to wait for")
                    return
                }
                switch event {
                case .read(let entries):
                    let (now, nowMillis) = (clock.now, WallClock.nowMillis())
                    // Entries the schedule dropped (a partition's lease lost) never start a batch: forget them now and then.
                    if readAt.count > schedule.settings.maxHeld * 2 { readAt.removeAll(keepingCapacity: true) }
                    for entry in entries {
                        readAt[entry.id] = now
                        stageTimer.record(.buffered, .milliseconds(max(0, nowMillis - entry.message.acceptedAt)))
                    }
                    schedule.received(entries)
                case .stored(let batch, .success(let results), let duration):
                    metrics.processingBatch.record(duration)
                    let retries = schedule.batchFinished(batch.id, results: results, now: clock.now)
                    report(batch, results, retries)
                case .stored(let batch, .failure(let error), _):
                    if let backoff = schedule.batchFailed(batch.id, now: clock.now) {
                        logger.error(
                            "store failed; retrying the batch", metadata: ["error": "\(error)", "partitions": "\(batch.partitions)", "retryIn": "\(backoff)"])
                    }
                case .timer(let at):
                    timers.removeAll { $0 == at }
                case .gracefulShutdown:
                    break
                }
            }
        }
    }

    /// Stores one batch within `storeTimeout`. What it finished is acknowledged at once (not after the loop heard of
    /// it: a send that finds the message stored should find the buffer's depth down too); the attempts of failed
    /// messages are recorded before the partition's next batch can start, so that a restart does not give them more.
    private func store(_ batch: Schedule.Batch, acknowledgements: AcknowledgementQueue) async -> Event {
        let started = clock.now
        do {
            let results = try await withDeadline(configuration.storeTimeout) { [store] in try await store.process(batch.items) }
            let duration = clock.now - started
            acknowledgements.add(Schedule.finishedEntryIds(batch.items, results))
            for (item, result) in zip(batch.items, results) {
                guard case .failed = result else { continue }
                try? await buffer.recordFailedAttempt(entryId: item.entry.id, attempts: item.entry.attempts + 1)
            }
            return .stored(batch, .success(results), duration: duration)
        } catch {
            return .stored(batch, .failure(error), duration: clock.now - started)
        }
    }

    /// Metrics and logs of a stored batch.
    private func report(_ batch: Schedule.Batch, _ results: [ProcessingResult], _ retries: [Schedule.Retry]) {
        let nowMillis = WallClock.nowMillis()
        let retries = Dictionary(retries.map { ($0.entry.id, $0) }, uniquingKeysWith: { first, _ in first })
        for (item, result) in zip(batch.items, results) {
            let message = item.entry.message
            switch result {
            case .stored:
                metrics.messageStored(acceptedAt: message.acceptedAt, nowMillis: nowMillis)
            case .deadLettered(let error):
                metrics.messageDeadLettered()
                logger.error(
                    "message dead-lettered",
                    metadata: ["serverId": "\(message.serverId)", "conversationId": "\(message.conversationId)", "error": "\(error)"])
            case .failed(let error):
                metrics.messageRetried()
                logger.warning(
                    "processing failed; will retry",
                    metadata: [
                        "serverId": "\(message.serverId)", "attempt": "\(retries[item.entry.id]?.attempts ?? item.entry.attempts + 1)",
                        "error": "\(error)", "retryIn": "\(retries[item.entry.id]?.delay ?? .zero)",
                    ])
            case .alreadyStored, .deferred:
                break
            }
        }
    }

    /// Acknowledges to the buffer, retrying until it takes them (the store already has the messages).
    private func acknowledge(_ entryIds: [String]) async throws {
        var delay = configuration.retryBaseDelay
        while true {
            do {
                try await buffer.acknowledge(entryIds: entryIds)
                return
            } catch {
                logger.error("buffer acknowledgement failed; retrying", metadata: ["error": "\(error)"])
                try await clock.sleep(for: delay)
                delay = min(configuration.maxRetryDelay, delay * 2)
            }
        }
    }
}
