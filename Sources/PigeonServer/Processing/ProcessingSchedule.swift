import PigeonDomain
import PigeonProtocol

/// The processor's decisions, without I/O: which partitions' batches to store now, when to read more from the
/// buffer, when a failed message is tried again, when a store that failed as a whole is tried again, and when a
/// graceful drain is over. The ``Processor`` performs each ``Step`` and reports back what happened.
///
/// - Partitions are stored concurrently: a partition is in at most one batch in flight (a conversation lives in one
///   partition, so its messages are stored in buffer order), and at most `concurrency` batches are in flight. A new
///   batch takes what every partition not in flight has ready, up to `batchSize` (partitions taking turns to go
///   first).
/// - A batch starts beside others in flight when it is full (a backlog), or once every batch in flight has taken
///   longer than twice the usual batch time (between 2 and 250 ms): a batch held up in the store (a lock wait, a
///   slow disk) holds up only its own partitions, while a store that keeps up gets what arrives meanwhile in one
///   next transaction, not in one per partition (each transaction has a fixed cost: round trips and a commit).
/// - A failed message waits `retryBaseDelay` doubled per attempt (at most `maxRetryDelay`); the later messages of its
///   conversation wait behind it, every other conversation goes on. Its last attempt is marked final (the store
///   dead-letters it instead of failing it).
/// - A batch the store failed as a whole (down, timed out) spends no attempts: nothing is stored until a backoff
///   passed (doubling per failure, reset by a success), and then one batch at a time until one succeeds. Batches that
///   were already in flight when the store failed do not double the backoff again.
/// - At most `maxHeld` entries are held (read and not finished); one read at a time.
/// - Draining (graceful shutdown): reads do not wait; the drain is over when nothing is held or in flight and a read
///   came back empty since the last batch ended, or when the deadline passed.
///
/// Time is the processor's clock's (``ElapsedClock``), so the schedule runs as well on a test's manual clock.
struct ProcessingSchedule {
    typealias Instant = ElapsedClock.Instant

    struct Settings: Sendable {
        /// Most messages in one store batch.
        var batchSize: Int
        /// Most store batches in flight at once (no partition in two of them).
        var concurrency: Int
        /// Most entries held at once: read from the buffer and not finished.
        var maxHeld: Int
        /// Attempts before a message is dead-lettered.
        var maxAttempts: Int
        var retryBaseDelay: Duration
        var maxRetryDelay: Duration
        /// How long a read waits for an entry to arrive (when not draining).
        var readWait: Duration

        init(
            batchSize: Int, concurrency: Int, maxHeld: Int, maxAttempts: Int, retryBaseDelay: Duration, maxRetryDelay: Duration,
            readWait: Duration = .seconds(1)
        ) {
            precondition(batchSize >= 1 && concurrency >= 1 && maxHeld >= 1, "batch size, concurrency and read-ahead must be positive")
            self.batchSize = batchSize
            self.concurrency = concurrency
            self.maxHeld = maxHeld
            self.maxAttempts = maxAttempts
            self.retryBaseDelay = retryBaseDelay
            self.maxRetryDelay = maxRetryDelay
            self.readWait = readWait
        }

        init(_ configuration: ServerConfiguration) {
            self.init(
                batchSize: configuration.batchSize, concurrency: configuration.processingConcurrency, maxHeld: configuration.batchSize * 4,
                maxAttempts: configuration.maxAttempts, retryBaseDelay: configuration.retryBaseDelay, maxRetryDelay: configuration.maxRetryDelay)
        }
    }

    /// Messages to store in one call: of one or more partitions, each partition's in buffer order.
    struct Batch: Sendable {
        var id: Int
        var partitions: [Int]
        var items: [ProcessingItem]
    }

    /// A read to start: at most `max` entries, waiting up to `wait` for one to arrive.
    struct Read: Sendable, Equatable {
        var max: Int
        var wait: Duration
    }

    enum Finish: Sendable, Equatable {
        /// Draining, and the buffer has nothing left for this node.
        case drained
        /// Draining, and the deadline passed first.
        case deadlinePassed
    }

    /// What to do now. Whenever it does not finish, there is something to wait for: a read or a batch in flight, or
    /// `wakeAt`.
    struct Step: Sendable {
        var batches: [Batch] = []
        var read: Read?
        /// Ask again at this time even if nothing else happened (a retry or a backoff ends, the drain deadline).
        var wakeAt: Instant?
        var finish: Finish?
    }

    /// A failed message that will be tried again.
    struct Retry: Sendable {
        var entry: BufferEntry
        /// Failed attempts so far, this one included.
        var attempts: Int
        var delay: Duration
    }


    private struct PartitionQueue {
        /// Held entries in buffer order, those in a batch in flight included.
        var entries: [BufferEntry] = []
        var batchInFlight: Int?
    }

    private struct InFlight {
        var partitions: [Int]
        var entries: [BufferEntry]
        var startedAt: Instant
        /// The store-failure generation when it started.
        var generation: Int
    }

    /// Bounds of the time after which batches in flight count as held up (twice the usual batch time).
    static let heldUpBounds: ClosedRange<Duration> = .milliseconds(2) ... .milliseconds(250)

    let settings: Settings
    private var queues: [Int: PartitionQueue] = [:]
    private var inFlight: [Int: InFlight] = [:]
    private var nextBatchId = 0
    /// Where the next turn among partitions starts.
    private var nextPartition = 0
    /// When each conversation with a failed message may be tried again.
    private var retryAt: [String: Instant] = [:]
    private var storeBackoff = Duration.zero
    private var storeRetryAt: Instant?
    /// Counts the store failures that doubled the backoff.
    private var storeFailureGeneration = 0
    /// A moving average of how long the store takes for a batch.
    private var usualBatchTime: Duration?
    private var isReading = false
    private var drainDeadline: Instant?
    private var drainReadCameBackEmpty = false

    /// Entries held now (read and not finished).
    private(set) var held = 0

    init(settings: Settings) {
        self.settings = settings
    }

    var isDraining: Bool { drainDeadline != nil }
    /// Store batches in flight.
    var batchesInFlight: Int { inFlight.count }

    /// How long batches may run before others start beside them with less than a full batch.
    var heldUpAfter: Duration {
        let twice = (usualBatchTime ?? .zero) * 2
        return min(Self.heldUpBounds.upperBound, max(Self.heldUpBounds.lowerBound, twice))
    }

    /// Graceful shutdown: keep going until the buffer is empty, but not past `deadline`.
    mutating func startDraining(deadline: Instant) {
        guard drainDeadline == nil else { return }
        drainDeadline = deadline
    }

    /// Decides what to start now; everything it returns is counted as started.
    mutating func next(now: Instant) -> Step {
        var step = Step()
        if let drainDeadline {
            if now >= drainDeadline {
                step.finish = .deadlinePassed
                return step
            }
            if held == 0, inFlight.isEmpty, !isReading, drainReadCameBackEmpty {
                step.finish = .drained
                return step
            }
        }
        var partialBatchAt: Instant?
        if storeRetryAt.map({ $0 <= now }) ?? true {
            partialBatchAt = startBatches(now: now, into: &step)
        }
        if !isReading, held < settings.maxHeld, !(isDraining && drainReadCameBackEmpty) {
            isReading = true
            step.read = Read(max: settings.maxHeld - held, wait: isDraining ? .zero : settings.readWait)
        }
        var wake = drainDeadline
        if let partialBatchAt { wake = min(wake ?? partialBatchAt, partialBatchAt) }
        if held > 0, let storeRetryAt, storeRetryAt > now { wake = min(wake ?? storeRetryAt, storeRetryAt) }
        for at in retryAt.values where at > now { wake = min(wake ?? at, at) }
        step.wakeAt = wake
        return step
    }

    /// Starts what may start now; returns when a batch with less than a full batch may start, if that is later.
    private mutating func startBatches(now: Instant, into step: inout Step) -> Instant? {
        // One batch at a time while the store is failing: a probe, not a stampede.
        let limit = storeBackoff == .zero ? settings.concurrency : 1
        while inFlight.count < limit {
            let partitions = queues.keys.sorted()
            let first = partitions.firstIndex { $0 >= nextPartition } ?? 0
            var entries: [BufferEntry] = []
            var taken: [Int] = []
            for offset in 0..<partitions.count where entries.count < settings.batchSize {
                let partition = partitions[(first + offset) % partitions.count]
                guard let queue = queues[partition], queue.batchInFlight == nil else { continue }
                let selected = selectBatch(from: queue.entries, max: settings.batchSize - entries.count, now: now)
                guard !selected.isEmpty else { continue }
                entries += selected
                taken.append(partition)
            }
            guard let last = taken.last else { return nil }
            if entries.count < settings.batchSize, let youngest = inFlight.values.map(\.startedAt).max(), now < youngest + heldUpAfter {
                return youngest + heldUpAfter
            }
            let id = nextBatchId
            nextBatchId += 1
            inFlight[id] = InFlight(partitions: taken, entries: entries, startedAt: now, generation: storeFailureGeneration)
            for partition in taken { queues[partition]?.batchInFlight = id }
            nextPartition = last + 1
            step.batches.append(
                Batch(
                    id: id, partitions: taken,
                    items: entries.map { ProcessingItem(entry: $0, isFinalAttempt: $0.attempts + 1 >= settings.maxAttempts) }))
        }
        return nil
    }

    /// The queue's entries in order, at most `max`, leaving out every conversation that waits for a retry.
    private func selectBatch(from entries: [BufferEntry], max: Int, now: Instant) -> [BufferEntry] {
        var batch: [BufferEntry] = []
        var waiting = Set<String>()
        for entry in entries where batch.count < max {
            let conversation = entry.message.conversationId
            if waiting.contains(conversation) { continue }
            if let at = retryAt[conversation], at > now {
                waiting.insert(conversation)
                continue
            }
            batch.append(entry)
        }
        return batch
    }

    /// A read ended with these entries (in buffer order).
    mutating func received(_ entries: [BufferEntry]) {
        isReading = false
        guard !entries.isEmpty else {
            if isDraining { drainReadCameBackEmpty = true }
            return
        }
        drainReadCameBackEmpty = false
        for entry in entries { queues[entry.partition, default: PartitionQueue()].entries.append(entry) }
        held += entries.count
    }

    /// The entries of a stored batch whose processing ended (stored, stored before, or dead-lettered): those to
    /// acknowledge, which the processor does as soon as the store answered.
    static func finishedEntryIds(_ items: [ProcessingItem], _ results: [ProcessingResult]) -> [String] {
        zip(items, results).compactMap { item, result in
            switch result {
            case .stored, .alreadyStored, .deadLettered: item.entry.id
            case .failed, .deferred: nil
            }
        }
    }

    /// The store answered a batch: one result per item, in order. Returns the failed messages that will be tried
    /// again.
    mutating func batchFinished(_ batchId: Int, results: [ProcessingResult], now: Instant) -> [Retry] {
        guard let batch = inFlight.removeValue(forKey: batchId) else { return [] }
        for partition in batch.partitions { queues[partition]?.batchInFlight = nil }
        let took = now - batch.startedAt
        usualBatchTime = usualBatchTime.map { ($0 * 4 + took) / 5 } ?? took
        storeBackoff = .zero
        storeRetryAt = nil
        drainReadCameBackEmpty = false
        var retries: [Retry] = []
        var finished = Set<String>()
        var attempts: [String: Int] = [:]
        for (entry, result) in zip(batch.entries, results) {
            let conversation = entry.message.conversationId
            switch result {
            case .stored, .alreadyStored, .deadLettered:
                retryAt[conversation] = nil
                finished.insert(entry.id)
            case .failed:
                let attempt = entry.attempts + 1
                let delay = min(settings.maxRetryDelay, settings.retryBaseDelay * (1 << min(attempt - 1, 16)))
                attempts[entry.id] = attempt
                retryAt[conversation] = now + delay
                retries.append(Retry(entry: entry, attempts: attempt, delay: delay))
            case .deferred:
                break
            }
        }
        for partition in batch.partitions {
            guard var queue = queues[partition] else { continue }
            let before = queue.entries.count
            queue.entries = queue.entries.compactMap { entry in
                if finished.contains(entry.id) { return nil }
                var entry = entry
                if let attempt = attempts[entry.id] { entry.attempts = attempt }
                return entry
            }
            held -= before - queue.entries.count
            queues[partition] = queue.entries.isEmpty ? nil : queue
        }
        return retries
    }

    /// The store failed the batch as a whole: no attempt is spent. Returns the new backoff, or `nil` if this failure
    /// was already counted (the batch started before the failure that set the current backoff).
    mutating func batchFailed(_ batchId: Int, now: Instant) -> Duration? {
        guard let batch = inFlight.removeValue(forKey: batchId) else { return nil }
        for partition in batch.partitions { queues[partition]?.batchInFlight = nil }
        guard batch.generation == storeFailureGeneration else { return nil }
        storeFailureGeneration += 1
        storeBackoff = min(settings.maxRetryDelay, storeBackoff == .zero ? settings.retryBaseDelay : storeBackoff * 2)
        storeRetryAt = now + storeBackoff
        return storeBackoff
    }
}
