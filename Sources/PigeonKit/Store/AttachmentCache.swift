import Foundation
import PigeonProtocol

/// The files of attachments, for ``PigeonClient/attachmentFile(id:)``: this device's own copy of what it sent, else a
/// download kept in ``AttachmentFiles/cache``, else a new download, checked against the attachment's SHA-256 before
/// anything reads it. The cache holds at most `limit` bytes: after each download the least recently used files go
/// until it fits (a download larger than the whole limit is handed out once and not kept).
final class AttachmentCache: Sendable {
    let store: LocalStore
    let limit: Int64
    /// Serialises the cache's bookkeeping (a file renamed into place, recorded, the oldest removed); downloads
    /// themselves run side by side.
    private let lock = AsyncSerialLock()

    init(store: LocalStore, limit: Int64) {
        self.store = store
        self.limit = limit
    }

    /// The file of the attachment `id`, fetched with `download` (into the file it is given) when this device has
    /// none; `temporary` when it is a download too large to keep, which the caller removes once read.
    func file(
        id: String, download: @Sendable (String, URL) async throws -> DownloadedAttachment
    ) async throws -> (url: URL, temporary: Bool) {
        let fileManager = FileManager.default
        let known = try await store.attachment(id: id)
        if let copy = known?.copy, fileManager.fileExists(atPath: copy.path) { return (copy, false) }
        let cached = store.files.cached(id: id)
        let hit = try await lock.withLock { () -> Bool in
            guard try await store.useCached(id: id) else { return false }
            if fileManager.fileExists(atPath: cached.path) { return true }
            try await store.removeCached(ids: [id])
            return false
        }
        if hit { return (cached, false) }

        let partial = try store.files.downloading(id: id)
        let downloaded = try await download(id, partial)
        let expected = known?.attachment.sha256 ?? downloaded.etag
        guard let expected, expected.lowercased() == downloaded.sha256, known.map({ $0.attachment.size == downloaded.size }) ?? true else {
            try? fileManager.removeItem(at: partial)
            throw PigeonClientError(
                .network,
                "attachment \(id): the \(downloaded.size) bytes that arrived do not match its SHA-256 \(expected ?? "(none given)"); try again")
        }
        guard downloaded.size <= limit else { return (partial, true) }
        try await lock.withLock {
            try? fileManager.removeItem(at: cached)
            do {
                try fileManager.moveItem(at: partial, to: cached)
            } catch {
                try? fileManager.removeItem(at: partial)
                throw PigeonClientError(.localDatabase, "cannot keep the download of \(id) in \(cached.path): \(error)")
            }
            try await store.addCached(id: id, size: downloaded.size)
            let evicted = try await store.cachedOverLimit(limit, keep: id)
            for old in evicted { try? fileManager.removeItem(at: store.files.cached(id: old)) }
            try await store.removeCached(ids: evicted)
        }
        return (cached, false)
    }
}
