
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol

/// The outbox's dispatcher: hands due items to the connection (per conversation one at a time, in sending order),
/// uploads their attachments first, counts expired ACK deadlines as tries, and records every answer (accepted,
/// refused, transient) through the items' state machines (``OutboxItem``).
struct OutboxDispatcher: EnginePart {
    let shared: EngineShared

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
    func run() async {
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
    // MARK: Attachments

    /// Uploads the attachments of `item` that have no id yet, in order, each streamed from this device's copy and
    /// written with its id as soon as the server answers, then lets the message go (the outbox dispatches it in its
    /// turn). A failure is the item's state machine's to judge: tried again, interrupted, or the message failed.
    func upload(_ item: OutboxItem) async {
        let generation = connectionGeneration
        var current: String?
        do {
            while let (index, attachment) = try await store.nextUpload(localId: item.localId) {
                current = attachment.name
                let upload = try await upload(attachment, at: index, of: item.localId)
                try await store.recordUpload(localId: item.localId, index: index, upload: upload)
                outbox.withLockedValue { queue in
                    _ = queue.update(item.localId) { item in
                        item.attachmentUploaded()
                        return .none
                    }
                }
            }
            outbox.withLockedValue { queue in
                _ = queue.update(item.localId) { item in
                    item.uploadsFinished()
                    return .none
                }
            }
        } catch {
            await uploadFailed(item, attachment: current, error: error, connectionGeneration: generation)
        }
        outboxWake.notify()
    }

    /// One attachment's upload, announced as it goes; the server's answer, checked against what was sent.
    private func upload(_ attachment: LocalAttachment, at index: Int, of localId: Int64) async throws -> AttachmentUpload {
        guard let file = attachment.file, FileManager.default.fileExists(atPath: store.files.sent.appendingPathComponent(file).path) else {
            throw PigeonClientError.invalid("this device's copy of the file is gone")
        }
        let total = attachment.size
        let progress = NIOLockedValueBox(UploadProgress())
        let hub = self.hub
        hub.emit(.uploadProgress(localId: localId, attachmentIndex: index, sent: 0, total: total))
        let answer = try await transport.uploadAttachment(
            file: store.files.sent.appendingPathComponent(file).path, size: total, name: attachment.name, contentType: attachment.contentType
        ) { chunk in
            if let sent = progress.withLockedValue({ $0.add(chunk, total: total) }) {
                hub.emit(.uploadProgress(localId: localId, attachmentIndex: index, sent: sent, total: total))
            }
        }
        let sha256 = progress.withLockedValue { $0.digest() }
        guard answer.size == total, answer.sha256.lowercased() == sha256 else {
            throw PigeonClientError(
                .server, "the server stored \(answer.size) bytes with SHA-256 \(answer.sha256); \(total) bytes with SHA-256 \(sha256) were sent")
        }
        return answer
    }

    /// An upload ended without an answer to keep. A broken connection (or a refused token: the stream's own refusal
    /// signs the client out) is never a try: when the stream went too, or the client stopped, the upload starts again
    /// once online; while the stream stays up, after a backoff. The server's 408, 429, 5xx or no answer in time: a try, retried after a backoff until they are
    /// spent. Any other refusal (too large, over the quota, a bad name): the message fails, with the server's reason.
    private func uploadFailed(_ item: OutboxItem, attachment name: String?, error: any Error, connectionGeneration generation: Int) async {
        let error = error as? PigeonClientError ?? PigeonClientError(.localDatabase, "\(error)")
        let cancelled = Task.isCancelled
        let offline = cancelled || connectionGeneration != generation || connectionState != .online || !isNetworkEnabled
        let interrupted = cancelled || error.refusesToken || error.code == .network || (offline && error.code == .timeout)
        let transient = error.httpStatus.map { $0 == 408 || $0 == 429 || $0 >= 500 } ?? (error.isTransient || error.code == .localDatabase)
        let server = error.serverError ?? ErrorDetail(code: transient ? .internalError : .invalidRequest, message: error.message)
        let reason = ErrorDetail(code: server.code, message: name.map { "\($0): \(server.message)" } ?? server.message)
        if !interrupted {
            logger.debug("attachment upload failed", metadata: ["localId": "\(item.localId)", "error": "\(error)"])
        }
        let now = clock.now
        let jitter = self.jitter()
        let (action, current) = outbox.withLockedValue { queue -> (OutboxItem.Action, OutboxItem?) in
            let action = queue.update(item.localId) { item -> OutboxItem.Action in
                if interrupted {
                    return item.uploadInterrupted(backoff: offline ? nil : (now, self.settings.retryPolicy, jitter))
                }
                if transient {
                    return item.uploadFailed(
                        reason, retryAfter: error.retryAfterSeconds.map { .seconds($0) }, now: now, policy: self.settings.retryPolicy, jitter: jitter)
                }
                return item.uploadRefused(reason)
            }
            return (action, queue.items[item.localId])
        }
        await perform(action, current ?? item)
    }

    /// Uploads were found missing when the message was about to go: back to uploading.
    func uploadsFound(_ item: OutboxItem) {
        outbox.withLockedValue { queue in
            _ = queue.update(item.localId) { item in
                item.awaitUploads()
                return .none
            }
        }
        outboxWake.notify()
    }}

/// What one attachment's upload has put on the wire so far: the SHA-256 of the bytes and how many, and when to announce
/// the next progress (every 1 %, and not more often than each 64 KiB).
struct UploadProgress: Sendable {
    private var hasher = SHA256Digest()
    private(set) var sent: Int64 = 0
    private var announced: Int64 = 0

    /// Counts `chunk`; the bytes sent when that is worth announcing.
    mutating func add(_ chunk: ByteBuffer, total: Int64) -> Int64? {
        chunk.withUnsafeReadableBytes { hasher.update($0) }
        sent += Int64(chunk.readableBytes)
        guard sent >= total || sent - announced >= max(64 * 1024, total / 100) else { return nil }
        announced = sent
        return sent
    }

    func digest() -> String {
        hasher.hex
    }
}
