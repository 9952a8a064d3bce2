import PigeonKit
import PigeonProtocol
import Testing

/// The outbox's uploads of attachments, driven directly without a network or a clock: an item's uploads come before
/// its dispatch, each attachment's upload has its tries, a refusal fails the message, a network loss is not a try, and
/// the conversation's line waits for them (`OutboxItem`, `OutboxQueue`).
@Suite struct OutboxUploadTests {
    let t0 = ElapsedClock.Instant(sinceStart: .zero)
    let policy = RetryPolicy()
    static let overloaded = ErrorDetail(code: .overloaded, message: "try later")
    static let tooLarge = ErrorDetail(code: .payloadTooLarge, message: "photo.jpg: larger than 25 MiB")

    static func item(_ localId: Int64, in conversationId: String = "c1", uploads: Bool) -> OutboxItem {
        OutboxItem(localId: localId, conversationId: conversationId, clientMessageId: "cmid-\(localId)", uploadsPending: uploads)
    }

    @Test func anItemWithUploadsIsNotDueUntilTheyAreDone() {
        var item = Self.item(1, uploads: true)
        #expect(item.uploads == .waiting(notBefore: nil))
        #expect(!item.isDue(at: t0))
        let early = item.dispatch(now: t0, policy: policy)
        #expect(early == .none, "nothing goes before its attachments")
        let started = item.startUpload(now: t0)
        #expect(started && item.uploads == .running)
        let again = item.startUpload(now: t0)
        #expect(!again, "one upload at a time")
        item.attachmentUploaded()
        #expect(!item.isDue(at: t0))
        item.uploadsFinished()
        #expect(item.uploads == .done)
        #expect(item.isDue(at: t0))
        let dispatched = item.dispatch(now: t0, policy: policy)
        #expect(dispatched == .send)
        #expect(item.attempts == 0, "uploading spends none of the send's tries")
    }

    @Test func transientUploadFailuresBackOffThenFailTheMessageWhenTheTriesAreSpent() {
        var item = Self.item(1, uploads: true)
        var now = t0
        for attempt in 1...policy.maxAttempts {
            let started = item.startUpload(now: now)
            #expect(started)
            let action = item.uploadFailed(Self.overloaded, retryAfter: nil, now: now, policy: policy, jitter: 0)
            if attempt < policy.maxAttempts {
                guard case .retryLater(let next) = action else {
                    Issue.record("try \(attempt) must back off, got \(action)")
                    return
                }
                #expect(next == now + policy.delay(afterAttempt: attempt, jitter: 0))
                let early = item.startUpload(now: next - .milliseconds(1))
                #expect(!early, "not before the backoff ends")
                now = next
            } else {
                #expect(action == .fail(Self.overloaded))
            }
        }
        #expect(item.isFailed)
        #expect(item.state == .failed(Self.overloaded))
        let later = item.startUpload(now: now + .seconds(3600))
        #expect(!later, "a failed message uploads nothing until retried")
    }

    @Test func theServersRetryAfterIsHonoured() {
        var item = Self.item(1, uploads: true)
        _ = item.startUpload(now: t0)
        let action = item.uploadFailed(Self.overloaded, retryAfter: .seconds(30), now: t0, policy: policy, jitter: 0)
        #expect(action == .retryLater(t0 + .seconds(30)))
    }

    @Test func anAnsweredAttachmentGivesTheNextOneFreshTries() {
        var item = Self.item(1, uploads: true)
        var now = t0
        for _ in 1..<policy.maxAttempts {
            _ = item.startUpload(now: now)
            guard case .retryLater(let next) = item.uploadFailed(Self.overloaded, retryAfter: nil, now: now, policy: policy, jitter: 0) else {
                Issue.record("must back off")
                return
            }
            now = next
        }
        let started = item.startUpload(now: now)
        #expect(started)
        item.attachmentUploaded()
        #expect(item.uploadAttempts == 0)
        guard case .retryLater = item.uploadFailed(Self.overloaded, retryAfter: nil, now: now, policy: policy, jitter: 0) else {
            Issue.record("the second attachment's first failure is its first try")
            return
        }
    }

    @Test func aRefusedUploadFailsTheMessageAtOnceAndRetryStartsTheUploadsAgain() {
        var item = Self.item(1, uploads: true)
        _ = item.startUpload(now: t0)
        let refused = item.uploadRefused(Self.tooLarge)
        #expect(refused == .fail(Self.tooLarge))
        #expect(item.state == .failed(Self.tooLarge))
        let retried = item.retry()
        #expect(retried)
        #expect(item.state == .queued(notBefore: nil))
        #expect(item.uploads == .waiting(notBefore: nil))
        #expect(item.uploadAttempts == 0)
        let started = item.startUpload(now: t0)
        #expect(started)
    }

    @Test func aNetworkLossIsNotATry() {
        var item = Self.item(1, uploads: true)
        for _ in 0..<10 {
            let started = item.startUpload(now: t0)
            #expect(started)
            item.uploadInterrupted()
        }
        #expect(item.uploadAttempts == 0)
        #expect(item.uploads == .waiting(notBefore: nil))
        #expect(!item.isFailed)
    }

    @Test func breaksWhileOnlineAreNotTriesButSpaceTheNextStart() {
        var item = Self.item(1, uploads: true)
        var now = t0
        for interruption in 1...(policy.maxAttempts + 3) {
            let started = item.startUpload(now: now)
            #expect(started)
            let action = item.uploadInterrupted(backoff: (now, policy, 0))
            let next = now + policy.delay(afterAttempt: interruption, jitter: 0)
            #expect(action == .retryLater(next))
            let early = item.startUpload(now: next - .milliseconds(1))
            #expect(!early)
            now = next
        }
        #expect(!item.isFailed, "the connection breaking never fails the message")
        #expect(item.uploadAttempts == 0)
        _ = item.startUpload(now: now)
        item.attachmentUploaded()
        #expect(item.uploadInterruptions == 0, "the next attachment starts without a backoff")
    }

    @Test func answersToAnUploadThatIsNotRunningChangeNothing() {
        var item = Self.item(1, uploads: true)
        let before = item
        let failed = item.uploadFailed(Self.overloaded, retryAfter: nil, now: t0, policy: policy, jitter: 0)
        let refused = item.uploadRefused(Self.tooLarge)
        #expect(failed == .none && refused == .none)
        item.uploadInterrupted()
        item.uploadsFinished()
        #expect(item == before)
    }

    @Test func anItemFoundWithoutItsUploadsWhenDispatchedGoesBackToUploading() {
        var item = Self.item(1, uploads: false)
        let dispatched = item.dispatch(now: t0, policy: policy)
        #expect(dispatched == .send)
        item.awaitUploads()
        #expect(item.state == .queued(notBefore: nil))
        #expect(item.uploads == .waiting(notBefore: nil))
        let started = item.startUpload(now: t0)
        #expect(started)
    }

    // MARK: The line

    @Test func theLineWaitsForAMessagesUploadsWhileTheyMayRunBehindOneOnTheWire() {
        var queue = OutboxQueue()
        queue.add(Self.item(1, uploads: false))
        queue.add(Self.item(2, uploads: true))
        queue.add(Self.item(3, uploads: false))
        let first = queue.dispatchDue(now: t0, policy: policy).map(\.localId)
        #expect(first == [1])
        let uploading = queue.uploadsDue(now: t0).map(\.localId)
        #expect(uploading == [2], "uploads start while the message ahead is on the wire")
        let secondUpload = queue.uploadsDue(now: t0)
        #expect(secondUpload.isEmpty, "one upload at a time per conversation")
        _ = queue.remove(1)
        let blocked = queue.dispatchDue(now: t0, policy: policy)
        #expect(blocked.isEmpty, "3 waits behind 2's uploads: the order holds")
        _ = queue.update(2) { item in
            item.uploadsFinished()
            return .none
        }
        let afterUploads = queue.dispatchDue(now: t0, policy: policy).map(\.localId)
        #expect(afterUploads == [2])
    }

    @Test func uploadsGoInSendingOrderPerConversationAndConversationsInParallel() {
        var queue = OutboxQueue()
        queue.add(Self.item(1, in: "a", uploads: true))
        queue.add(Self.item(2, in: "a", uploads: true))
        queue.add(Self.item(3, in: "b", uploads: true))
        let firstRound = queue.uploadsDue(now: t0).map(\.localId)
        #expect(firstRound == [1, 3])
        _ = queue.update(1) { item in
            item.uploadsFinished()
            return .none
        }
        let secondRound = queue.uploadsDue(now: t0).map(\.localId)
        #expect(secondRound == [2])
    }

    @Test func aFailedMessageStepsOutOfTheUploadLine() {
        var queue = OutboxQueue()
        queue.add(Self.item(1, uploads: true))
        queue.add(Self.item(2, uploads: true))
        let before = queue.uploadsDue(now: t0).map(\.localId)
        #expect(before == [1])
        _ = queue.update(1) { $0.uploadRefused(Self.tooLarge) }
        let after = queue.uploadsDue(now: t0).map(\.localId)
        #expect(after == [2])
    }

    @Test func theDispatcherWakesWhenAnUploadBackoffEnds() {
        var queue = OutboxQueue()
        queue.add(Self.item(1, uploads: true))
        let started = queue.uploadsDue(now: t0).map(\.localId)
        #expect(started == [1])
        #expect(queue.nextWakeUp(after: t0) == nil, "a running upload wakes the dispatcher itself when it ends")
        let action = queue.update(1) { $0.uploadFailed(Self.overloaded, retryAfter: .seconds(5), now: self.t0, policy: self.policy, jitter: 0) }
        #expect(action == .retryLater(t0 + .seconds(5)))
        #expect(queue.nextWakeUp(after: t0) == t0 + .seconds(5))
        let early = queue.uploadsDue(now: t0 + .seconds(4))
        #expect(early.isEmpty)
        let due = queue.uploadsDue(now: t0 + .seconds(5)).map(\.localId)
        #expect(due == [1])
    }
}
