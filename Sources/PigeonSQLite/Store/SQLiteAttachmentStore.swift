import Foundation
import GRDB
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PigeonDomain
import PigeonProtocol

/// The embedded store's attachments: rows in the message store's own database, bytes in files under `directory`.
///
/// The rows share the database (and the group-commit writer) of the ``SQLiteMessageStore`` given at init, so that
/// storing a message links its uploads in its own transaction and ``readable(id:by:)`` joins them with the
/// conversation's members. The bytes are content-addressed files (``AttachmentFiles``): equal bytes are stored once,
/// whatever the number of uploads naming them.
///
/// An upload is streamed into a temporary file while it is hashed, then (fsynced with `durable`) renamed into place,
/// and only then is its row committed, so a row always names whole bytes. What an error, a cancellation or a killed
/// process leaves on the way (a temporary file, or bytes renamed into place whose row never committed) is removed at
/// once, or when the store is next opened. "Name these bytes by a new row" (an upload's commit) and "erase bytes no
/// row names" (the sweep) hold a lock per content address, so the sweep never erases bytes a row is being committed
/// for. File I/O runs on NIO's blocking pool, a chunk at a time: an upload or a download holds a few chunks in
/// memory, whatever its size.
public final class SQLiteAttachmentStore: AttachmentStore {
    private let store: SQLiteMessageStore
    package let files: AttachmentFiles
    private let contentLocks = KeyedLock()
    private let logger: Logger

    /// Rows one sweep transaction deletes at most, so that message writes never wait long behind a large sweep.
    private static let sweepBatch = 500

    /// Opens the attachment storage under `directory` (created if needed) beside `messageStore`'s database, and
    /// removes what a killed process left there: temporary files, and bytes no upload's row names. Blocks while it
    /// looks through `directory`: call it at startup, before serving.
    public init(messageStore: SQLiteMessageStore, directory: URL, durable: Bool, logger: Logger) throws {
        self.store = messageStore
        self.files = AttachmentFiles(directory: directory, durable: durable, pool: .singleton, cipher: messageStore.cipher)
        self.logger = logger
        try files.prepare()
        let pool = messageStore.pool
        let removed = try files.removeLeftovers { contents in
            try pool.read { db in
                var named = Set<String>()
                for sha256 in contents where try Self.isNamed(db, sha256) { named.insert(sha256) }
                return named
            }
        }
        if removed.temporary + removed.unnamed > 0 {
            logger.info(
                "removed what an interrupted upload left",
                metadata: ["temporaryFiles": "\(removed.temporary)", "unnamedContents": "\(removed.unnamed)"])
        }
    }

    // MARK: Uploading

    public func upload<Body: AsyncSequence & Sendable>(_ request: AttachmentUploadRequest, body: Body) async throws -> StoredAttachment
    where Body.Element == ByteBuffer {
        let used = try await storedBytes(of: request.ownerId)
        if used + request.length > request.quotaBytes { throw AttachmentUploadError.quotaExceeded(used: used, quota: request.quotaBytes) }
        let received = try await receive(body, length: request.length)
        let attachment = StoredAttachment(
            id: request.id, ownerId: request.ownerId, name: request.name, contentType: request.contentType, size: request.length,
            sha256: received.sha256, createdAt: request.at)
        do {
            return try await commit(attachment, temporary: received.path, quotaBytes: request.quotaBytes)
        } catch {
            // Still in tmp/ when the rename into place did not happen.
            let (files, path) = (files, received.path)
            _ = try? await files.run { unlink(path) }
            throw error
        }
    }

    /// An upload's bytes, whole, in a temporary file.
    private struct Received: Sendable {
        var path: String
        var sha256: String
    }

    /// Streams `body` into a new temporary file, hashing it, and checks it is `length` bytes long: anything else (or an
    /// error, or a cancellation) removes the file and throws.
    private func receive<Body: AsyncSequence & Sendable>(_ body: Body, length: Int64) async throws -> Received where Body.Element == ByteBuffer {
        let files = files
        let file = try await files.run { try files.createTemporary() }
        var hasher = ContentHasher()
        var received: Int64 = 0
        var pending = ByteBufferAllocator().buffer(capacity: AttachmentFiles.chunkBytes)
        // Written a whole chunk at a time: a sealed file's chunks are found by their index.
        var index: Int64 = 0
        do {
            for try await chunk in body {
                received += Int64(chunk.readableBytes)
                if received > length { throw AttachmentUploadError.tooLong(expected: length) }
                pending.writeImmutableBuffer(chunk)
                while pending.readableBytes >= AttachmentFiles.chunkBytes {
                    hasher = try await Self.write(pending.readSlice(length: AttachmentFiles.chunkBytes)!, to: file, index: index, hashing: hasher, files)
                    index += 1
                }
                pending.discardReadBytes()
                try Task.checkCancellation()
            }
            if received < length { throw AttachmentUploadError.truncated(received: received, expected: length) }
            if pending.readableBytes > 0 { hasher = try await Self.write(pending, to: file, index: index, hashing: hasher, files) }
            try await files.run { try files.finish(file) }
        } catch {
            _ = try? await files.run { files.discard(file) }
            throw error
        }
        return Received(path: file.path, sha256: hasher.finalize())
    }

    /// Writes `buffer` to `file` as its chunk `index` and hashes it, both on the blocking pool; the hash so far.
    private static func write(
        _ buffer: ByteBuffer, to file: TemporaryFile, index: Int64, hashing hasher: ContentHasher, _ files: AttachmentFiles
    ) async throws -> ContentHasher {
        try await files.run {
            var hasher = hasher
            hasher.update(buffer)
            try files.append(buffer, to: file, index: index)
            return hasher
        }
    }

    /// Puts the bytes in place and commits the row, under the content's lock; if the row does not commit (the quota
    /// is passed by now, the database fails), bytes no row names are erased again.
    private func commit(_ attachment: StoredAttachment, temporary path: String, quotaBytes: Int64) async throws -> StoredAttachment {
        let files = files
        return try await contentLocks.withLock(attachment.sha256) {
            try await files.run { try files.place(temporary: path, sha256: attachment.sha256, size: attachment.size) }
            do {
                try await store.write { db in
                    // Checked again here: uploads of one owner that passed the first check together commit one by one.
                    let used = try Self.storedBytes(db, attachment.ownerId)
                    if used + attachment.size > quotaBytes { throw AttachmentUploadError.quotaExceeded(used: used, quota: quotaBytes) }
                    try db.execute(
                        sql: """
                            INSERT INTO attachments(id, owner_id, name, content_type, size, sha256, created_at, linked)
                                VALUES (?, ?, ?, ?, ?, ?, ?, 0)
                            """,
                        arguments: [
                            attachment.id, attachment.ownerId, attachment.name, attachment.contentType, attachment.size, attachment.sha256,
                            attachment.createdAt,
                        ])
                }
            } catch {
                let sha256 = attachment.sha256
                if let named = try? await store.pool.read({ db in try Self.isNamed(db, sha256) }), !named {
                    do {
                        _ = try await files.run { try files.erase(sha256) }
                    } catch let eraseError {
                        logger.warning("could not erase the bytes of a refused upload", metadata: ["error": "\(eraseError)"])
                    }
                }
                throw error
            }
            return attachment
        }
    }

    // MARK: Reading

    public func attachments(ids: [String]) async throws -> [StoredAttachment] {
        guard !ids.isEmpty else { return [] }
        return try await store.pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT \(Self.columns) FROM attachments WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                arguments: StatementArguments(ids)
            ).map(Self.attachment)
        }
    }

    public func readable(id: String, by userId: String) async throws -> StoredAttachment? {
        try await store.pool.read { db in
            try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT \(Self.columns) FROM attachments a WHERE a.id = ? AND (a.owner_id = ? OR EXISTS (
                            SELECT 1 FROM message_attachments l JOIN members m ON m.conversation_id = l.conversation_id
                            WHERE l.attachment_id = a.id AND m.user_id = ? AND m.joined_seq <= l.seq))
                        """),
                arguments: [id, userId, userId]
            ).map(Self.attachment)
        }
    }

    public func read(_ attachment: StoredAttachment, range: ClosedRange<Int64>?) async throws -> AttachmentBytes {
        let range = range ?? (attachment.size > 0 ? 0...(attachment.size - 1) : nil)
        let files = files
        guard let range, range.lowerBound >= 0, range.upperBound < attachment.size else {
            return AttachmentBytes(unfolding: { nil })
        }
        // Opened now: a sweep that erases the file later does not cut this read short.
        let (sha256, size) = (attachment.sha256, attachment.size)
        let file = try await files.run { try files.openContent(sha256, size: size) }
        let cursor = NIOLockedValueBox<(file: ContentFile?, next: Int64)>((file, range.lowerBound))
        let end = range.upperBound + 1
        // Pulled: the next chunk is read only when the reader asks for it.
        return AttachmentBytes(unfolding: {
            let (file, offset) = cursor.withLockedValue { ($0.file, $0.next) }
            guard let file, offset < end else { return nil }
            // Within one chunk: a sealed file opens a chunk at a time.
            let chunkBytes = Int64(AttachmentFiles.chunkBytes)
            let count = Int(min(chunkBytes - offset % chunkBytes, end - offset))
            let chunk = try await files.run { try files.readPlain(file, offset: offset, count: count) }
            cursor.withLockedValue { cursor in
                cursor.next = offset + Int64(count)
                // Let go of the file once the range is read, rather than when the stream goes.
                if cursor.next >= end { cursor.file = nil }
            }
            return chunk
        })
    }

    public func storedBytes(of ownerId: String) async throws -> Int64 {
        try await store.pool.read { db in try Self.storedBytes(db, ownerId) }
    }

    // MARK: Lifecycle

    public func sweep(now: Int64) async throws -> AttachmentSweep {
        let cutoff = now - AttachmentLimits.unreferencedLifetimeMillis
        var sweep = AttachmentSweep()
        /// The contents of the rows removed: sha256 → size.
        var contents: [String: Int64] = [:]
        while true {
            let removed = try await store.write { db -> [Removed] in
                let rows = try Row.fetchAll(
                    db.cachedStatement(
                        sql: """
                            SELECT id, sha256, size FROM attachments a WHERE (linked = 1 OR created_at < ?)
                                AND NOT EXISTS (SELECT 1 FROM message_attachments l WHERE l.attachment_id = a.id) LIMIT ?
                            """),
                    arguments: [cutoff, Self.sweepBatch]
                ).map { Removed(id: $0[0], sha256: $0[1], size: $0[2]) }
                for row in rows {
                    try db.cachedStatement(sql: "DELETE FROM attachments WHERE id = ?").execute(arguments: [row.id])
                }
                return rows
            }
            sweep.attachments += removed.count
            for row in removed { contents[row.sha256] = row.size }
            if removed.count < Self.sweepBatch { break }
        }
        for (sha256, size) in contents {
            if try await eraseIfUnnamed(sha256) { sweep.bytes += size }
        }
        if sweep.attachments > 0 {
            logger.debug("swept attachments", metadata: ["attachments": "\(sweep.attachments)", "bytes": "\(sweep.bytes)"])
        }
        return sweep
    }

    private struct Removed: Sendable {
        var id: String
        var sha256: String
        var size: Int64
    }

    /// Erases the content `sha256` unless a row names it (an upload of the same bytes may have committed since its
    /// last row went); whether it erased a file. A file that cannot be erased is logged and left for the next start.
    private func eraseIfUnnamed(_ sha256: String) async throws -> Bool {
        let files = files
        return try await contentLocks.withLock(sha256) {
            let named = try await store.pool.read { db in try Self.isNamed(db, sha256) }
            guard !named else { return false }
            do {
                return try await files.run { try files.erase(sha256) }
            } catch {
                logger.warning("could not erase the bytes of a swept attachment", metadata: ["sha256": "\(sha256)", "error": "\(error)"])
                return false
            }
        }
    }

    public func attachmentStats() async throws -> AttachmentStats {
        try await store.pool.read { db in
            let unlinked = "NOT EXISTS (SELECT 1 FROM message_attachments l WHERE l.attachment_id = a.id)"
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT
                        (SELECT count(*) FROM attachments),
                        (SELECT COALESCE(SUM(size), 0) FROM (SELECT MAX(size) AS size FROM attachments GROUP BY sha256)),
                        (SELECT count(*) FROM attachments a WHERE \(unlinked)),
                        (SELECT COALESCE(SUM(size), 0) FROM (SELECT MAX(size) AS size FROM attachments a WHERE \(unlinked) GROUP BY sha256))
                    """)!
            return AttachmentStats(count: row[0], bytes: row[1], orphans: row[2], orphanBytes: row[3])
        }
    }

    // MARK: Rows

    private static let columns = "id, owner_id, name, content_type, size, sha256, created_at, linked"

    /// An upload from a row of ``columns``.
    private static func attachment(_ row: Row) -> StoredAttachment {
        StoredAttachment(
            id: row[0], ownerId: row[1], name: row[2], contentType: row[3], size: row[4], sha256: row[5], createdAt: row[6], linked: row[7])
    }

    private static func storedBytes(_ db: Database, _ ownerId: String) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT COALESCE(SUM(size), 0) FROM attachments WHERE owner_id = ?"), arguments: [ownerId]) ?? 0
    }

    /// Whether an upload's row names the content `sha256`.
    private static func isNamed(_ db: Database, _ sha256: String) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT 1 FROM attachments WHERE sha256 = ? LIMIT 1"), arguments: [sha256]) ?? false
    }
}
