import PigeonProtocol

extension ClientEngine {
    /// Adds a message saved by `send` (or `retry`) and wakes the dispatcher.
    func enqueue(_ item: OutboxItem) {
        outbox.withLockedValue { $0.add(item) }
        outboxWake.notify()
    }

    /// Takes a waiting item out of the outbox, unless it is on the wire (its answer is on the way): whether it was.
    func cancelQueued(_ localId: Int64) -> Bool {
        outbox.withLockedValue { queue in
            guard let item = queue.items[localId], !item.isInFlight else { return false }
            _ = queue.remove(localId)
            return true
        }
    }

    /// Makes a failed item sendable again.
    func requeue(_ item: OutboxItem) {
        outbox.withLockedValue { queue in
            _ = queue.remove(item.localId)
            queue.add(item)
        }
        outboxWake.notify()
    }

    /// Counts expired ACK deadlines as tries, starts the due attachments' uploads and hands the due items to the
    /// connection (per conversation one at a time, in sending order), then sleeps until the next deadline or backoff
    /// ends, or until woken.
    func outboxLoop() async {
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let now = clock.now
                let timedOut = outbox.withLockedValue { $0.timedOut(now: now) }
                for localId in timedOut {
                    let jitter = self.jitter()
                    let (action, item) = outbox.withLockedValue { queue in
                        (queue.update(localId) { $0.ackTimedOut(now: now, policy: self.settings.retryPolicy, jitter: jitter) }, queue.items[localId])
                    }
                    if let item { await perform(action, item) }
                }
                if let connection = onlineConnection {
                    for item in outbox.withLockedValue({ $0.uploadsDue(now: now) }) {
                        group.addTask { await self.upload(item) }
                    }
                    let due = outbox.withLockedValue { $0.dispatchDue(now: now, policy: settings.retryPolicy) }
                    for item in due {
                        guard let request = await prepareDispatch(item) else { continue }
                        if case .targetNotSent = request {
                            await targetNotSent(item)
                            continue
                        }
                        if case .uploadsPending = request {
                            uploadsFound(item)
                            continue
                        }
                        // Over HTTP the answer takes a round trip: the loop does not wait for it.
                        group.addTask { await self.handOver(item, request, on: connection) }
                    }
                }
                await outboxWake.wait(until: outbox.withLockedValue { $0.nextWakeUp(after: now) })
            }
        }
    }

    /// Marks the message `sending` (announced before it leaves) and reads its request; `nil` when it is gone.
    private func prepareDispatch(_ item: OutboxItem) async -> OutboxRequest? {
        do {
            if item.kind == .reaction {
                guard let request = try await store.reactionRequest(id: item.localId) else {
                    _ = outbox.withLockedValue { $0.remove(item.localId) }
                    return nil
                }
                return request
            }
            guard let request = try await store.outboxRequest(localId: item.localId) else {
                _ = outbox.withLockedValue { $0.remove(item.localId) }
                return nil
            }
            if case .uploadsPending = request { return request }
            if let changed = try await store.applyEvidence(.dispatched, localId: item.localId) { hub.emit(.messageStatusChanged(changed)) }
            return request
        } catch {
            logger.error("outbox dispatch failed", metadata: ["localId": "\(item.localId)", "error": "\(error)"])
            return nil
        }
    }

    /// An edit, deletion, reply or reaction whose target never reached the server (it failed, so it stepped out of
    /// the line ahead): it fails too (a message can be retried once the target is sent; a reaction is dropped).
    private func targetNotSent(_ item: OutboxItem) async {
        let reason = ErrorDetail(code: .invalidRequest, message: "the message it refers to was not sent: retry that message first")
        let (action, current) = outbox.withLockedValue { queue in
            (queue.update(item.localId) { $0.refused(reason) }, queue.items[item.localId])
        }
        await perform(action, current ?? item)
        outboxWake.notify()
    }

    private func handOver(_ item: OutboxItem, _ request: OutboxRequest, on connection: any EventStreamConnection) async {
        let handover: MessageHandover
        switch request {
        case .send(let send): handover = await connection.send(send, to: item.conversationId)
        case .edit(let serverId, let edit): handover = await connection.edit(edit, of: serverId, in: item.conversationId)
        case .delete(let serverId, let delete): handover = await connection.delete(delete, of: serverId, in: item.conversationId)
        case .react(let react): handover = await connection.react(react, in: item.conversationId)
        case .targetNotSent, .uploadsPending: return
        }
        switch handover {
        case .queued:
            break
        case .accepted(let response):
            await accepted(clientMessageId: item.clientMessageId, response: response)
        case .reacted(let response):
            await reactionAnswered(item, reactions: response.reactions)
        case .failed(let error):
            await refusedOrTransient(clientMessageId: item.clientMessageId, error: error)
        case .connectionClosed:
            outbox.withLockedValue { _ = $0.update(item.localId) { $0.connectionLost() } }
        }
    }

    /// The server has the message (an ack, a 200/202, or stored evidence): the item is done.
    func accepted(clientMessageId: String, response: SendMessageResponse) async {
        do {
            let localId: Int64?
            if let queued = outbox.withLockedValue({ $0.item(clientMessageId: clientMessageId) }) {
                if queued.kind == .reaction {
                    // A WebSocket `ack` of a reaction: applied, without the aggregate (the `reaction` event brings it).
                    await reactionAnswered(queued, reactions: nil)
                    return
                }
                localId = queued.localId
            } else {
                localId = try await store.message(clientMessageId: clientMessageId)?.localId
            }
            guard let localId else { return }
            // Written first, then out of the line: the next item (an edit of this message, say) reads its serverId.
            let outcome = try await store.markAccepted(localId: localId, response: response)
            _ = outbox.withLockedValue { $0.remove(localId) }
            hub.emit(outcome)
        } catch {
            logger.error("recording an ack failed", metadata: ["error": "\(error)"])
        }
        outboxWake.notify()
    }

    /// The server (or the network) refused a send: transient errors retry, an expired token keeps the message
    /// queued, any other refusal fails it at once.
    func refusedOrTransient(clientMessageId: String, error: PigeonClientError) async {
        guard let item = outbox.withLockedValue({ $0.item(clientMessageId: clientMessageId) }) else { return }
        let now = clock.now
        let jitter = self.jitter()
        let detail = error.serverError ?? ErrorDetail(code: .internalError, message: error.message)
        let (action, current) = outbox.withLockedValue { queue -> (OutboxItem.Action, OutboxItem?) in
            let action = queue.update(item.localId) { item in
                if error.isTransient {
                    return item.transientFailure(
                        detail, retryAfter: error.retryAfterSeconds.map { .seconds($0) }, now: now, policy: self.settings.retryPolicy, jitter: jitter)
                }
                if detail.code == .unauthorized { return item.connectionLost() }
                return item.refused(detail)
            }
            return (action, queue.items[item.localId])
        }
        await perform(action, current ?? item)
        outboxWake.notify()
    }

    /// The server applied one of this device's reactions: it leaves the outbox, and the message's aggregate is the
    /// answer's (HTTP) or the known one with this change (a WebSocket `ack`).
    private func reactionAnswered(_ item: OutboxItem, reactions: [Reaction]?) async {
        do {
            // Written first, then out of the line: the next reaction to the same key reads the new aggregate.
            let outcome = try await store.reactionAnswered(id: item.localId, reactions: reactions)
            _ = outbox.withLockedValue { $0.remove(item.localId) }
            hub.emit(outcome)
        } catch {
            logger.error("recording a reaction's answer failed", metadata: ["id": "\(item.localId)", "error": "\(error)"])
        }
        outboxWake.notify()
    }

    /// A message item that failed stays (⚠️, for `retry`); a reaction that failed is dropped and undone.
    func perform(_ action: OutboxItem.Action, _ item: OutboxItem) async {
        do {
            switch (action, item.kind) {
            case (.none, _), (.send, _), (.complete, _):
                break
            case (.retryLater, .message):
                try await store.recordAttempts(localId: item.localId, attempts: item.attempts)
            case (.retryLater, .reaction):
                try await store.recordReactionAttempts(id: item.localId, attempts: item.attempts)
            case (.fail(let reason), .message):
                hub.emit(try await store.markFailed(localId: item.localId, reason: reason, attempts: item.attempts))
            case (.fail(let reason), .reaction):
                let outcome = try await store.dropReaction(id: item.localId, reason: reason)
                _ = outbox.withLockedValue { $0.remove(item.localId) }
                hub.emit(outcome)
            }
        } catch {
            logger.error("recording an outbox change failed", metadata: ["localId": "\(item.localId)", "error": "\(error)"])
        }
    }
}
