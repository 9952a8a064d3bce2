import Foundation
import PigeonDomain
import PigeonProtocol
import Testing

@testable import PigeonServer

/// The processor's scheduling decisions, without I/O: partitions in parallel (one batch each), retries per
/// conversation, store-wide backoff, read-ahead, drain.
@Suite struct ProcessingScheduleTests {
    typealias Instant = ElapsedClock.Instant
    typealias Schedule = ProcessingSchedule

    static let start = Instant(sinceStart: .seconds(1))
    static let base = Duration.milliseconds(100)

    static func settings(batchSize: Int = 100, concurrency: Int = 8, maxHeld: Int = 1_000, maxAttempts: Int = 3) -> Schedule.Settings {
        Schedule.Settings(
            batchSize: batchSize, concurrency: concurrency, maxHeld: maxHeld, maxAttempts: maxAttempts, retryBaseDelay: base,
            maxRetryDelay: .seconds(5), readWait: .seconds(1))
    }

    /// Entry `id` of `conversation` in `partition`.
    static func entry(_ id: String, _ conversation: String, partition: Int, attempts: Int = 0) -> BufferEntry {
        BufferEntry(
            id: id,
            message: BufferedMessage(
                serverId: id, conversationId: conversation, senderId: "u", senderDeviceId: "d", clientMessageId: id, type: "text", body: id,
                clientTimestamp: 0, acceptedAt: 0),
            attempts: attempts, partition: partition)
    }

    static func ids(_ batch: Schedule.Batch) -> [String] { batch.items.map(\.entry.id) }

    /// A schedule that has read `entries` (its first step asked for the read).
    static func schedule(_ settings: Schedule.Settings = settings(), holding entries: [BufferEntry]) -> Schedule {
        var schedule = Schedule(settings: settings)
        let first = schedule.next(now: start)
        #expect(first.read == Schedule.Read(max: settings.maxHeld, wait: .seconds(1)))
        #expect(first.batches.isEmpty)
        schedule.received(entries)
        return schedule
    }

    @Test func aBatchTakesEveryFreePartitionAndAPartitionInFlightWaitsWhileOthersGoOn() {
        var schedule = Self.schedule(holding: [
            Self.entry("a1", "A", partition: 0), Self.entry("c1", "C", partition: 2), Self.entry("b1", "B", partition: 1),
            Self.entry("a2", "A", partition: 0), Self.entry("d1", "D", partition: 0),
        ])
        let step = schedule.next(now: Self.start)
        #expect(step.batches.map(\.partitions) == [[0, 1, 2]], "one transaction for what is ready")
        #expect(step.batches.map(Self.ids) == [["a1", "a2", "d1", "b1", "c1"]], "each partition in buffer order")
        #expect(step.read == Schedule.Read(max: 995, wait: .seconds(1)), "reading goes on while batches are stored")

        // More for partition 0 while its batch is in flight: it waits for that batch. Partition 3 waits too while
        // the batch in flight is young (what arrives meanwhile goes in one next transaction), and goes on once that
        // batch takes longer than usual (it may be held up in the store).
        schedule.received([Self.entry("a3", "A", partition: 0), Self.entry("e1", "E", partition: 3)])
        let young = schedule.next(now: Self.start + .milliseconds(1))
        #expect(young.batches.isEmpty)
        #expect(young.wakeAt == Self.start + Schedule.heldUpBounds.lowerBound)
        let next = schedule.next(now: Self.start + .milliseconds(2))
        #expect(next.batches.map(\.partitions) == [[3]])
        #expect(next.batches.map(Self.ids) == [["e1"]])
        #expect(schedule.batchesInFlight == 2)
        let results: [ProcessingResult] = [.stored(seq: 1), .stored(seq: 2), .stored(seq: 1), .stored(seq: 1), .stored(seq: 1)]
        #expect(Schedule.finishedEntryIds(step.batches[0].items, results) == ["a1", "a2", "d1", "b1", "c1"])
        #expect(schedule.batchFinished(step.batches[0].id, results: results, now: Self.start).isEmpty)
        #expect(schedule.held == 2)
        #expect(schedule.next(now: Self.start + .milliseconds(4)).batches.map(Self.ids) == [["a3"]])
    }

    @Test func aFullBatchStartsBesideOthersAndALesserOneWaitsALittle() {
        var schedule = Self.schedule(
            Self.settings(batchSize: 3),
            holding: [
                Self.entry("a1", "A", partition: 0), Self.entry("a2", "A", partition: 0), Self.entry("b1", "B", partition: 1),
                Self.entry("b2", "B", partition: 1), Self.entry("c1", "C", partition: 2),
            ])
        let first = schedule.next(now: Self.start)
        #expect(first.batches.map(\.partitions) == [[0, 1]])
        #expect(first.batches.map(Self.ids) == [["a1", "a2", "b1"]], "up to the batch size; partition 1's rest waits for it")
        #expect(first.wakeAt == Self.start + Schedule.heldUpBounds.lowerBound, "c1 alone waits a little")

        schedule.received([
            Self.entry("d1", "D", partition: 3), Self.entry("d2", "D", partition: 3), Self.entry("d3", "D", partition: 3),
            Self.entry("e1", "E", partition: 4),
        ])
        let full = schedule.next(now: Self.start)
        #expect(full.batches.map(Self.ids) == [["c1", "d1", "d2"]], "a full batch starts beside the one in flight")
        #expect(full.wakeAt == Self.start + Schedule.heldUpBounds.lowerBound)
        let lesser = schedule.next(now: Self.start + Schedule.heldUpBounds.lowerBound)
        #expect(lesser.batches.map(Self.ids) == [["e1"]], "once the batches in flight take longer than usual")
        #expect(schedule.batchesInFlight == 3)
    }

    @Test func theTimeBeforeBatchesCountAsHeldUpFollowsTheUsualBatchTime() {
        var schedule = Self.schedule(
            Self.settings(batchSize: 1, concurrency: 1), holding: (0..<40).map { Self.entry("e\($0)", "c\($0)", partition: $0 % 16) })
        #expect(schedule.heldUpAfter == Schedule.heldUpBounds.lowerBound)
        var now = Self.start
        for _ in 0..<20 {
            let batch = schedule.next(now: now).batches[0]
            now += .milliseconds(40)
            _ = schedule.batchFinished(batch.id, results: [.stored(seq: 1)], now: now)
        }
        #expect(schedule.heldUpAfter > .milliseconds(70) && schedule.heldUpAfter <= .milliseconds(80), "twice the usual 40 ms")
        for _ in 0..<20 {
            let batch = schedule.next(now: now).batches[0]
            now += .seconds(1)
            _ = schedule.batchFinished(batch.id, results: [.stored(seq: 1)], now: now)
        }
        #expect(schedule.heldUpAfter == Schedule.heldUpBounds.upperBound)
    }

    @Test func theConcurrencyLimitBindsAndPartitionsTakeTurns() {
        let settings = Self.settings(batchSize: 1, concurrency: 2)
        var schedule = Self.schedule(
            settings, holding: (0..<4).flatMap { partition in (0..<2).map { Self.entry("p\(partition)-\($0)", "c\(partition)", partition: partition) } })
        let first = schedule.next(now: Self.start)
        #expect(first.batches.map(Self.ids) == [["p0-0"], ["p1-0"]])
        _ = schedule.batchFinished(first.batches[0].id, results: [.stored(seq: 1)], now: Self.start)
        // Partition 0 has more, but 2 and 3 have not had a turn yet.
        let second = schedule.next(now: Self.start)
        #expect(second.batches.map(Self.ids) == [["p2-0"]])
        _ = schedule.batchFinished(first.batches[1].id, results: [.stored(seq: 1)], now: Self.start)
        let third = schedule.next(now: Self.start)
        #expect(third.batches.map(Self.ids) == [["p3-0"]])
        _ = schedule.batchFinished(second.batches[0].id, results: [.stored(seq: 1)], now: Self.start)
        #expect(schedule.next(now: Self.start).batches.map(Self.ids) == [["p0-1"]])
    }

    @Test func aFailedMessageHoldsBackItsConversationOnlyAndIsRetriedWithBackoffUntilItsFinalAttempt() {
        var schedule = Self.schedule(holding: [
            Self.entry("a1", "A", partition: 0), Self.entry("b1", "B", partition: 0), Self.entry("a2", "A", partition: 0),
        ])
        var now = Self.start
        let first = schedule.next(now: now).batches[0]
        #expect(first.items.map(\.isFinalAttempt) == [false, false, false])
        let firstResults: [ProcessingResult] = [.failed(TestError()), .stored(seq: 1), .deferred]
        #expect(Schedule.finishedEntryIds(first.items, firstResults) == ["b1"])
        let failed = schedule.batchFinished(first.id, results: firstResults, now: now)
        #expect(failed.map(\.entry.id) == ["a1"])
        #expect(failed.map(\.attempts) == [1])
        #expect(failed.map(\.delay) == [Self.base])
        #expect(schedule.held == 2)

        // A's messages wait; a new message of B in the same partition does not.
        schedule.received([Self.entry("b2", "B", partition: 0)])
        let waiting = schedule.next(now: now)
        #expect(waiting.batches.map(Self.ids) == [["b2"]])
        #expect(waiting.wakeAt == now + Self.base)
        _ = schedule.batchFinished(waiting.batches[0].id, results: [.stored(seq: 2)], now: now)
        #expect(schedule.next(now: now + .milliseconds(99)).batches.isEmpty)

        now += Self.base
        let second = schedule.next(now: now).batches[0]
        #expect(Self.ids(second) == ["a1", "a2"], "the failed message keeps its place before the later one")
        #expect(second.items.map(\.entry.attempts) == [1, 0])
        #expect(second.items.map(\.isFinalAttempt) == [false, false])
        let again = schedule.batchFinished(second.id, results: [.failed(TestError()), .deferred], now: now)
        #expect(again.map(\.delay) == [Self.base * 2])

        now += Self.base * 2
        let third = schedule.next(now: now).batches[0]
        #expect(third.items.map(\.isFinalAttempt) == [true, false], "the third attempt of a1 is its last")
        let lastResults: [ProcessingResult] = [.deadLettered(TestError()), .stored(seq: 1)]
        #expect(Schedule.finishedEntryIds(third.items, lastResults) == ["a1", "a2"])
        #expect(schedule.batchFinished(third.id, results: lastResults, now: now).isEmpty)
        #expect(schedule.held == 0)
        #expect(schedule.next(now: now).wakeAt == nil)
    }

    @Test func aStoreFailureBacksOffWithoutSpendingAttemptsThenProbesWithOneBatch() {
        var schedule = Self.schedule(Self.settings(batchSize: 1), holding: (0..<3).map { Self.entry("e\($0)", "c\($0)", partition: $0) })
        var now = Self.start
        let batches = schedule.next(now: now).batches
        #expect(batches.count == 3)
        #expect(schedule.batchFailed(batches[0].id, now: now) == Self.base)
        // The other two were in flight when the store failed: no further doubling.
        #expect(schedule.batchFailed(batches[1].id, now: now) == nil)
        #expect(schedule.batchFailed(batches[2].id, now: now) == nil)
        let waiting = schedule.next(now: now)
        #expect(waiting.batches.isEmpty)
        #expect(waiting.wakeAt == now + Self.base)

        now += Self.base
        let probe = schedule.next(now: now).batches
        #expect(probe.count == 1, "one batch at a time while the store fails")
        #expect(probe[0].items.map(\.entry.attempts) == [0], "no attempt spent")
        #expect(schedule.batchFailed(probe[0].id, now: now) == Self.base * 2)
        now += Self.base * 2
        let secondProbe = schedule.next(now: now).batches
        #expect(secondProbe.count == 1)
        _ = schedule.batchFinished(secondProbe[0].id, results: [.stored(seq: 1)], now: now)
        #expect(schedule.next(now: now).batches.count == 2, "the store answers again: every partition goes on")
    }

    @Test func readsAreOneAtATimeAndBoundedByWhatIsHeld() {
        var schedule = Schedule(settings: Self.settings(batchSize: 2, maxHeld: 5))
        #expect(schedule.next(now: Self.start).read == Schedule.Read(max: 5, wait: .seconds(1)))
        #expect(schedule.next(now: Self.start).read == nil, "one read at a time")
        schedule.received((0..<5).map { Self.entry("e\($0)", "c", partition: 0) })
        let step = schedule.next(now: Self.start)
        #expect(step.read == nil, "five held: no room")
        #expect(step.batches.map(Self.ids) == [["e0", "e1"]])
        _ = schedule.batchFinished(step.batches[0].id, results: [.stored(seq: 1), .stored(seq: 2)], now: Self.start)
        #expect(schedule.next(now: Self.start).read == Schedule.Read(max: 2, wait: .seconds(1)))
    }

    @Test func aDrainEndsOnceNothingIsHeldAndAReadCameBackEmpty() {
        var schedule = Self.schedule(holding: [Self.entry("a1", "A", partition: 0)])
        let batch = schedule.next(now: Self.start).batches[0]
        schedule.startDraining(deadline: Self.start + .seconds(10))
        #expect(schedule.next(now: Self.start).finish == nil)
        schedule.received([])
        // Nothing more to read, but a batch is in flight.
        let waiting = schedule.next(now: Self.start)
        #expect(waiting.finish == nil)
        #expect(waiting.read == nil)
        #expect(waiting.wakeAt == Self.start + .seconds(10))
        _ = schedule.batchFinished(batch.id, results: [.stored(seq: 1)], now: Self.start)
        // A batch ended: read once more, without waiting, before calling it drained.
        let last = schedule.next(now: Self.start)
        #expect(last.read == Schedule.Read(max: 1_000, wait: .zero))
        #expect(last.finish == nil)
        schedule.received([])
        #expect(schedule.next(now: Self.start).finish == .drained)
    }

    @Test func aDrainStopsAtItsDeadlineWhateverIsLeft() {
        var schedule = Self.schedule(holding: [Self.entry("a1", "A", partition: 0)])
        let batch = schedule.next(now: Self.start).batches[0]
        _ = schedule.batchFinished(batch.id, results: [.failed(TestError())], now: Self.start)
        schedule.startDraining(deadline: Self.start + .seconds(1))
        #expect(schedule.next(now: Self.start).wakeAt == Self.start + Self.base, "the retry comes before the deadline")
        #expect(schedule.next(now: Self.start + .seconds(1)).finish == .deadlinePassed)
    }

    /// Random runs against a model of the store: every conversation's messages are stored in buffer order, every
    /// entry ends stored or dead-lettered, no partition ever has two batches in flight, never more than `concurrency`
    /// batches (one while the store fails), and until the drain ends there is always something to wait for.
    @Test(arguments: 0..<40) func randomRunsKeepEveryGuarantee(seed: Int) {
        var random = SeededRandom(seed: UInt64(seed))
        let concurrency = Int.random(in: 1...4, using: &random)
        let settings = Self.settings(batchSize: Int.random(in: 1...6, using: &random), concurrency: concurrency, maxHeld: Int.random(in: 3...20, using: &random))
        var schedule = Schedule(settings: settings)
        let partitions = Int.random(in: 1...5, using: &random)
        let conversations = (0..<8).map { "c\($0)" }
        let partitionOf = Dictionary(uniqueKeysWithValues: conversations.map { ($0, Int.random(in: 0..<partitions, using: &random)) })
        // The buffer: entries in append order, handed out in order per partition.
        var unread: [BufferEntry] = (0..<60).map { index in
            let conversation = conversations.randomElement(using: &random)!
            return Self.entry("e\(index)", conversation, partition: partitionOf[conversation]!)
        }
        let appendOrder = unread.map(\.id)
        var attemptsByEntry: [String: Int] = [:]
        var stored: [String: [String]] = [:]
        var deadLettered = Set<String>()
        var finished = Set<String>()
        var now = Self.start
        var readInFlight: Schedule.Read?
        var batchesInFlight: [Schedule.Batch] = []
        var storeIsDown = false
        var wakeAt: Instant?
        var drainRequested = false

        for _ in 0..<5_000 {
            if !drainRequested, unread.isEmpty, Bool.random(using: &random) {
                drainRequested = true
                schedule.startDraining(deadline: now + .seconds(3_600))
            }
            let step = schedule.next(now: now)
            if let finish = step.finish {
                #expect(finish == .drained)
                break
            }
            if let read = step.read {
                #expect(readInFlight == nil)
                readInFlight = read
            }
            batchesInFlight += step.batches
            let partitionsInFlight = batchesInFlight.flatMap(\.partitions)
            #expect(Set(partitionsInFlight).count == partitionsInFlight.count, "a partition is in one batch in flight at most")
            #expect(batchesInFlight.count <= concurrency)
            for batch in step.batches {
                #expect(Set(batch.items.map(\.entry.partition)) == Set(batch.partitions))
                #expect(batch.items.count <= settings.batchSize)
                for item in batch.items {
                    #expect(item.entry.attempts == attemptsByEntry[item.entry.id, default: 0], "attempts are counted once per failure")
                    #expect(item.isFinalAttempt == (item.entry.attempts + 1 >= settings.maxAttempts))
                }
            }
            if let wake = step.wakeAt { wakeAt = min(wakeAt ?? wake, wake) }
            #expect(readInFlight != nil || !batchesInFlight.isEmpty || wakeAt != nil, "nothing to wait for")

            // Something happens: a read answers, a batch ends, or time passes.
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<3 where readInFlight != nil:
                let count = min(readInFlight!.max, unread.isEmpty ? 0 : Int.random(in: 0...unread.count, using: &random))
                schedule.received(Array(unread.prefix(count)))
                unread.removeFirst(count)
                readInFlight = nil
            case 3..<8 where !batchesInFlight.isEmpty:
                let batch = batchesInFlight.remove(at: Int.random(in: 0..<batchesInFlight.count, using: &random))
                if Int.random(in: 0..<10, using: &random) == 0 { storeIsDown.toggle() }
                if storeIsDown {
                    _ = schedule.batchFailed(batch.id, now: now)
                    continue
                }
                // The store's contract: behind a failure its conversation is deferred; a final failure dead-letters.
                var blocked = Set<String>()
                let results: [ProcessingResult] = batch.items.map { item in
                    let entry = item.entry
                    if blocked.contains(entry.message.conversationId) { return .deferred }
                    if finished.contains(entry.id) { return .alreadyStored(seq: 0) }
                    if Int.random(in: 0..<4, using: &random) == 0 {
                        if item.isFinalAttempt {
                            deadLettered.insert(entry.id)
                            finished.insert(entry.id)
                            return .deadLettered(TestError())
                        }
                        blocked.insert(entry.message.conversationId)
                        attemptsByEntry[entry.id, default: 0] += 1
                        return .failed(TestError())
                    }
                    stored[entry.message.conversationId, default: []].append(entry.id)
                    finished.insert(entry.id)
                    return .stored(seq: 0)
                }
                let heldBefore = schedule.held
                let retries = schedule.batchFinished(batch.id, results: results, now: now)
                let ended = Schedule.finishedEntryIds(batch.items, results)
                #expect(Set(ended) == Set(batch.items.map(\.entry.id)).intersection(finished))
                #expect(schedule.held == heldBefore - ended.count)
                #expect(retries.map(\.entry.id) == batch.items.indices.filter { if case .failed = results[$0] { true } else { false } }.map { batch.items[$0].entry.id })
            default:
                // A little time passes, up to the next wake-up asked for.
                let later = now + .milliseconds(Int.random(in: 1...300, using: &random))
                if let wake = wakeAt, wake <= later {
                    now = wake
                    wakeAt = nil
                } else {
                    now = later
                }
            }
        }
        #expect(finished.count == appendOrder.count, "every entry ends (seed \(seed))")
        #expect(schedule.held == 0)
        for conversation in conversations {
            let expected = appendOrder.filter { id in
                !deadLettered.contains(id) && stored[conversation]?.contains(id) == true
            }
            #expect(stored[conversation, default: []] == expected, "conversation \(conversation) in buffer order (seed \(seed))")
        }
    }

    struct TestError: Error {}
}

/// A small deterministic generator (SplitMix64), so a failing seed can be replayed.
struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE5_E4B9
        z = (z ^ (z >> 27)) &* 0x94D4_9BB4_9133_11EB
        return z ^ (z >> 31)
    }
}
