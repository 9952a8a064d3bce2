import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol

extension ClientEngine {
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
    }
}

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
