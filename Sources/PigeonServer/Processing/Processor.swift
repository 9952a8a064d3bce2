import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle

/// Moves buffered messages into the store: in buffer order, in batches, one transaction per batch.
///
/// - Event-driven: an append wakes it; an idle server stores a message about a millisecond after accepting it.
/// - A message that fails is retried with exponential backoff; later messages of its conversation wait behind
///   it (order), other conversations flow on. The `maxAttempts`-th failure, or a permanent one (the
///   conversation is gone), dead-letters it and sends `message.failed` to its sender.
/// - A store that fails as a whole (down, disk full) is retried with backoff, without spending attempts.
/// - Buffer entries are acknowledged only after the store committed (in the background, overlapping the next
///   batch); a crash in between hands them out again and the store recognises them by serverId.
/// - On graceful shutdown it keeps going until the buffer is empty (bounded by `shutdownDrainTimeout`); when
///   cancelled it stops at once (the buffer keeps the rest).
final class Processor: Service {
    private struct Pending {
        var entry: BufferEntry
    }

    private let buffer: any IngestBuffer
    private let store: any MessageStore
    private let metrics: PigeonMetrics
    private let configuration: ServerConfiguration
    private let logger: Logger
    private let clock = ContinuousClock()

    init(buffer: any IngestBuffer, store: any MessageStore, metrics: PigeonMetrics, configuration: ServerConfiguration, logger: Logger) {
        self.buffer = buffer
        self.store = store
        self.metrics = metrics
        self.configuration = configuration
        self.logger = logger
    }

    func run() async throws {
        // Acknowledgements go to the buffer beside the next store batch instead of before it.
        let (finishedEntries, acknowledger) = AsyncStream.makeStream(of: [String].self)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await entryIds in finishedEntries { try await self.acknowledge(entryIds) }
            }
            defer { acknowledger.finish() }
            try await process(acknowledger: acknowledger)
            acknowledger.finish()
            try await group.waitForAll()
        }
    }

    private func process(acknowledger: AsyncStream<[String]>.Continuation) async throws {
        var inflight: [BufferEntry] = []
        var retryAt: [String: ContinuousClock.Instant] = [:]
        var storeBackoff = Duration.zero
        var drainDeadline: ContinuousClock.Instant?
        let batchSize = configuration.batchSize
        while true {
            // Cancelled (not a graceful shutdown): stop at once; what is buffered stays durable for the next start.
            if Task.isCancelled { return }
            if drainDeadline == nil, Task.isShuttingDownGracefully {
                drainDeadline = clock.now + configuration.shutdownDrainTimeout
                logger.info("processor draining the buffer", metadata: ["depth": "\(buffer.depth)"])
            }
            let now = clock.now
            if let drainDeadline, now >= drainDeadline {
                logger.warning("processor stopped before the buffer was empty; the rest stays buffered", metadata: ["depth": "\(buffer.depth)"])
                return
            }
            let earliestRetry = retryAt.values.min()
            if inflight.count < batchSize * 4 {
                let ready = inflight.contains { retryAt[$0.message.conversationId].map { $0 <= now } ?? true }
                let wait: Duration =
                    ready || drainDeadline != nil ? .zero : min(.seconds(1), earliestRetry.map { max(.zero, $0 - now) } ?? .seconds(1))
                let more = try await buffer.nextBatch(max: batchSize * 4 - inflight.count, wait: wait)
                inflight.append(contentsOf: more)
            }
            if inflight.isEmpty {
                if drainDeadline != nil {
                    logger.info("processor drained the buffer")
                    return
                }
                continue
            }
            var batch: [BufferEntry] = []
            var waiting = Set<String>()
            let selectionTime = clock.now
            for entry in inflight where batch.count < batchSize {
                let conversation = entry.message.conversationId
                if waiting.contains(conversation) { continue }
                if let at = retryAt[conversation], at > selectionTime {
                    waiting.insert(conversation)
                    continue
                }
                batch.append(entry)
            }
            if batch.isEmpty {
                if let earliest = retryAt.values.min(), earliest > selectionTime, drainDeadline != nil {
                    try await clock.sleep(until: earliest)
                }
                continue
            }
            let started = clock.now
            let results: [ProcessingResult]
            do {
                let items = batch.map { ProcessingItem(entry: $0, isFinalAttempt: $0.attempts + 1 >= configuration.maxAttempts) }
                results = try await withDeadline(configuration.storeTimeout) { [store] in try await store.process(items) }
                storeBackoff = .zero
            } catch {
                storeBackoff = min(configuration.maxRetryDelay, storeBackoff == .zero ? configuration.retryBaseDelay : storeBackoff * 2)
                logger.error("store failed; retrying the batch", metadata: ["error": "\(error)", "retryIn": "\(storeBackoff)"])
                try? await Task.sleep(for: storeBackoff)
                continue
            }
            metrics.processingBatch.record(clock.now - started)
            let nowMillis = WallClock.nowMillis()
            var finished: [String] = []
            var attemptsByEntry: [String: Int] = [:]
            for (entry, result) in zip(batch, results) {
                let message = entry.message
                switch result {
                case .stored, .alreadyStored:
                    if case .stored = result {
                        metrics.stored.increment()
                        metrics.acceptToStored.record(.milliseconds(max(0, nowMillis - message.acceptedAt)))
                    }
                    retryAt[message.conversationId] = nil
                    finished.append(entry.id)
                case .deadLettered(let error):
                    metrics.deadLettered.increment()
                    retryAt[message.conversationId] = nil
                    logger.error(
                        "message dead-lettered",
                        metadata: ["serverId": "\(message.serverId)", "conversationId": "\(message.conversationId)", "error": "\(error)"])
                    finished.append(entry.id)
                case .failed(let error):
                    metrics.retried.increment()
                    let attempts = entry.attempts + 1
                    attemptsByEntry[entry.id] = attempts
                    let delay = min(configuration.maxRetryDelay, configuration.retryBaseDelay * (1 << min(attempts - 1, 16)))
                    retryAt[message.conversationId] = clock.now + delay
                    logger.warning(
                        "processing failed; will retry",
                        metadata: ["serverId": "\(message.serverId)", "attempt": "\(attempts)", "error": "\(error)", "retryIn": "\(delay)"])
                    try? await buffer.recordFailedAttempt(entryId: entry.id, attempts: attempts)
                case .deferred:
                    break
                }
            }
            if !finished.isEmpty { acknowledger.yield(finished) }
            let done = Set(finished)
            inflight = inflight.compactMap { entry in
                if done.contains(entry.id) { return nil }
                var entry = entry
                if let attempts = attemptsByEntry[entry.id] { entry.attempts = attempts }
                return entry
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
                try await Task.sleep(for: delay)
                delay = min(configuration.maxRetryDelay, delay * 2)
            }
        }
    }
}

/// The store did not answer a batch in time (its connection may have died under it without an error).
struct StoreTimeout: Error, CustomStringConvertible {
    var timeout: Duration
    var description: String { "the store did not answer within \(timeout)" }
}

/// Runs `operation`, but gives up waiting after `timeout` and throws ``StoreTimeout``. Unlike a task group, it does
/// not wait for an operation that ignores cancellation: seen with a PostgreSQL transaction whose server was killed
/// under it, which never returned. The abandoned operation is cancelled and left to finish on its own; processing is
/// idempotent, so the batch can be tried again meanwhile.
func withDeadline<T: Sendable>(_ timeout: Duration, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let finished = NIOLockedValueBox(false)
    let claim: @Sendable () -> Bool = { finished.withLockedValue { done in defer { done = true }; return !done } }
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let work = NIOLockedValueBox<Task<Void, Never>?>(nil)
        let timer = Task {
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled, claim() else { return }
            work.withLockedValue { $0 }?.cancel()
            continuation.resume(throwing: StoreTimeout(timeout: timeout))
        }
        work.withLockedValue {
            $0 = Task {
                let result: Result<T, any Error>
                do {
                    result = .success(try await operation())
                } catch {
                    result = .failure(error)
                }
                timer.cancel()
                if claim() { continuation.resume(with: result) }
            }
        }
    }
}
