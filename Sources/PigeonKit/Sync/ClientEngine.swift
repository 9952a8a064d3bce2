import Logging
import NIOConcurrencyHelpers
import PigeonProtocol

/// The network side of a ``PigeonClient``: the connection loop, the outbox dispatcher, delivered/read receipts,
/// gap recovery and periodic catch-up, each a loop of ``run()``. Everything it learns goes through the local
/// database first.
final class ClientEngine: Sendable {
    let store: LocalStore
    let transport: any PigeonTransport
    let hub: EventHub
    let receiver: Receiver
    let settings: PigeonClient.Configuration
    let logger: Logger

    private struct ConnectionSlot {
        var connection: (any EventStreamConnection)?
        var state = ConnectionState.offline
        var networkEnabled = true
        var running = false
        var lastError: PigeonClientError?
        /// Receipts already sent on this connection (so one is not repeated while its echo is on the way).
        var receiptsSent: [String: Int64] = [:]
    }

    private let slot = NIOLockedValueBox(ConnectionSlot())
    let outbox = NIOLockedValueBox(OutboxQueue())
    private let connectionWake = WakeSignal()
    let outboxWake = WakeSignal()
    private let receiptWake = WakeSignal()
    private let gapWake = WakeSignal()
    private let catchUpWake = WakeSignal()

    init(store: LocalStore, transport: any PigeonTransport, hub: EventHub, settings: PigeonClient.Configuration, logger: Logger) throws {
        self.store = store
        self.transport = transport
        self.hub = hub
        self.settings = settings
        self.logger = logger
        self.receiver = Receiver(store: store, hub: hub)
        let items = try store.loadOutbox()
        outbox.withLockedValue { queue in
            for item in items { queue.add(item) }
        }
    }

    var connectionState: ConnectionState { slot.withLockedValue { $0.state } }
    var lastConnectionError: PigeonClientError? { slot.withLockedValue { $0.lastError } }
    var isNetworkEnabled: Bool { slot.withLockedValue { $0.networkEnabled } }
    var isRunning: Bool { slot.withLockedValue { $0.running } }

    private var onlineConnection: (any EventStreamConnection)? {
        slot.withLockedValue { $0.state == .online ? $0.connection : nil }
    }

    private func setState(_ state: ConnectionState) {
        let changed = slot.withLockedValue { slot -> Bool in
            guard slot.state != state else { return false }
            slot.state = state
            return true
        }
        if changed { hub.emit(.connectionStateChanged(state)) }
    }

    /// Switches the network on or off. Off closes the stream at once; messages sent meanwhile wait (⏰).
    func setNetworkEnabled(_ enabled: Bool) {
        let connection = slot.withLockedValue { slot -> (any EventStreamConnection)? in
            slot.networkEnabled = enabled
            return enabled ? nil : slot.connection
        }
        connection?.close()
        connectionWake.signal()
    }

    /// Runs every loop until the task is cancelled.
    func run() async {
        slot.withLockedValue { $0.running = true }
        defer { slot.withLockedValue { $0.running = false } }
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                group.addTask { await self.connectionLoop() }
                group.addTask { await self.outboxLoop() }
                group.addTask { await self.receiptLoop() }
                group.addTask { await self.gapLoop() }
                group.addTask { await self.catchUpLoop() }
                group.addTask { await self.checkpointLoop() }
            }
        } onCancel: {
            // The stream's reader waits for frames, not for cancellation: closing the connection ends it.
            self.slot.withLockedValue { $0.connection }?.close()
        }
        slot.withLockedValue { $0.connection }?.close()
        setState(.offline)
    }

    // MARK: Connection

    private func connectionLoop() async {
        var backoff = ReconnectBackoff(base: settings.reconnectBaseDelay, max: settings.reconnectMaxDelay)
        while !Task.isCancelled {
            guard isNetworkEnabled else {
                setState(.offline)
                await connectionWake.wait()
                continue
            }
            setState(.connecting)
            do {
                let connection = try await openStream()
                backoff.reset()
                let stillWanted = slot.withLockedValue { slot -> Bool in
                    guard slot.networkEnabled else { return false }
                    slot.connection = connection
                    slot.lastError = nil
                    slot.receiptsSent = [:]
                    return true
                }
                guard stillWanted else {
                    connection.close()
                    continue
                }
                setState(.online)
                outboxWake.signal()
                receiptWake.signal()
                gapWake.signal()
                let (cursor, needsFullSync) = try store.syncState()
                if cursor == nil || needsFullSync { catchUpWake.signal() }
                try await consume(connection)
            } catch is CancellationError {
                break
            } catch {
                let error = error as? PigeonClientError ?? PigeonClientError(.network, "\(error)")
                slot.withLockedValue { $0.lastError = error }
                logger.debug("event stream failed", metadata: ["error": "\(error)"])
            }
            let connection = slot.withLockedValue { slot -> (any EventStreamConnection)? in
                defer { slot.connection = nil }
                return slot.connection
            }
            connection?.close()
            outbox.withLockedValue { $0.connectionLost() }
            setState(.offline)
            guard !Task.isCancelled, isNetworkEnabled else { continue }
            await connectionWake.wait(timeout: backoff.nextDelay(jitter: Double.random(in: 0...1)))
        }
    }

    /// The configured stream; `.automatic` tries a WebSocket and falls back to server-sent events when the
    /// upgrade is refused (a proxy that blocks WebSockets) but HTTP works.
    private func openStream() async throws -> any EventStreamConnection {
        let cursor = try store.syncState().cursor
        switch settings.streamTransport {
        case .webSocket: return try await transport.openStream(kind: .webSocket, cursor: cursor)
        case .serverSentEvents: return try await transport.openStream(kind: .serverSentEvents, cursor: cursor)
        case .automatic:
            do {
                return try await transport.openStream(kind: .webSocket, cursor: cursor)
            } catch let error as PigeonClientError where error.code == .webSocketRefused {
                return try await transport.openStream(kind: .serverSentEvents, cursor: cursor)
            }
        }
    }

    /// Reads the stream until it ends: answers go to the outbox, events to the receiver (persisted, then
    /// announced), and what they reveal (gaps, a reset, receipts owed) wakes the loop that handles it.
    private func consume(_ connection: any EventStreamConnection) async throws {
        while let frames = try await connection.nextBatch() {
            var events: [Incoming] = []
            events.reserveCapacity(frames.count)
            for frame in frames {
                switch frame {
                case .ack(let ack):
                    accepted(clientMessageId: ack.clientMessageId, response: SendMessageResponse(
                        serverId: ack.serverId, clientMessageId: ack.clientMessageId, status: ack.status, acceptedAt: ack.acceptedAt, seq: ack.seq))
                case .error(let error):
                    if let clientMessageId = error.clientMessageId {
                        refusedOrTransient(clientMessageId: clientMessageId, error: PigeonClientError(
                            .server, error.error.message, serverError: error.error, httpStatus: error.error.code.httpStatus))
                    } else {
                        logger.debug("server refused an operation", metadata: ["error": "\(error.error.message)"])
                    }
                case .event(let event):
                    events.append(.event(event))
                }
            }
            if !events.isEmpty { try await apply(events) }
        }
    }

    /// Persists and announces a batch, then starts what it calls for.
    func apply(_ batch: [Incoming]) async throws {
        let outcome = try await receiver.apply(batch)
        if !outcome.outboxSettled.isEmpty {
            outbox.withLockedValue { queue in
                for settled in outcome.outboxSettled { _ = queue.remove(settled.localId) }
            }
            outboxWake.signal()
        }
        if !outcome.gaps.isEmpty { gapWake.signal() }
        if outcome.resetRequested { catchUpWake.signal() }
        if outcome.receiptsDue || !outcome.conversationsChanged.isEmpty { receiptWake.signal() }
    }

    // MARK: Outbox

    /// Adds a message saved by `send` (or `retry`) and wakes the dispatcher.
    func enqueue(_ item: OutboxItem) {
        outbox.withLockedValue { $0.add(item) }
        outboxWake.signal()
    }

    /// Makes a failed item sendable again.
    func requeue(_ item: OutboxItem) {
        outbox.withLockedValue { queue in
            _ = queue.remove(item.localId)
            queue.add(item)
        }
        outboxWake.signal()
    }

    private func outboxLoop() async {
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let now = ContinuousClock.now
                let timedOut = outbox.withLockedValue { $0.timedOut(now: now) }
                for localId in timedOut {
                    let jitter = Double.random(in: 0...1)
                    let (action, attempts) = outbox.withLockedValue { queue in
                        (queue.update(localId) { $0.ackTimedOut(now: now, policy: self.settings.retryPolicy, jitter: jitter) }, queue.items[localId]?.attempts ?? 0)
                    }
                    perform(action, localId: localId, attempts: attempts)
                }
                if let connection = onlineConnection {
                    let due = outbox.withLockedValue { $0.dispatchDue(now: now, policy: settings.retryPolicy) }
                    for item in due { dispatch(item, on: connection, group: &group) }
                }
                let next = outbox.withLockedValue { $0.nextWakeUp(after: now) }
                await outboxWake.wait(timeout: next.map { max($0 - ContinuousClock.now, .milliseconds(1)) })
            }
        }
    }

    private func dispatch(_ item: OutboxItem, on connection: any EventStreamConnection, group: inout DiscardingTaskGroup) {
        do {
            if let changed = try store.applyEvidence(.dispatched, localId: item.localId) { hub.emit(.messageStatusChanged(changed)) }
            guard let request = try store.sendRequest(localId: item.localId) else {
                _ = outbox.withLockedValue { $0.remove(item.localId) }
                return
            }
            if connection.kind == .webSocket {
                do {
                    try connection.send(.send(conversationId: item.conversationId, request))
                } catch {
                    outbox.withLockedValue { _ = $0.update(item.localId) { $0.connectionLost() } }
                }
            } else {
                group.addTask {
                    do {
                        let response = try await self.transport.sendMessage(conversationId: item.conversationId, request)
                        self.accepted(clientMessageId: item.clientMessageId, response: response)
                    } catch {
                        self.refusedOrTransient(
                            clientMessageId: item.clientMessageId, error: error as? PigeonClientError ?? PigeonClientError(.network, "\(error)"))
                    }
                }
            }
        } catch {
            logger.error("outbox dispatch failed", metadata: ["localId": "\(item.localId)", "error": "\(error)"])
        }
    }

    /// The server has the message (an ack, a 200/202, or stored evidence): the item is done.
    func accepted(clientMessageId: String, response: SendMessageResponse) {
        do {
            let queued = outbox.withLockedValue { $0.item(clientMessageId: clientMessageId) }
            guard let localId = try queued?.localId ?? store.message(clientMessageId: clientMessageId)?.localId else { return }
            _ = outbox.withLockedValue { $0.remove(localId) }
            if let changed = try store.markAccepted(localId: localId, response: response) { hub.emit(.messageStatusChanged(changed)) }
        } catch {
            logger.error("recording an ack failed", metadata: ["error": "\(error)"])
        }
        outboxWake.signal()
    }

    /// The server (or the network) refused a send: transient errors retry, an expired token keeps the message
    /// queued, any other refusal fails it at once.
    func refusedOrTransient(clientMessageId: String, error: PigeonClientError) {
        guard let item = outbox.withLockedValue({ $0.item(clientMessageId: clientMessageId) }) else { return }
        let now = ContinuousClock.now
        let jitter = Double.random(in: 0...1)
        let detail = error.serverError ?? ErrorDetail(code: .internalError, message: error.message)
        let (action, attempts) = outbox.withLockedValue { queue -> (OutboxItem.Action, Int) in
            let action = queue.update(item.localId) { item in
                if error.isTransient {
                    return item.transientFailure(
                        detail, retryAfter: error.retryAfterSeconds.map { .seconds($0) }, now: now, policy: self.settings.retryPolicy, jitter: jitter)
                }
                if detail.code == .unauthorized { return item.connectionLost() }
                return item.refused(detail)
            }
            return (action, queue.items[item.localId]?.attempts ?? 0)
        }
        perform(action, localId: item.localId, attempts: attempts)
        outboxWake.signal()
    }

    private func perform(_ action: OutboxItem.Action, localId: Int64, attempts: Int) {
        do {
            switch action {
            case .none, .send, .complete:
                break
            case .retryLater:
                try store.recordAttempts(localId: localId, attempts: attempts)
            case .fail(let reason):
                if let changed = try store.markFailed(localId: localId, reason: reason, attempts: attempts) { hub.emit(.messageStatusChanged(changed)) }
            }
        } catch {
            logger.error("recording an outbox change failed", metadata: ["localId": "\(localId)", "error": "\(error)"])
        }
    }

    // MARK: Receipts

    /// Sends the delivered and read watermarks this device owes, batched: every wake within the debounce
    /// interval becomes one receipt per conversation and kind. Confirmed by the server's echo (`receipt` events
    /// for this user), so a receipt lost with a connection is sent again on the next one.
    private func receiptLoop() async {
        while !Task.isCancelled {
            await receiptWake.wait()
            try? await Task.sleep(for: settings.receiptDelay)
            guard let connection = onlineConnection else { continue }
            do {
                for receipt in try store.pendingReceipts() {
                    let key = "\(receipt.kind.rawValue)/\(receipt.conversationId)"
                    let alreadySent = slot.withLockedValue { $0.receiptsSent[key] ?? 0 }
                    guard receipt.upToSeq > alreadySent else { continue }
                    let request = ReceiptRequest(kind: receipt.kind, upToSeq: receipt.upToSeq)
                    if connection.kind == .webSocket {
                        try connection.send(.receipt(conversationId: receipt.conversationId, request))
                    } else {
                        _ = try await transport.postReceipt(conversationId: receipt.conversationId, request)
                    }
                    slot.withLockedValue { $0.receiptsSent[key] = receipt.upToSeq }
                }
            } catch {
                logger.debug("sending receipts failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Queues a read receipt now (``PigeonClient/markRead(conversationId:upToSeq:)``).
    func receiptsChanged() { receiptWake.signal() }

    // MARK: Gaps and catch-up

    /// Fetches every missing range at once (`messages?after=` the contiguous seq, page by page). The messages
    /// after a gap stay persisted meanwhile; a failed fetch is retried, never given up.
    private func gapLoop() async {
        while !Task.isCancelled {
            await gapWake.wait()
            guard onlineConnection != nil else { continue }
            do {
                try await fillGaps()
            } catch {
                logger.debug("gap fetch failed; retrying", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: settings.reconnectBaseDelay)
                gapWake.signal()
            }
        }
    }

    func fillGaps() async throws {
        var rounds = 0
        while let (conversationId, after) = try store.gaps().first, rounds < 100_000 {
            rounds += 1
            let page = try await transport.messages(conversationId: conversationId, after: after, limit: settings.fetchPageSize)
            try await apply([.history(conversationId: conversationId, page.messages)])
            if page.messages.isEmpty {
                // The server has nothing after `after`: the seq we expected does not exist (yet); wait for news.
                return
            }
        }
    }

    /// Periodic and on-demand catch-up: every conversation with its members' watermarks, then every message
    /// missing up to each conversation's last seq. Covers a stream that stalled silently, a `reset`, a new or
    /// rebuilt database.
    private func catchUpLoop() async {
        while !Task.isCancelled {
            await catchUpWake.wait(timeout: settings.catchUpInterval)
            guard !Task.isCancelled, onlineConnection != nil else { continue }
            do {
                try await catchUp()
            } catch {
                logger.debug("catch-up failed; retrying", metadata: ["error": "\(error)"])
                try? await Task.sleep(for: settings.reconnectBaseDelay)
                catchUpWake.signal()
            }
        }
    }

    func catchUp() async throws {
        let conversations = try await transport.conversations()
        try await apply([.conversations(conversations)])
        try await fillGaps()
        try store.setNeedsFullSync(false)
    }

    /// Keeps the write-ahead log short without making any write pay for it (see ``LocalStore/checkpoint(thresholdBytes:)``).
    private func checkpointLoop() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            do {
                try store.checkpoint()
            } catch {
                logger.debug("checkpoint failed", metadata: ["error": "\(error)"])
            }
        }
    }

    // MARK: Direct calls

    func createConversation(_ request: CreateConversationRequest) async throws -> Conversation {
        let conversation = try await transport.createConversation(request)
        try await apply([.conversations([conversation])])
        return conversation
    }

    func setTyping(conversationId: String, active: Bool) async throws {
        if let connection = onlineConnection, connection.kind == .webSocket {
            try connection.send(.typing(conversationId: conversationId, active: active))
        } else {
            try await transport.postTyping(conversationId: conversationId, active: active)
        }
    }
}
