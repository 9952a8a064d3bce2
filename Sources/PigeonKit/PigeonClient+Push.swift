import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol

/// Push notifications (API.md 1.1, "Push for devices that are not connected"): the server asks a Matrix push gateway
/// (Sygnal or a compatible one) to wake a device that has no open stream when a message arrives for it. The device
/// registers where it can be woken (``registerPush(kind:appId:pushkey:data:)``), and when a push wakes the app,
/// ``handlePush(_:deadline:)`` brings it up to date within the time the operating system gives.
extension PigeonClient {
    // MARK: Registration (network)

    /// Registers (or replaces) where the push gateway wakes this device: the provider's token (`pushkey`: an APNs
    /// device token, an FCM registration token, a Web Push endpoint) and the app's id at the gateway (`appId`, which
    /// picks the gateway's provider configuration). `data` is passed to the gateway with every push (for example Web
    /// Push keys, or Sygnal's `default_payload`). Call it at every launch with the current token: tokens change.
    ///
    /// Throws ``PigeonClientError/Code-swift.struct/invalidArgument`` for input the server would refuse (checked
    /// before sending, and the server's `400` maps to it too): an `appId` outside 1-64 characters of `[A-Za-z0-9._-]`,
    /// a `pushkey` outside 1-512 bytes of printable ASCII without spaces, `data` larger than 2048 bytes of JSON.
    /// Nothing is changed then. A refused token is the server's `401` (``PigeonClientError/httpStatus``).
    /// Needs the network.
    public func registerPush(kind: PushKind, appId: String, pushkey: String, data: [String: JSONValue]? = nil) async throws {
        let request = PushRegistrationRequest(kind: kind, appId: appId, pushkey: pushkey, data: data)
        if let problem = request.problem { throw PigeonClientError.invalid(problem) }
        if let data {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let text = String(decoding: try encoder.encode(data), as: UTF8.self)
            guard text.utf8.count <= PushRegistrationRequest.maxDataBytes else {
                throw PigeonClientError.invalid("data is \(text.utf8.count) bytes of JSON; the limit is \(PushRegistrationRequest.maxDataBytes)")
            }
        }
        do {
            try await accountTransport.registerPush(request)
        } catch let error as PigeonClientError where error.serverError?.code == .invalidRequest {
            throw PigeonClientError(.invalidArgument, error.message, serverError: error.serverError, httpStatus: error.httpStatus)
        }
    }

    /// This device's push registration as the server has it, with when the gateway last accepted a push for it
    /// and whether one is owed now; `nil` when it has none. Needs the network.
    public func pushRegistration() async throws -> PushRegistrationInfo? {
        do {
            return try await accountTransport.pushRegistration()
        } catch let error as PigeonClientError where error.httpStatus == 404 && error.serverError?.code == .notFound {
            return nil
        }
    }

    /// Removes this device's push registration: the server sends no more pushes for it (it has none afterwards,
    /// also when it had none before). Needs the network.
    public func unregisterPush() async throws {
        try await accountTransport.unregisterPush()
    }

    // MARK: Handling a push

    /// Brings this device up to date after a push woke the app, within `deadline`, and says what it did: the iOS
    /// background path (`application(_:didReceiveRemoteNotification:fetchCompletionHandler:)`, a Notification Service
    /// Extension) and Android's `FirebaseMessagingService.onMessageReceived`.
    ///
    /// In order: the conversation the push names is read again and every message missing in it is fetched (so an
    /// extension can show it), then every other conversation is caught up, then the outbox is flushed (each waiting
    /// message accepted ✓ or refused ⚠️) and the delivered receipts for what arrived are sent, until the server
    /// confirmed them (the senders see ✓✓). Everything goes through the local database first, as with the running
    /// client: a message is stored once however often it is fetched, an outbox message keeps its clientMessageId
    /// (the server answers a resend with the original), so a call cut short and a later one never lose nor
    /// duplicate anything. Transient network errors are retried until the deadline.
    ///
    /// It works whether or not the client was started. Not running (the app was woken from suspension, or an
    /// extension opened the database), it runs the network side for the call only, and stops it before returning:
    /// no connection nor task is left behind. Running (``start()`` or ``run()``), it uses the running client, and
    /// replaces the stream the client holds from before the push: the server pushes only to a device it sees no
    /// stream from, so that socket is presumed dead (a suspended app's). ``start()`` during the call keeps the network
    /// side running afterwards; ``stop()`` during the call ends it, and the call reports what it could not do.
    ///
    /// It returns by the deadline: the work stops a tenth of it (at most 250 ms) before, to close what it opened in
    /// time; ``PushHandlingReport/finished`` is then `false` and ``PushHandlingReport/error`` names the step left.
    /// Nothing is lost: the next call or the running client carries on. Cancelling the calling task ends it the same
    /// way. A device signed out, or whose network is switched off (``setNetworkEnabled(_:)``), reports
    /// ``PigeonClientError/Code-swift.struct/closed`` at once.
    ///
    /// - Parameters:
    ///   - push: What the push said (``PigeonPush/init(payload:)``); `nil` for a payload that could not be read, or a
    ///     wake-up without one: every conversation is caught up.
    ///   - deadline: How long the call may take; iOS gives about 30 s to a background notification and to a
    ///     Notification Service Extension.
    public func handlePush(_ push: PigeonPush?, deadline: Duration = .seconds(25)) async -> PushHandlingReport {
        let deadline = max(deadline, .zero)
        // On the client's clock (``Configuration-swift.struct/clock``), like every other wait of the network side.
        let clock = engine.clock
        let start = clock.now
        let end = start + deadline
        let workEnd = end - min(deadline / 10, .milliseconds(250))
        let before = await PushBaseline(client: self)
        let step = NIOLockedValueBox<@Sendable () -> String>({ "starting" })
        var error: PigeonClientError?
        if engine.connectionState == .signedOut {
            error = PigeonClientError(.closed, "this device is signed out: \(lastConnectionError?.description ?? "its token was refused")")
        } else if !engine.isNetworkEnabled {
            error = PigeonClientError(.closed, "the network is switched off (setNetworkEnabled(false))")
        } else {
            // A stream opened before the push is not trusted (see above): the outbox and the receipts wait for a new one.
            let replaced = holdNetworkSide() && engine.replaceConnection()
            let newerThan = replaced ? before.connectionGeneration : Int.min
            error = await runUntil(workEnd, deadline: deadline, step: step) {
                try await self.catchUpAfterPush(push, connectionNewerThan: newerThan, step: step)
            }
            await releaseNetworkSide(until: end)
        }
        return await before.report(client: self, push: push, error: error, elapsed: clock.now - start)
    }

    /// Counts this call as wanting the network side, and starts it when nothing runs it. Whether it found it running
    /// for the app (not for another push handling in progress, whose stream is new).
    private func holdNetworkSide() -> Bool {
        runSlot.withLockedValue { slot in
            slot.pushHandlings += 1
            if slot.task != nil || engine.isRunning { return slot.pushHandlings == 1 }
            slot.task = Task { try? await self.run() }
            return false
        }
    }

    /// Ends this call's hold; the last one stops the network side unless the app started it, waiting for it to stop
    /// until `end` at most (it was cancelled, and ends on its own if that takes longer).
    private func releaseNetworkSide(until end: ElapsedClock.Instant) async {
        let task = runSlot.withLockedValue { slot -> Task<Void, Never>? in
            slot.pushHandlings -= 1
            guard slot.pushHandlings == 0, !slot.startedByApp, let task = slot.task else { return nil }
            slot.task = nil
            return task
        }
        guard let task else { return }
        task.cancel()
        let stopped = await withTaskGroup(of: Bool.self) { group in
            group.addTask { await task.value; return true }
            group.addTask { [clock = engine.clock] in try? await clock.sleep(until: end); return false }
            defer { group.cancelAll() }
            return await group.next() ?? false
        }
        if !stopped { configuration.logger.debug("handlePush: the network side was still stopping at the deadline") }
    }

    private enum WorkOutcome: Sendable {
        case done
        case failed(PigeonClientError)
        /// The deadline came, or the calling task was cancelled.
        case cut
    }

    /// Runs `work` until it ends or `end` comes; the error it threw, a timeout naming the step it was at, or `nil`.
    private func runUntil(
        _ end: ElapsedClock.Instant, deadline: Duration, step: NIOLockedValueBox<@Sendable () -> String>,
        _ work: @escaping @Sendable () async throws -> Void
    ) async -> PigeonClientError? {
        await withTaskGroup(of: WorkOutcome.self) { group in
            group.addTask {
                do {
                    try await work()
                    return .done
                } catch let error as PigeonClientError {
                    return .failed(error)
                } catch {
                    return .cut
                }
            }
            group.addTask { [clock = engine.clock] in
                try? await clock.sleep(until: end)
                return .cut
            }
            defer { group.cancelAll() }
            switch await group.next() ?? .cut {
            case .done: return nil
            case .failed(let error): return error
            case .cut: break
            }
            let what = step.withLockedValue { $0 }()
            let why = Task.isCancelled ? "was cancelled" : "did not finish within \(deadline)"
            return PigeonClientError(.timeout, "handlePush \(why): \(what)")
        }
    }

    /// The steps of ``handlePush(_:deadline:)``, each saying in `step` what it waits for.
    private func catchUpAfterPush(
        _ push: PigeonPush?, connectionNewerThan: Int, step: NIOLockedValueBox<@Sendable () -> String>
    ) async throws {
        let server = configuration.serverURL.absoluteString
        if let conversationId = push?.conversationId {
            try await retryingTransient(step, "fetching the missing messages of conversation \(conversationId) from \(server)") {
                try await self.engine.catchUp(conversationId: conversationId)
            }
        }
        try await retryingTransient(step, "fetching the conversations and missing messages from \(server)") {
            try await self.engine.catchUp()
        }
        step.withLockedValue { $0 = { () -> String in
            let reason = self.lastConnectionError.map { ": \($0.message)" } ?? ""
            return "not connected to \(server)\(reason)"
        } }
        try await pollUntil {
            if self.engine.connectionState == .signedOut {
                throw PigeonClientError(.closed, "this device was signed out: \(self.lastConnectionError?.description ?? "its token was refused")")
            }
            if !self.engine.isNetworkEnabled { throw PigeonClientError(.closed, "the network was switched off") }
            if !self.engine.isRunning, self.runSlot.withLockedValue({ $0.task == nil }) {
                throw PigeonClientError(.closed, "the client was stopped")
            }
            return self.connectionState == .online && self.engine.connectionGeneration > connectionNewerThan
        }
        step.withLockedValue { $0 = { () -> String in
            let waiting = self.engine.outbox.withLockedValue { $0.items.values.filter { !$0.isFailed }.count }
            return "\(waiting) message\(waiting == 1 ? "" : "s") still waiting for the server's answer"
        } }
        try await pollUntil { self.engine.outbox.withLockedValue { queue in !queue.items.values.contains { !$0.isFailed } } }
        step.withLockedValue { $0 = { "receipts not yet confirmed by \(server)" } }
        engine.receiptsChanged()
        try await pollUntil { try await self.store.pendingReceipts().isEmpty }
    }

    /// Runs `body` again after transient errors (network trouble, timeouts, 5xx, 429), with a backoff from 100 ms to
    /// 2 s on the client's clock, until it succeeds, throws another error, or the task is cancelled; `step` says what
    /// it does and why it last failed.
    private func retryingTransient(
        _ step: NIOLockedValueBox<@Sendable () -> String>, _ what: String, _ body: () async throws -> Void
    ) async throws {
        step.withLockedValue { $0 = { what } }
        var delay = Duration.milliseconds(100)
        while true {
            do {
                return try await body()
            } catch let error as PigeonClientError where error.isTransient {
                step.withLockedValue { $0 = { "\(what) (last try: \(error.message))" } }
                try await engine.clock.sleep(for: delay)
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// Polls `condition` every 10 ms of real time until it holds; throws what it throws, or on cancellation. (Not a
    /// deadline: it only looks again at state other tasks change, and on a test's manual clock it would stall.)
    private func pollUntil(_ condition: () async throws -> Bool) async throws {
        while try await !condition() {
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// What the device held when a push handling began, to report what the call changed.
private struct PushBaseline: Sendable {
    var lastLocalId: Int64
    var receiptsSent: Int
    /// The outbox items waiting (not failed) when the call began.
    var waiting: Set<Int64>
    var connectionGeneration: Int

    init(client: PigeonClient) async {
        lastLocalId = (try? await client.store.lastLocalId()) ?? Int64.max
        receiptsSent = client.engine.receiptsSentCount
        waiting = client.engine.outbox.withLockedValue { queue in Set(queue.items.values.filter { !$0.isFailed }.map(\.localId)) }
        connectionGeneration = client.engine.connectionGeneration
    }

    func report(client: PigeonClient, push: PigeonPush?, error: PigeonClientError?, elapsed: Duration) async -> PushHandlingReport {
        let items = client.engine.outbox.withLockedValue { $0.items }
        var sent = 0
        var failed = 0
        var stillWaiting = 0
        for localId in waiting {
            if let item = items[localId] {
                if item.isFailed { failed += 1 } else { stillWaiting += 1 }
            } else {
                sent += 1
            }
        }
        var pushedMessageStored: Bool?
        if let serverId = push?.serverId { pushedMessageStored = (try? await client.store.hasMessage(serverId: serverId)) ?? false }
        return PushHandlingReport(
            push: push, messagesFetched: (try? await client.store.arrivedCount(after: lastLocalId)) ?? 0,
            pushedMessageStored: pushedMessageStored, receiptsSent: client.engine.receiptsSentCount - receiptsSent, outboxSent: sent,
            outboxFailed: failed, outboxWaiting: stillWaiting, finished: error == nil, error: error, elapsed: elapsed)
    }
}
