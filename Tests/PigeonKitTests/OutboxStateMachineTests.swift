import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The outbox's pure parts, driven directly without a network or a clock: one item's lifecycle (`OutboxItem`),
/// the per-conversation line (`OutboxQueue`), the backoff (`RetryPolicy`, `ReconnectBackoff`) and the tick rules
/// (`MessageStatus.applying`, the status table of docs/ARCHITECTURE.md). Time is an `ElapsedClock.Instant` plus
/// durations; nothing sleeps.
@Suite struct OutboxStateMachineTests {
    static let policy = RetryPolicy()
    static let overloaded = ErrorDetail(code: .overloaded, message: "the ingest buffer is full")
    static let invalid = ErrorDetail(code: .invalidRequest, message: "body is empty")

    static func item(_ localId: Int64, in conversationId: String = "c1", attempts: Int = 0) -> OutboxItem {
        OutboxItem(localId: localId, conversationId: conversationId, clientMessageId: "cmid-\(localId)", attempts: attempts)
    }

    /// An item dispatched at `now`.
    static func inFlight(_ localId: Int64 = 1, at now: ElapsedClock.Instant, policy: RetryPolicy = policy) -> OutboxItem {
        var item = item(localId)
        let action = item.dispatch(now: now, policy: policy)
        #expect(action == .send)
        return item
    }
}

// MARK: - OutboxItem

extension OutboxStateMachineTests {
    @Suite struct Item {
        let t0 = ElapsedClock.Instant(sinceStart: .zero)
        let policy = OutboxStateMachineTests.policy

        @Test func aNewItemIsQueuedWithoutBackoffAndDue() {
            let item = OutboxStateMachineTests.item(1)
            #expect(item.state == .queued(notBefore: nil))
            #expect(item.attempts == 0)
            #expect(item.isDue(at: t0))
            #expect(!item.isInFlight)
            #expect(!item.isFailed)
        }

        @Test func dispatchPutsItInFlightWithTheAckDeadline() {
            var item = OutboxStateMachineTests.item(1)
            #expect(item.dispatch(now: t0, policy: policy) == .send)
            #expect(item.state == .inFlight(since: t0, deadline: t0 + .seconds(10)))
            #expect(item.isInFlight)
            #expect(!item.isDue(at: t0 + .seconds(100)))
            #expect(item.attempts == 0, "a dispatch is not a try; only its failure is")
        }

        @Test func theDeadlineFollowsTheConfiguredAckTimeout() {
            var item = OutboxStateMachineTests.item(1)
            let quick = RetryPolicy(ackTimeout: .milliseconds(250))
            #expect(item.dispatch(now: t0, policy: quick) == .send)
            #expect(item.state == .inFlight(since: t0, deadline: t0 + .milliseconds(250)))
        }

        @Test func dispatchingAnItemAlreadyInFlightDoesNothing() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let before = item
            #expect(item.dispatch(now: t0 + .seconds(1), policy: policy) == .none)
            #expect(item == before)
        }

        @Test func dispatchingBeforeTheBackoffEndsDoesNothing() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            guard case .retryLater(let next) = item.transientFailure(
                OutboxStateMachineTests.overloaded, retryAfter: nil, now: t0 + .seconds(1), policy: policy, jitter: 1)
            else {
                Issue.record("a first transient failure must back off")
                return
            }
            #expect(item.dispatch(now: next - .milliseconds(1), policy: policy) == .none)
            #expect(item.state == .queued(notBefore: next))
            #expect(item.dispatch(now: next, policy: policy) == .send)
            #expect(item.state == .inFlight(since: next, deadline: next + .seconds(10)))
        }

        @Test func aFailedItemIsNotDispatched() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            _ = item.refused(OutboxStateMachineTests.invalid)
            #expect(item.dispatch(now: t0 + .seconds(3600), policy: policy) == .none)
            #expect(item.isFailed)
        }

        @Test func acceptedCompletesFromEveryState() {
            var queued = OutboxStateMachineTests.item(1)
            #expect(queued.accepted() == .complete)

            var inFlight = OutboxStateMachineTests.inFlight(at: t0)
            #expect(inFlight.accepted() == .complete)

            var backingOff = OutboxStateMachineTests.inFlight(at: t0)
            _ = backingOff.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0.5)
            #expect(!backingOff.isDue(at: t0 + .seconds(10)))
            #expect(backingOff.accepted() == .complete, "a late answer to the try that timed out still counts")

            var refused = OutboxStateMachineTests.inFlight(at: t0)
            _ = refused.refused(OutboxStateMachineTests.invalid)
            #expect(refused.accepted() == .complete)

            var spent = OutboxStateMachineTests.item(1, attempts: 2)
            _ = spent.dispatch(now: t0, policy: policy)
            _ = spent.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0)
            #expect(spent.isFailed)
            #expect(spent.accepted() == .complete, "an ack after the tries were spent proves the server has it")
        }

        @Test func noTimeoutBeforeTheDeadline() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let before = item
            #expect(item.ackTimedOut(now: t0, policy: policy, jitter: 0) == .none)
            #expect(item.ackTimedOut(now: t0 + .seconds(10) - .nanoseconds(1), policy: policy, jitter: 0) == .none)
            #expect(item == before)
            #expect(item.attempts == 0)
        }

        @Test func anAckTimeoutCountsATryAndBacksOff() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let deadline = t0 + .seconds(10)
            // The first backoff is baseDelay (1 s) with equal jitter: 0.5 s at jitter 0.
            #expect(item.ackTimedOut(now: deadline, policy: policy, jitter: 0) == .retryLater(deadline + .milliseconds(500)))
            #expect(item.attempts == 1)
            #expect(item.state == .queued(notBefore: deadline + .milliseconds(500)))
            #expect(!item.isDue(at: deadline))
            #expect(item.isDue(at: deadline + .milliseconds(500)))
        }

        @Test func theBackoffInstantUsesTheJitter() {
            let late = t0 + .seconds(12)
            var none = OutboxStateMachineTests.inFlight(at: t0)
            #expect(none.ackTimedOut(now: late, policy: policy, jitter: 0) == .retryLater(late + .milliseconds(500)))
            var full = OutboxStateMachineTests.inFlight(at: t0)
            #expect(full.ackTimedOut(now: late, policy: policy, jitter: 1) == .retryLater(late + .seconds(1)))
            var half = OutboxStateMachineTests.inFlight(at: t0)
            #expect(half.ackTimedOut(now: late, policy: policy, jitter: 0.5) == .retryLater(late + .milliseconds(750)))
        }

        @Test func anAckTimeoutOfAnItemNotInFlightDoesNothing() {
            var queued = OutboxStateMachineTests.item(1)
            #expect(queued.ackTimedOut(now: t0 + .seconds(3600), policy: policy, jitter: 0) == .none)
            #expect(queued.attempts == 0)
            #expect(queued.state == .queued(notBefore: nil))

            var failed = OutboxStateMachineTests.inFlight(at: t0)
            _ = failed.refused(OutboxStateMachineTests.invalid)
            #expect(failed.ackTimedOut(now: t0 + .seconds(3600), policy: policy, jitter: 0) == .none)
            #expect(failed.state == .failed(OutboxStateMachineTests.invalid))
        }

        @Test func threeTimeoutsFailTheItem() {
            var item = OutboxStateMachineTests.item(1)
            var now = t0
            var backoffs: [Duration] = []
            for attempt in 1...2 {
                #expect(item.dispatch(now: now, policy: policy) == .send)
                now += .seconds(10)
                guard case .retryLater(let next) = item.ackTimedOut(now: now, policy: policy, jitter: 1) else {
                    Issue.record("try \(attempt) of 3 must back off, not fail")
                    return
                }
                #expect(item.attempts == attempt)
                backoffs.append(next - now)
                now = next
            }
            #expect(backoffs == [.seconds(1), .seconds(2)], "exponential: 1 s, then 2 s at jitter 1")
            #expect(item.dispatch(now: now, policy: policy) == .send)
            let action = item.ackTimedOut(now: now + .seconds(10), policy: policy, jitter: 1)
            guard case .fail(let reason) = action else {
                Issue.record("the third timeout must fail the item, got \(action)")
                return
            }
            #expect(reason.code == .internalError)
            #expect(reason.message.contains("3 tries"))
            #expect(item.state == .failed(reason))
            #expect(item.attempts == 3)
            #expect(item.isFailed)
            #expect(!item.isDue(at: now + .seconds(3600)))
        }

        @Test(arguments: [1, 2, 5])
        func maxAttemptsIsHonoured(maxAttempts: Int) {
            let policy = RetryPolicy(maxAttempts: maxAttempts)
            var item = OutboxStateMachineTests.item(1)
            var now = t0
            for attempt in 1...maxAttempts {
                #expect(item.dispatch(now: now, policy: policy) == .send)
                now += policy.ackTimeout
                let action = item.ackTimedOut(now: now, policy: policy, jitter: 0)
                if attempt < maxAttempts {
                    guard case .retryLater(let next) = action else {
                        Issue.record("try \(attempt) of \(maxAttempts) must back off, got \(action)")
                        return
                    }
                    now = next
                } else {
                    guard case .fail = action else {
                        Issue.record("try \(attempt) of \(maxAttempts) must fail, got \(action)")
                        return
                    }
                }
            }
            #expect(item.isFailed)
            #expect(item.attempts == maxAttempts)
        }

        @Test func triesCountedBeforeARestartAreKept() {
            // The outbox is reloaded on start with the tries it had; one more timeout then spends the third.
            var item = OutboxStateMachineTests.item(1, attempts: 2)
            _ = item.dispatch(now: t0, policy: policy)
            guard case .fail = item.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0) else {
                Issue.record("a reloaded item with 2 tries must fail on its third")
                return
            }
            #expect(item.attempts == 3)
        }

        @Test func aTransientFailureCountsATryAndBacksOff() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let now = t0 + .milliseconds(80)
            #expect(
                item.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: nil, now: now, policy: policy, jitter: 0)
                    == .retryLater(now + .milliseconds(500)))
            #expect(item.attempts == 1)
            #expect(item.state == .queued(notBefore: now + .milliseconds(500)))
        }

        @Test func aLongerRetryAfterWinsOverTheBackoff() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let now = t0 + .milliseconds(80)
            #expect(
                item.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: .seconds(30), now: now, policy: policy, jitter: 1)
                    == .retryLater(now + .seconds(30)))
            #expect(item.state == .queued(notBefore: now + .seconds(30)))
            #expect(!item.isDue(at: now + .seconds(29)))
            #expect(item.isDue(at: now + .seconds(30)))
        }

        @Test func aShorterRetryAfterKeepsTheBackoff() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let now = t0 + .milliseconds(80)
            #expect(
                item.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: .milliseconds(100), now: now, policy: policy, jitter: 1)
                    == .retryLater(now + .seconds(1)))
        }

        @Test func transientFailuresFailWithTheServersReasonAfterMaxAttempts() {
            var item = OutboxStateMachineTests.item(1)
            var now = t0
            var actions: [OutboxItem.Action] = []
            for _ in 1...3 {
                #expect(item.dispatch(now: now, policy: policy) == .send)
                now += .milliseconds(50)
                let action = item.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: .seconds(2), now: now, policy: policy, jitter: 0)
                actions.append(action)
                if case .retryLater(let next) = action { now = next }
            }
            #expect(actions.count == 3)
            #expect(actions.last == .fail(OutboxStateMachineTests.overloaded))
            #expect(item.state == .failed(OutboxStateMachineTests.overloaded))
            #expect(item.attempts == 3)
        }

        @Test func mixedTimeoutsAndTransientFailuresShareTheTries() {
            var item = OutboxStateMachineTests.item(1)
            _ = item.dispatch(now: t0, policy: policy)
            guard case .retryLater(let next) = item.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0) else {
                Issue.record("first try must back off")
                return
            }
            _ = item.dispatch(now: next, policy: policy)
            guard case .retryLater(let after) = item.transientFailure(
                OutboxStateMachineTests.overloaded, retryAfter: nil, now: next + .seconds(1), policy: policy, jitter: 0)
            else {
                Issue.record("second try must back off")
                return
            }
            _ = item.dispatch(now: after, policy: policy)
            #expect(item.ackTimedOut(now: after + .seconds(10), policy: policy, jitter: 0) != .none)
            #expect(item.isFailed)
            #expect(item.attempts == 3)
        }

        @Test func aTransientFailureOfAnItemNotInFlightDoesNothing() {
            var item = OutboxStateMachineTests.item(1)
            #expect(item.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: nil, now: t0, policy: policy, jitter: 0) == .none)
            #expect(item.attempts == 0)
            #expect(item.state == .queued(notBefore: nil))
        }

        @Test func aRefusalFailsAtOnce() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            #expect(item.refused(OutboxStateMachineTests.invalid) == .fail(OutboxStateMachineTests.invalid))
            #expect(item.state == .failed(OutboxStateMachineTests.invalid))
            #expect(item.isFailed)
            #expect(item.attempts == 0, "a 4xx is not a try that could succeed later")
        }

        @Test(arguments: [ErrorCode.invalidRequest, .notFound, .payloadTooLarge])
        func everyValidationRefusalFailsOnTheFirstTry(code: ErrorCode) {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            let reason = ErrorDetail(code: code, message: "refused")
            #expect(item.refused(reason) == .fail(reason))
            #expect(item.isFailed)
        }

        @Test func aRefusalOfAnItemNotInFlightIsIgnored() {
            var item = OutboxStateMachineTests.item(1)
            #expect(item.refused(OutboxStateMachineTests.invalid) == .none)
            #expect(item.state == .queued(notBefore: nil))
        }

        @Test func aLostConnectionRequeuesWithoutCountingATry() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            #expect(item.connectionLost() == .none)
            #expect(item.state == .queued(notBefore: nil))
            #expect(item.attempts == 0)
            #expect(item.isDue(at: t0), "resent as soon as the client is online again")
        }

        @Test func aLostConnectionKeepsTheTriesAlreadyCounted() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            guard case .retryLater(let next) = item.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0) else {
                Issue.record("first timeout must back off")
                return
            }
            _ = item.dispatch(now: next, policy: policy)
            _ = item.connectionLost()
            #expect(item.attempts == 1)
            #expect(item.state == .queued(notBefore: nil))
        }

        @Test func anyNumberOfLostConnectionsNeverFailsAnItem() {
            var item = OutboxStateMachineTests.item(1)
            var now = t0
            for _ in 0..<50 {
                #expect(item.dispatch(now: now, policy: policy) == .send)
                #expect(item.connectionLost() == .none)
                now += .seconds(1)
            }
            #expect(item.attempts == 0)
            #expect(!item.isFailed)
        }

        @Test func aLostConnectionLeavesQueuedAndFailedItemsAlone() {
            var backingOff = OutboxStateMachineTests.inFlight(at: t0)
            _ = backingOff.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0)
            let before = backingOff
            #expect(backingOff.connectionLost() == .none)
            #expect(backingOff == before, "the backoff is kept")

            var failed = OutboxStateMachineTests.inFlight(at: t0)
            _ = failed.refused(OutboxStateMachineTests.invalid)
            #expect(failed.connectionLost() == .none)
            #expect(failed.isFailed)
        }

        @Test func retryWorksOnlyOnAFailedItem() {
            var queued = OutboxStateMachineTests.item(1)
            #expect(queued.retry() == false)
            #expect(queued.state == .queued(notBefore: nil))

            var inFlight = OutboxStateMachineTests.inFlight(at: t0)
            #expect(inFlight.retry() == false)
            #expect(inFlight.isInFlight)

            var backingOff = OutboxStateMachineTests.inFlight(at: t0)
            _ = backingOff.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0)
            let before = backingOff
            #expect(backingOff.retry() == false)
            #expect(backingOff == before, "retry does not skip a backoff nor reset the tries")
        }

        @Test func retryStartsAFailedItemOverWithFreshTries() {
            var item = OutboxStateMachineTests.item(1, attempts: 2)
            _ = item.dispatch(now: t0, policy: policy)
            _ = item.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0)
            #expect(item.isFailed)
            #expect(item.retry() == true)
            #expect(item.attempts == 0)
            #expect(item.state == .queued(notBefore: nil))
            #expect(item.isDue(at: t0 + .seconds(10)))

            // Three fresh tries before it fails again.
            var now = t0 + .seconds(10)
            var results: [OutboxItem.Action] = []
            for _ in 1...3 {
                _ = item.dispatch(now: now, policy: policy)
                now += .seconds(10)
                let action = item.ackTimedOut(now: now, policy: policy, jitter: 0)
                results.append(action)
                if case .retryLater(let next) = action { now = next }
            }
            #expect(results.filter { if case .retryLater = $0 { true } else { false } }.count == 2)
            #expect(item.isFailed)
        }

        @Test func retryAfterARefusalQueuesTheItemAgain() {
            var item = OutboxStateMachineTests.inFlight(at: t0)
            _ = item.refused(OutboxStateMachineTests.invalid)
            #expect(item.retry() == true)
            #expect(item.dispatch(now: t0, policy: policy) == .send)
        }

        @Test func isDueRespectsNotBefore() {
            let notBefore = t0 + .seconds(5)
            let item = OutboxItem(localId: 1, conversationId: "c1", clientMessageId: "m", state: .queued(notBefore: notBefore))
            #expect(!item.isDue(at: t0))
            #expect(!item.isDue(at: notBefore - .nanoseconds(1)))
            #expect(item.isDue(at: notBefore))
            #expect(item.isDue(at: notBefore + .seconds(1)))

            let inFlight = OutboxItem(localId: 1, conversationId: "c1", clientMessageId: "m", state: .inFlight(since: t0, deadline: t0 + .seconds(10)))
            #expect(!inFlight.isDue(at: t0 + .seconds(60)))
            let failed = OutboxItem(localId: 1, conversationId: "c1", clientMessageId: "m", state: .failed(OutboxStateMachineTests.invalid))
            #expect(!failed.isDue(at: t0 + .seconds(60)))
        }
    }
}

// MARK: - OutboxQueue

extension OutboxStateMachineTests {
    @Suite struct Queue {
        let t0 = ElapsedClock.Instant(sinceStart: .zero)
        let policy = OutboxStateMachineTests.policy

        func item(_ localId: Int64, in conversationId: String = "c1", attempts: Int = 0) -> OutboxItem {
            OutboxStateMachineTests.item(localId, in: conversationId, attempts: attempts)
        }

        func makeQueue(_ items: OutboxItem...) -> OutboxQueue {
            var queue = OutboxQueue()
            for item in items { queue.add(item) }
            return queue
        }

        func ids(_ items: [OutboxItem]) -> [Int64] { items.map(\.localId) }

        @Test func anEmptyQueueHasNothingToDo() {
            var queue = OutboxQueue()
            #expect(queue.isEmpty)
            #expect(queue.count == 0)
            #expect(queue.dispatchDue(now: t0, policy: policy).isEmpty)
            #expect(queue.timedOut(now: t0 + .seconds(3600)).isEmpty)
            #expect(queue.nextWakeUp(after: t0) == nil)
            #expect(queue.remove(1) == nil)
            #expect(queue.item(clientMessageId: "cmid-1") == nil)
            let action = queue.update(1) { $0.accepted() }
            #expect(action == .none, "an unknown item has no action")
        }

        @Test func onlyTheHeadOfAConversationsLineIsDispatched() {
            var queue = makeQueue(item(1), item(2), item(3))
            #expect(queue.count == 3)
            let first = queue.dispatchDue(now: t0, policy: policy)
            #expect(ids(first) == [1])
            #expect(first.first?.state == .inFlight(since: t0, deadline: t0 + .seconds(10)))
            #expect(queue.items[1]?.isInFlight == true)
            #expect(queue.items[2]?.state == .queued(notBefore: nil))
            #expect(queue.items[3]?.state == .queued(notBefore: nil))
            #expect(queue.dispatchDue(now: t0 + .seconds(1), policy: policy).isEmpty, "nothing else goes while the head is in flight")
        }

        @Test func theNextGoesOnceTheHeadIsAccepted() {
            var queue = makeQueue(item(1), item(2), item(3))
            _ = queue.dispatchDue(now: t0, policy: policy)
            let action = queue.update(1) { $0.accepted() }
            #expect(action == .complete)
            #expect(queue.remove(1)?.localId == 1)
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [2])
            _ = queue.remove(2)
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [3])
            _ = queue.remove(3)
            #expect(queue.isEmpty)
            #expect(queue.dispatchDue(now: t0, policy: policy).isEmpty)
        }

        @Test func nothingOvertakesAHeadThatIsBackingOff() {
            var queue = makeQueue(item(1), item(2))
            _ = queue.dispatchDue(now: t0, policy: policy)
            let action = queue.update(1) {
                $0.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: .seconds(5), now: t0 + .milliseconds(10), policy: policy, jitter: 0)
            }
            #expect(action == .retryLater(t0 + .milliseconds(10) + .seconds(5)))
            #expect(queue.dispatchDue(now: t0 + .seconds(1), policy: policy).isEmpty, "2 must not overtake 1 during its backoff")
            #expect(queue.items[2]?.state == .queued(notBefore: nil))
            let resumed = queue.dispatchDue(now: t0 + .milliseconds(10) + .seconds(5), policy: policy)
            #expect(ids(resumed) == [1])
        }

        @Test func nothingOvertakesAHeadWhoseAckTimedOut() {
            var queue = makeQueue(item(1), item(2))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.update(1) { $0.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 1) }
            #expect(queue.dispatchDue(now: t0 + .seconds(10), policy: policy).isEmpty)
            #expect(ids(queue.dispatchDue(now: t0 + .seconds(11), policy: policy)) == [1])
        }

        @Test func itemsAddedOutOfOrderAreDispatchedInLocalIdOrder() {
            var queue = makeQueue(item(7), item(3), item(9), item(5))
            var sent: [Int64] = []
            while !queue.isEmpty {
                let due = queue.dispatchDue(now: t0, policy: policy)
                #expect(due.count == 1)
                guard let head = due.first else { break }
                sent.append(head.localId)
                _ = queue.remove(head.localId)
            }
            #expect(sent == [3, 5, 7, 9])
        }

        @Test func addingAnItemTwiceKeepsTheFirst() {
            var queue = makeQueue(item(1))
            _ = queue.dispatchDue(now: t0, policy: policy)
            queue.add(item(1))
            #expect(queue.count == 1)
            #expect(queue.items[1]?.isInFlight == true, "a duplicate add does not reset an item on the wire")
            _ = queue.remove(1)
            #expect(queue.dispatchDue(now: t0, policy: policy).isEmpty, "the id is not left in the line twice")
        }

        @Test func differentConversationsDispatchInParallel() {
            var queue = makeQueue(item(1, in: "a"), item(2, in: "b"), item(3, in: "a"), item(4, in: "b"), item(5, in: "c"))
            let due = queue.dispatchDue(now: t0, policy: policy)
            #expect(ids(due) == [1, 2, 5], "one head per conversation, sorted by localId")
            #expect(queue.dispatchDue(now: t0, policy: policy).isEmpty)
            _ = queue.remove(2)
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [4], "b moves on while a is still in flight")
        }

        @Test func aBackoffInOneConversationDoesNotHoldAnother() {
            var queue = makeQueue(item(1, in: "a"), item(2, in: "a"), item(3, in: "b"))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.update(1) { $0.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: nil, now: t0, policy: policy, jitter: 1) }
            _ = queue.remove(3)
            queue.add(item(4, in: "b"))
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [4])
        }

        @Test func aFailedItemStepsOutOfTheLine() {
            var queue = makeQueue(item(1), item(2), item(3))
            _ = queue.dispatchDue(now: t0, policy: policy)
            let action = queue.update(1) { $0.refused(OutboxStateMachineTests.invalid) }
            #expect(action == .fail(OutboxStateMachineTests.invalid))
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [2])
            #expect(queue.count == 3, "the failed item stays until it is retried or removed")
            #expect(queue.items[1]?.isFailed == true)
        }

        @Test func anItemWhoseTriesAreSpentStepsOutOfTheLine() {
            var queue = makeQueue(item(1, attempts: 2), item(2))
            _ = queue.dispatchDue(now: t0, policy: policy)
            let action = queue.update(1) { $0.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0) }
            guard case .fail = action else {
                Issue.record("the third try must fail, got \(action)")
                return
            }
            #expect(ids(queue.dispatchDue(now: t0 + .seconds(10), policy: policy)) == [2])
        }

        @Test func aLineOfFailedItemsDispatchesNothing() {
            var queue = makeQueue(item(1), item(2))
            for id: Int64 in [1, 2] {
                _ = queue.dispatchDue(now: t0, policy: policy)
                _ = queue.update(id) { $0.refused(OutboxStateMachineTests.invalid) }
            }
            #expect(queue.dispatchDue(now: t0, policy: policy).isEmpty)
            #expect(queue.nextWakeUp(after: t0) == nil, "failed items wait for the app, not for a clock")
        }

        @Test func aRetriedItemGoesAgainWhenTheLineIsFree() {
            var queue = makeQueue(item(1), item(2))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.update(1) { $0.refused(OutboxStateMachineTests.invalid) }
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.remove(2)
            var retried = false
            _ = queue.update(1) {
                retried = $0.retry()
                return .none
            }
            #expect(retried)
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [1])
        }

        // Regression: only the line's head used to be checked, so a failed head retried while the item that stepped
        // past it was still in flight went on the wire beside it (two of one conversation at once).
        @Test func aRetriedItemWaitsWhileALaterOneOfItsConversationIsInFlight() {
            var queue = makeQueue(item(1), item(2))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.update(1) { $0.refused(OutboxStateMachineTests.invalid) }
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [2])
            var retried = false
            _ = queue.update(1) {
                retried = $0.retry()
                return .none
            }
            #expect(retried)
            #expect(queue.dispatchDue(now: t0 + .seconds(1), policy: policy).isEmpty, "2 is in flight: nothing else of c1 may go")
            #expect(queue.items.values.filter(\.isInFlight).count == 1)
        }

        @Test func timedOutListsOnlyItemsPastTheirDeadline() {
            var queue = makeQueue(item(1, in: "a"), item(2, in: "b"), item(3, in: "c"))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.remove(3)
            queue.add(item(4, in: "c"))
            _ = queue.dispatchDue(now: t0 + .seconds(5), policy: policy)
            #expect(queue.timedOut(now: t0 + .seconds(9)).isEmpty)
            #expect(queue.timedOut(now: t0 + .seconds(10)) == [1, 2])
            #expect(queue.timedOut(now: t0 + .seconds(15)) == [1, 2, 4])
            _ = queue.update(1) { $0.ackTimedOut(now: t0 + .seconds(10), policy: policy, jitter: 0) }
            #expect(queue.timedOut(now: t0 + .seconds(15)) == [2, 4], "a backing-off item is no longer in flight")
        }

        @Test func aLostConnectionRequeuesEveryItemInFlight() {
            var queue = makeQueue(item(1, in: "a"), item(2, in: "a"), item(3, in: "b"), item(4, in: "c"))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.update(4) { $0.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: .seconds(20), now: t0, policy: policy, jitter: 0) }
            queue.connectionLost()
            #expect(queue.items.values.allSatisfy { !$0.isInFlight })
            #expect(queue.items[1]?.state == .queued(notBefore: nil))
            #expect(queue.items[3]?.state == .queued(notBefore: nil))
            #expect(queue.items[1]?.attempts == 0)
            #expect(queue.items[4]?.state == .queued(notBefore: t0 + .seconds(20)), "a backoff survives the reconnect")
            #expect(queue.items[4]?.attempts == 1)
            #expect(queue.timedOut(now: t0 + .seconds(3600)).isEmpty)
            // On reconnect the in-flight items are resent, still one head per conversation.
            #expect(ids(queue.dispatchDue(now: t0 + .seconds(1), policy: policy)) == [1, 3])
        }

        @Test func nextWakeUpIsTheEarliestDeadlineOrBackoffEnd() {
            var queue = makeQueue(item(1, in: "a"), item(2, in: "b"))
            #expect(queue.nextWakeUp(after: t0) == nil, "queued items without a backoff are due now, not later")
            _ = queue.dispatchDue(now: t0, policy: policy)
            #expect(queue.nextWakeUp(after: t0) == t0 + .seconds(10))
            _ = queue.update(2) { $0.transientFailure(OutboxStateMachineTests.overloaded, retryAfter: .seconds(3), now: t0 + .seconds(1), policy: policy, jitter: 0) }
            #expect(queue.nextWakeUp(after: t0) == t0 + .seconds(4))
            _ = queue.update(2) { $0.accepted() }
            _ = queue.remove(2)
            #expect(queue.nextWakeUp(after: t0) == t0 + .seconds(10))
            _ = queue.update(1) { $0.refused(OutboxStateMachineTests.invalid) }
            #expect(queue.nextWakeUp(after: t0) == nil)
        }

        @Test func removeTakesAnItemOutOfItsLine() {
            var queue = makeQueue(item(1), item(2), item(3, in: "b"))
            let removed = queue.remove(2)
            #expect(removed?.localId == 2)
            #expect(removed?.clientMessageId == "cmid-2")
            #expect(queue.count == 2)
            #expect(queue.remove(2) == nil)
            #expect(queue.items[2] == nil)
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.remove(1)
            #expect(queue.dispatchDue(now: t0, policy: policy).isEmpty, "the removed item 2 is not dispatched")
            _ = queue.remove(3)
            #expect(queue.isEmpty)
            queue.add(item(4))
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [4], "an emptied line starts again")
        }

        @Test func removingTheHeadInFlightFreesTheLine() {
            var queue = makeQueue(item(1), item(2))
            _ = queue.dispatchDue(now: t0, policy: policy)
            _ = queue.remove(1)
            #expect(ids(queue.dispatchDue(now: t0, policy: policy)) == [2])
        }

        @Test func itemIsFoundByClientMessageId() {
            var queue = makeQueue(item(1), item(2, in: "b"))
            #expect(queue.item(clientMessageId: "cmid-2")?.localId == 2)
            #expect(queue.item(clientMessageId: "cmid-2")?.conversationId == "b")
            #expect(queue.item(clientMessageId: "cmid-3") == nil)
            _ = queue.dispatchDue(now: t0, policy: policy)
            #expect(queue.item(clientMessageId: "cmid-1")?.isInFlight == true, "it returns the current state")
            _ = queue.remove(1)
            #expect(queue.item(clientMessageId: "cmid-1") == nil)
        }

        @Test func updateStoresTheChangedItem() {
            var queue = makeQueue(item(1))
            let action = queue.update(1) { $0.dispatch(now: t0, policy: policy) }
            #expect(action == .send)
            #expect(queue.items[1]?.state == .inFlight(since: t0, deadline: t0 + .seconds(10)))
        }
    }
}

// MARK: - RetryPolicy and ReconnectBackoff

extension OutboxStateMachineTests {
    @Suite struct Backoff {
        @Test func theDefaultsAreDesignMds() {
            let policy = RetryPolicy()
            #expect(policy.maxAttempts == 3)
            #expect(policy.ackTimeout == .seconds(10))
            #expect(policy.baseDelay == .seconds(1))
            #expect(policy.maxDelay == .seconds(60))
        }

        @Test func equalJitterGivesHalfToAllOfTheDelay() {
            let policy = RetryPolicy()
            #expect(policy.delay(afterAttempt: 1, jitter: 0) == .milliseconds(500))
            #expect(policy.delay(afterAttempt: 1, jitter: 0.5) == .milliseconds(750))
            #expect(policy.delay(afterAttempt: 1, jitter: 1) == .seconds(1))
            #expect(policy.delay(afterAttempt: 3, jitter: 0) == .seconds(2))
            #expect(policy.delay(afterAttempt: 3, jitter: 1) == .seconds(4))
        }

        @Test func theDelayDoublesUpToTheCap() {
            let policy = RetryPolicy()
            let full = (1...9).map { policy.delay(afterAttempt: $0, jitter: 1) }
            #expect(full == [1, 2, 4, 8, 16, 32, 60, 60, 60].map { Duration.seconds($0) })
            let half = (1...9).map { policy.delay(afterAttempt: $0, jitter: 0) }
            #expect(half == [0.5, 1, 2, 4, 8, 16, 30, 30, 30].map { Duration.seconds($0) })
        }

        @Test func aCustomPolicyScales() {
            let policy = RetryPolicy(baseDelay: .milliseconds(200), maxDelay: .seconds(1))
            let full = (1...5).map { policy.delay(afterAttempt: $0, jitter: 1) }
            #expect(full == [200, 400, 800, 1000, 1000].map { Duration.milliseconds($0) })
        }

        @Test func everyDelayStaysWithinHalfAndAllOfTheCappedDelay() {
            let policy = RetryPolicy()
            for attempt in 1...40 {
                let capped = min(Duration.seconds(1) * (1 << min(attempt - 1, 30)), .seconds(60))
                var previous = Duration.zero
                for step in 0...20 {
                    let jitter = Double(step) / 20
                    let delay = policy.delay(afterAttempt: attempt, jitter: jitter)
                    #expect(delay >= capped / 2 && delay <= capped, "attempt \(attempt), jitter \(jitter): \(delay)")
                    #expect(delay >= previous, "more jitter never waits less")
                    previous = delay
                }
            }
        }

        @Test func hugeAttemptCountsStayCapped() {
            let policy = RetryPolicy()
            for attempt in [31, 62, 63, 64, 1000, Int.max] {
                #expect(policy.delay(afterAttempt: attempt, jitter: 1) == .seconds(60))
                #expect(policy.delay(afterAttempt: attempt, jitter: 0) == .seconds(30))
            }
        }

        @Test func attemptZeroOrLessWaitsTheBaseDelay() {
            let policy = RetryPolicy()
            #expect(policy.delay(afterAttempt: 0, jitter: 1) == .seconds(1))
            #expect(policy.delay(afterAttempt: -3, jitter: 1) == .seconds(1))
        }

        @Test func jitterOutsideZeroToOneIsClamped() {
            let policy = RetryPolicy()
            #expect(policy.delay(afterAttempt: 2, jitter: -5) == policy.delay(afterAttempt: 2, jitter: 0))
            #expect(policy.delay(afterAttempt: 2, jitter: 7) == policy.delay(afterAttempt: 2, jitter: 1))
        }

        @Test func retryAfterWinsOnlyWhenLonger() {
            let policy = RetryPolicy()
            #expect(policy.delay(afterAttempt: 1, jitter: 1, retryAfter: .seconds(5)) == .seconds(5))
            #expect(policy.delay(afterAttempt: 1, jitter: 1, retryAfter: .milliseconds(300)) == .seconds(1))
            #expect(policy.delay(afterAttempt: 1, jitter: 1, retryAfter: .seconds(1)) == .seconds(1))
            #expect(policy.delay(afterAttempt: 1, jitter: 0, retryAfter: .zero) == .milliseconds(500))
            #expect(policy.delay(afterAttempt: 10, jitter: 1, retryAfter: .seconds(120)) == .seconds(120), "the server's word beats the cap")
        }

        @Test func theReconnectBackoffDoublesUpToItsMax() {
            var backoff = ReconnectBackoff(base: .milliseconds(250), max: .seconds(4))
            #expect(backoff.failures == 0)
            let full = (0..<8).map { _ in backoff.nextDelay(jitter: 1) }
            #expect(full == [250, 500, 1000, 2000, 4000, 4000, 4000, 4000].map { Duration.milliseconds($0) })
            #expect(backoff.failures == 8)
        }

        @Test func theReconnectBackoffUsesEqualJitter() {
            var none = ReconnectBackoff(base: .seconds(1), max: .seconds(30))
            #expect(none.nextDelay(jitter: 0) == .milliseconds(500))
            #expect(none.nextDelay(jitter: 0) == .seconds(1))
            var half = ReconnectBackoff(base: .seconds(1), max: .seconds(30))
            #expect(half.nextDelay(jitter: 0.5) == .milliseconds(750))
            var clamped = ReconnectBackoff(base: .seconds(1), max: .seconds(30))
            #expect(clamped.nextDelay(jitter: 3) == .seconds(1))
            #expect(clamped.nextDelay(jitter: -3) == .seconds(1))
        }

        @Test func theReconnectBackoffResets() {
            var backoff = ReconnectBackoff(base: .seconds(1), max: .seconds(30))
            for _ in 0..<5 { _ = backoff.nextDelay(jitter: 1) }
            #expect(backoff.nextDelay(jitter: 1) == .seconds(30))
            backoff.reset()
            #expect(backoff.failures == 0)
            #expect(backoff.nextDelay(jitter: 1) == .seconds(1))
            #expect(backoff.nextDelay(jitter: 1) == .seconds(2))
        }

        @Test func aLongOutageNeitherOverflowsNorExceedsTheMax() {
            var backoff = ReconnectBackoff(base: .seconds(1), max: .seconds(30))
            for _ in 0..<10_000 {
                let delay = backoff.nextDelay(jitter: 1)
                #expect(delay <= .seconds(30))
            }
            #expect(backoff.nextDelay(jitter: 1) == .seconds(30))
        }
    }
}

// MARK: - MessageStatus.applying (the status table of docs/ARCHITECTURE.md)

extension OutboxStateMachineTests {
    @Suite struct Status {
        /// Every kind of evidence. `expected(_:_:failureIsLocal:)` switches over it exhaustively, so a new case fails
        /// to compile there until it is added here too.
        static let allEvidence: [StatusEvidence] = [.dispatched, .accepted, .stored, .deliveredToAll, .readByAll, .failedLocally, .failedOnServer, .retry]

        /// The status table of docs/ARCHITECTURE.md, written apart from the code under test, as data both SDKs'
        /// tests read (`Clients/vectors/status.json`; PigeonJS's browser test checks `applyEvidence` against it).
        static func expected(_ status: MessageStatus, _ evidence: StatusEvidence, failureIsLocal: Bool) -> MessageStatus? {
            SharedVectors.status.next(status.rawValue, name(evidence), failureIsLocal: failureIsLocal).flatMap(MessageStatus.init(rawValue:))
        }

        /// An evidence's name in the vectors; exhaustive, so a new kind of evidence fails to compile here until the
        /// vectors (and ``allEvidence``) have it too.
        static func name(_ evidence: StatusEvidence) -> String {
            switch evidence {
            case .dispatched: "dispatched"
            case .accepted: "accepted"
            case .stored: "stored"
            case .deliveredToAll: "deliveredToAll"
            case .readByAll: "readByAll"
            case .failedLocally: "failedLocally"
            case .failedOnServer: "failedOnServer"
            case .retry: "retry"
            }
        }

        /// The vectors name every status and every kind of evidence there is.
        @Test func theSharedTableCoversEveryStatusAndEvidence() {
            #expect(SharedVectors.status.statuses == MessageStatus.allCases.map(\.rawValue))
            #expect(SharedVectors.status.evidence == Self.allEvidence.map(Self.name))
        }

        @Test func everyStatusAndEvidenceFollowsTheTable() {
            for status in MessageStatus.allCases {
                for evidence in Self.allEvidence {
                    for local in [true, false] {
                        #expect(
                            status.applying(evidence, failureIsLocal: local) == Self.expected(status, evidence, failureIsLocal: local),
                            "\(status) + \(evidence) (failure is local: \(local))")
                    }
                }
            }
        }

        @Test func noEvidenceEverMovesAStatusBackwards() {
            for status in MessageStatus.allCases {
                for evidence in Self.allEvidence {
                    for local in [true, false] {
                        guard let next = status.applying(evidence, failureIsLocal: local) else { continue }
                        let label = "\(status) + \(evidence) → \(next) (failure is local: \(local))"
                        #expect(next != status, "a change must change something: \(label)")
                        switch (status, next) {
                        case (.failed, .pending):
                            #expect(evidence == .retry, "failed → pending only by retry: \(label)")
                        case (.failed, _):
                            // Server evidence ends a local failure (the server has it after all); a server failure is final.
                            #expect(local && (evidence == .accepted || evidence == .stored), "\(label)")
                        case (_, .failed):
                            #expect(status <= .sent, "nothing fails once stored: \(label)")
                        default:
                            #expect(next > status, "forward only: \(label)")
                            #expect(status.advanced(to: next) == next, "MessageStatus.advanced agrees: \(label)")
                        }
                    }
                }
            }
        }

        @Test func noStatusRunsAheadOfItsEvidence() {
            // The only evidence that can produce each status.
            let proof: [MessageStatus: Set<String>] = [
                .pending: ["retry"], .sending: ["dispatched"], .sent: ["accepted"], .stored: ["stored"],
                .delivered: ["deliveredToAll"], .read: ["readByAll"], .failed: ["failedLocally", "failedOnServer"],
            ]
            for status in MessageStatus.allCases {
                for evidence in Self.allEvidence {
                    for local in [true, false] {
                        guard let next = status.applying(evidence, failureIsLocal: local) else { continue }
                        #expect(proof[next]?.contains("\(evidence)") == true, "\(status) + \(evidence) → \(next) without its evidence")
                    }
                }
            }
        }

        @Test func dispatchShowsTheSpinnerOnlyForAPendingMessage() {
            #expect(MessageStatus.pending.applying(.dispatched) == .sending)
            for status in MessageStatus.allCases where status != .pending {
                #expect(status.applying(.dispatched) == nil, "a resend of a \(status) message changes nothing")
            }
        }

        @Test func theTickComesOnlyWithTheAcceptAnswer() {
            #expect(MessageStatus.pending.applying(.accepted) == .sent)
            #expect(MessageStatus.sending.applying(.accepted) == .sent)
            for status in MessageStatus.allCases {
                for evidence in Self.allEvidence where evidence != .accepted {
                    #expect(status.applying(evidence) != .sent, "\(status) + \(evidence) must not show ✓ (sent)")
                }
            }
        }

        @Test func storedComesOnlyWithStoredEvidence() {
            #expect(MessageStatus.pending.applying(.stored) == .stored)
            #expect(MessageStatus.sending.applying(.stored) == .stored)
            #expect(MessageStatus.sent.applying(.stored) == .stored)
            #expect(MessageStatus.stored.applying(.stored) == nil)
            for status in MessageStatus.allCases {
                for evidence in Self.allEvidence where evidence != .stored {
                    #expect(status.applying(evidence) != .stored, "\(status) + \(evidence) must not become stored")
                }
            }
        }

        @Test func deliveredAndReadOnlyFromStoredOrLater() {
            for status: MessageStatus in [.pending, .sending, .sent] {
                #expect(status.applying(.deliveredToAll) == nil, "\(status): no ✓✓ before the message has a seq")
                #expect(status.applying(.readByAll) == nil, "\(status): no blue ✓✓ before the message has a seq")
            }
            #expect(MessageStatus.stored.applying(.deliveredToAll) == .delivered)
            #expect(MessageStatus.stored.applying(.readByAll) == .read)
            #expect(MessageStatus.delivered.applying(.readByAll) == .read)
            #expect(MessageStatus.delivered.applying(.deliveredToAll) == nil)
            #expect(MessageStatus.read.applying(.deliveredToAll) == nil, "a late delivered receipt after read changes nothing")
            #expect(MessageStatus.read.applying(.readByAll) == nil)
            #expect(MessageStatus.failed.applying(.deliveredToAll) == nil)
            #expect(MessageStatus.failed.applying(.readByAll) == nil)
        }

        @Test func aLateAcceptAfterDeliveredChangesNothing() {
            for status: MessageStatus in [.sent, .stored, .delivered, .read] {
                #expect(status.applying(.accepted) == nil, "a late ✓ after \(status)")
            }
            for status: MessageStatus in [.stored, .delivered, .read] {
                #expect(status.applying(.stored) == nil, "a late stored after \(status)")
            }
        }

        @Test func aLocalFailureHappensOnlyBeforeSent() {
            #expect(MessageStatus.pending.applying(.failedLocally) == .failed)
            #expect(MessageStatus.sending.applying(.failedLocally) == .failed)
            for status: MessageStatus in [.sent, .stored, .delivered, .read, .failed] {
                #expect(status.applying(.failedLocally) == nil, "⚠️ after the server's ✓ would lie (\(status))")
            }
        }

        @Test func aServerFailureHappensUpToSent() {
            for status: MessageStatus in [.pending, .sending, .sent] {
                #expect(status.applying(.failedOnServer) == .failed, "\(status)")
            }
            for status: MessageStatus in [.stored, .delivered, .read, .failed] {
                #expect(status.applying(.failedOnServer) == nil, "\(status)")
            }
        }

        @Test func onlyRetryLeadsBackToPending() {
            #expect(MessageStatus.failed.applying(.retry) == .pending)
            #expect(MessageStatus.failed.applying(.retry, failureIsLocal: false) == .pending, "a server failure can be retried too")
            for status in MessageStatus.allCases where status != .failed {
                #expect(status.applying(.retry) == nil, "retry of a \(status) message")
            }
            for status in MessageStatus.allCases {
                for evidence in Self.allEvidence where evidence != .retry {
                    for local in [true, false] {
                        #expect(status.applying(evidence, failureIsLocal: local) != .pending, "\(status) + \(evidence)")
                    }
                }
            }
        }

        @Test func serverEvidenceEndsALocalFailure() {
            #expect(MessageStatus.failed.applying(.accepted, failureIsLocal: true) == .sent)
            #expect(MessageStatus.failed.applying(.stored, failureIsLocal: true) == .stored)
            #expect(MessageStatus.failed.applying(.dispatched, failureIsLocal: true) == nil)
            #expect(MessageStatus.failed.applying(.deliveredToAll, failureIsLocal: true) == nil)
            #expect(MessageStatus.failed.applying(.readByAll, failureIsLocal: true) == nil)
            #expect(MessageStatus.failed.applying(.failedLocally, failureIsLocal: true) == nil)
            #expect(MessageStatus.failed.applying(.failedOnServer, failureIsLocal: true) == nil)
        }

        @Test func aServerFailureIsFinal() {
            for evidence in Self.allEvidence where evidence != .retry {
                #expect(MessageStatus.failed.applying(evidence, failureIsLocal: false) == nil, "\(evidence) after message.failed")
            }
        }

        @Test func failureIsLocalMattersOnlyForAFailedMessage() {
            for status in MessageStatus.allCases where status != .failed {
                for evidence in Self.allEvidence {
                    #expect(status.applying(evidence, failureIsLocal: true) == status.applying(evidence, failureIsLocal: false), "\(status) + \(evidence)")
                }
            }
        }

        @Test func theDefaultTreatsAFailureAsLocal() {
            #expect(MessageStatus.failed.applying(.accepted) == MessageStatus.failed.applying(.accepted, failureIsLocal: true))
        }

        /// Applies evidence in order, keeping the status when it changes nothing.
        static func replay(_ evidence: [StatusEvidence], from start: MessageStatus = .pending, failureIsLocal: Bool = true) -> [MessageStatus] {
            var status = start
            var seen = [start]
            for item in evidence {
                status = status.applying(item, failureIsLocal: failureIsLocal) ?? status
                seen.append(status)
            }
            return seen
        }

        @Test func theHappyPathWalksEveryTick() {
            #expect(Self.replay([.dispatched, .accepted, .stored, .deliveredToAll, .readByAll]) == [.pending, .sending, .sent, .stored, .delivered, .read])
        }

        @Test func evidenceArrivingLateOrTwiceNeverUndoesATick() {
            let seen = Self.replay([.dispatched, .stored, .accepted, .dispatched, .readByAll, .deliveredToAll, .accepted, .stored, .failedLocally, .failedOnServer])
            #expect(seen == [.pending, .sending, .stored, .stored, .stored, .read, .read, .read, .read, .read, .read])
        }

        @Test func aFailedRetriedMessageStartsAgain() {
            let seen = Self.replay([.dispatched, .failedLocally, .dispatched, .retry, .dispatched, .accepted])
            #expect(seen == [.pending, .sending, .failed, .failed, .pending, .sending, .sent])
        }

        @Test func aLateAckRescuesALocalFailureButNotAServerOne() {
            #expect(Self.replay([.dispatched, .failedLocally, .accepted, .stored]).last == .stored)
            #expect(Self.replay([.dispatched, .accepted, .failedOnServer, .stored], failureIsLocal: false).last == .failed)
        }
    }
}
