import Crypto
import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Attachments kept in PostgreSQL, beside the messages of the ``PostgresMessageStore`` they come with: every node of a
/// deployment reads what any node stored, and an upload is durable when its transaction commits.
///
/// - Bytes are stored once per content (`attachment_blobs`, by SHA-256) as chunks of ``chunkSize`` bytes
///   (`attachment_chunks`); each upload is its own row (`attachments`) naming them.
/// - An upload is one transaction on a connection of the uploads' own small pool
///   (``PostgresMessageStore/attachmentClient``), held while its client sends the body: slow clients take connections
///   from one another only. Its chunks are inserted as the body comes (never the whole body in memory) and its SHA-256
///   computed meanwhile. Equal bytes stored already: the staged chunks are rolled back (to a savepoint taken before
///   them) and the row names the stored ones, which a lock of the content keeps from the sweep until the row is
///   committed. The quota is checked again at the end, under a lock of the owner's uploads. An error, a cancellation,
///   a dropped client or a killed node rolls it all back: nothing is left to clean.
/// - Reads are pulled a few chunks per query as the reader asks, on the message store's pool (short queries).
/// - Links between messages and uploads are written by the message store, in the message's transaction
///   (``PostgresMessageStore/write(_:_:)``).
public struct PostgresAttachmentStore: AttachmentStore {
    /// Bytes per stored chunk (the last one of an upload is shorter); also the largest buffer a read yields.
    package static let chunkSize = 256 * 1024
    /// Chunks one read query fetches: a reader holds at most this many at a time.
    package static let chunksPerRead = 2
    /// First key of the advisory lock that serialises one owner's uploads at their quota check (the second is the
    /// owner's, hashed with the schema).
    package static let quotaLockKey: Int32 = 0x7067_6174

    package let client: PostgresClient
    package let uploads: PostgresClient
    package let logger: Logger
    /// Seals each chunk as it is stored, opens it as it is read (``PostgresMessageStore/cipher``).
    package let cipher: AtRestCipher

    /// The attachments of `messageStore`'s database: uploads on its ``PostgresMessageStore/attachmentClient`` pool,
    /// everything else on its main pool. Both run with ``PostgresMessageStore/run()``.
    public init(messageStore: PostgresMessageStore, logger: Logger) {
        self.client = messageStore.client
        self.uploads = messageStore.attachmentClient
        self.logger = logger
        self.cipher = messageStore.cipher
    }

    // MARK: Uploads

    public func upload<Body: AsyncSequence & Sendable>(_ request: AttachmentUploadRequest, body: Body) async throws -> StoredAttachment
    where Body.Element == ByteBuffer {
        let used = try await storedBytes(of: request.ownerId)
        guard used + request.length <= request.quotaBytes else {
            throw AttachmentUploadError.quotaExceeded(used: used, quota: request.quotaBytes)
        }
        let (logger, cipher) = (logger, cipher)
        return try await uploads.withConnection { connection in
            var content: String?
            do {
                let stored = try await Self.transaction(connection, logger: logger) { connection in
                    try await Self.store(request, body: body, connection, content: &content, cipher: cipher, logger: logger)
                }
                await Self.release(content: content, connection, logger: logger)
                return stored
            } catch {
                await Self.release(content: content, connection, logger: logger)
                throw error
            }
        }
    }

    /// A transaction on `connection`; the closure's own error is rethrown as it is. A connection whose rollback failed
    /// is closed, so that the pool never lends it in the middle of a transaction.
    package static func transaction<Result>(
        _ connection: PostgresConnection, logger: Logger, _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> sending Result {
        do {
            return try await connection.withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            if error.rollbackError != nil { try? await connection.close() }
            throw error.closureError ?? error.beginError ?? error.commitError ?? error
        }
    }

    /// The upload's transaction, from the first chunk to the row; `content` is set to the SHA-256 whose content lock
    /// (``lockContent(_:_:logger:)``) it took.
    private static func store<Body: AsyncSequence & Sendable>(
        _ request: AttachmentUploadRequest, body: Body, _ connection: PostgresConnection, content: inout String?, cipher: AtRestCipher,
        logger: Logger
    ) async throws -> StoredAttachment where Body.Element == ByteBuffer {
        var staged: Int64 = 0
        for try await id in try await connection.query("SELECT nextval('attachment_blob_ids')", logger: logger).decode(Int64.self) {
            staged = id
        }
        try await connection.query("SAVEPOINT staged", logger: logger)
        var hasher = SHA256()
        var received: Int64 = 0
        var chunk = ByteBuffer()
        chunk.reserveCapacity(chunkSize)
        var index: Int32 = 0
        for try await var buffer in body {
            try Task.checkCancellation()
            received += Int64(buffer.readableBytes)
            guard received <= request.length else { throw AttachmentUploadError.tooLong(expected: request.length) }
            buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            while buffer.readableBytes > 0 {
                var part = buffer.readSlice(length: min(chunkSize - chunk.readableBytes, buffer.readableBytes))!
                chunk.writeBuffer(&part)
                guard chunk.readableBytes == chunkSize else { continue }
                try await insertChunk(blob: staged, index: index, chunk, connection, cipher: cipher, logger: logger)
                index += 1
                chunk.clear()
            }
        }
        try Task.checkCancellation()
        guard received == request.length else { throw AttachmentUploadError.truncated(received: received, expected: request.length) }
        if chunk.readableBytes > 0 { try await insertChunk(blob: staged, index: index, chunk, connection, cipher: cipher, logger: logger) }
        let sha256 = hex(hasher.finalize())
        try await lockContent(sha256, connection, logger: logger)
        content = sha256
        let blob = try await keep(staged: staged, sha256: sha256, size: request.length, connection, logger: logger)
        // One owner's uploads pass this point one at a time (until their commit): the quota counts every upload
        // committed before, so two uploads cannot both fit in what only one fits in.
        try await connection.query(
            "SELECT pg_advisory_xact_lock(\(quotaLockKey), hashtext(current_schema() || ' ' || \(request.ownerId)))", logger: logger)
        var used: Int64 = 0
        for try await sum in try await connection.query(
            "SELECT COALESCE(SUM(size), 0)::bigint FROM attachments WHERE owner_id = \(request.ownerId)", logger: logger
        ).decode(Int64.self) {
            used = sum
        }
        guard used + request.length <= request.quotaBytes else {
            throw AttachmentUploadError.quotaExceeded(used: used, quota: request.quotaBytes)
        }
        let stored = StoredAttachment(
            id: request.id, ownerId: request.ownerId, name: request.name, contentType: request.contentType, size: request.length,
            sha256: sha256, createdAt: request.at)
        try await connection.query(
            """
            INSERT INTO attachments(id, owner_id, name, content_type, size, sha256, blob_id, created_at)
            VALUES (\(stored.id), \(stored.ownerId), \(stored.name), \(stored.contentType), \(stored.size), \(stored.sha256), \(blob),
                \(stored.createdAt))
            """, logger: logger)
        return stored
    }

    /// Stores chunk `index` of a blob, sealed when `cipher` has a key (the index authenticated with it).
    private static func insertChunk(
        blob: Int64, index: Int32, _ plain: ByteBuffer, _ connection: PostgresConnection, cipher: AtRestCipher, logger: Logger
    ) async throws {
        let data = cipher.isOn ? ByteBuffer(bytes: plain.withUnsafeReadableBytes { cipher.sealChunk($0, index: Int64(index)) }) : plain
        try await connection.query("INSERT INTO attachment_chunks(blob_id, n, data) VALUES (\(blob), \(index), \(data))", logger: logger)
    }

    /// The blob the upload's row names: the chunks staged under `staged` when these bytes are new, else (the staged
    /// chunks rolled back) the blob stored before. A concurrent upload of the same bytes that has not committed yet
    /// holds this up until it ends. The content lock is held: no sweep erases the blob stored before meanwhile.
    private static func keep(staged: Int64, sha256: String, size: Int64, _ connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        for try await id in try await connection.query(
            "INSERT INTO attachment_blobs(id, sha256, size) VALUES (\(staged), \(sha256), \(size)) ON CONFLICT (sha256) DO NOTHING RETURNING id",
            logger: logger
        ).decode(Int64.self) {
            return id
        }
        try await connection.query("ROLLBACK TO SAVEPOINT staged", logger: logger)
        for try await id in try await connection.query(
            "SELECT id FROM attachment_blobs WHERE sha256 = \(sha256) FOR KEY SHARE", logger: logger
        ).decode(Int64.self) {
            return id
        }
        throw PigeonError(.internalError, "the stored copy of the bytes \(sha256) was erased while an upload of them held its lock")
    }

    /// First key of the content locks (the second is the content's SHA-256, hashed with the schema).
    package static let contentLockKey: Int32 = 0x7067_6163

    /// The second key of the content lock of `sha256`, as SQL over a bind.
    private static func contentLockSQL(_ function: String, _ sha256: String) -> PostgresQuery {
        "SELECT \(unescaped: function)(\(contentLockKey), hashtext(current_schema() || ' ' || \(sha256)))"
    }

    /// Takes the shared content lock of `sha256`: while an upload of these bytes holds it, from before it decides to
    /// keep its own chunks or the stored ones until after its row is committed, the sweep does not erase them (it
    /// takes the lock exclusively, or skips them). Waits while a sweep is erasing them: then the upload keeps its own.
    ///
    /// A session lock, not a transaction's: it has to outlive the rollback to the savepoint that drops the staged
    /// chunks, which releases the locks taken since. ``release(content:_:logger:)`` releases it after the transaction;
    /// a connection that goes away releases it too.
    private static func lockContent(_ sha256: String, _ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(contentLockSQL("pg_advisory_lock_shared", sha256), logger: logger)
    }

    /// Releases the content lock an upload took (nothing when `content` is nil); a connection that cannot release it
    /// is closed, so that no lock stays with a connection of the pool (the upload's outcome stands either way).
    private static func release(content: String?, _ connection: PostgresConnection, logger: Logger) async {
        guard let content else { return }
        do {
            try await connection.query(contentLockSQL("pg_advisory_unlock_shared", content), logger: logger)
        } catch {
            logger.warning("closing an upload's connection that could not release its content lock", metadata: ["error": "\(error)"])
            try? await connection.close()
        }
    }

    /// The condition under which a sweep may erase the blob of `sha256` (a column): its content lock taken exclusively
    /// until the sweep commits, which only an upload of the same bytes in progress prevents.
    package static func contentLockedForErasing(_ sha256Column: String) -> String {
        "pg_try_advisory_xact_lock(\(contentLockKey), hashtext(current_schema() || ' ' || \(sha256Column)))"
    }

    /// Lowercase hex.
    package static func hex(_ digest: SHA256.Digest) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(2 * SHA256.byteCount)
        for byte in digest {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    // MARK: Rows

    package static let columns = "a.id, a.owner_id, a.name, a.content_type, a.size, a.sha256, a.created_at, a.linked"

    package static func attachment(_ t: (String, String, String, String, Int64, String, Int64, Bool)) -> StoredAttachment {
        StoredAttachment(id: t.0, ownerId: t.1, name: t.2, contentType: t.3, size: t.4, sha256: t.5, createdAt: t.6, linked: t.7)
    }

    public func attachments(ids: [String]) async throws -> [StoredAttachment] {
        guard !ids.isEmpty else { return [] }
        var found: [StoredAttachment] = []
        for try await row in try await client.query(
            "SELECT \(unescaped: Self.columns) FROM attachments a WHERE a.id = ANY(\(ids))", logger: logger
        ).decode((String, String, String, String, Int64, String, Int64, Bool).self) {
            found.append(Self.attachment(row))
        }
        return found
    }

    /// The owner, or a current member of a conversation with a message carrying it stored at or after the seq the
    /// member joined at (a deleted message carries nothing: its links went with its delete).
    public func readable(id: String, by userId: String) async throws -> StoredAttachment? {
        for try await row in try await client.query(
            """
            SELECT \(unescaped: Self.columns) FROM attachments a
            WHERE a.id = \(id) AND (a.owner_id = \(userId) OR EXISTS (
                SELECT 1 FROM message_attachments l
                JOIN members m ON m.conversation_id = l.conversation_id AND m.user_id = \(userId) AND m.joined_seq <= l.seq
                WHERE l.attachment_id = a.id))
            """, logger: logger
        ).decode((String, String, String, String, Int64, String, Int64, Bool).self) {
            return Self.attachment(row)
        }
        return nil
    }

    public func storedBytes(of ownerId: String) async throws -> Int64 {
        for try await sum in try await client.query(
            "SELECT COALESCE(SUM(size), 0)::bigint FROM attachments WHERE owner_id = \(ownerId)", logger: logger
        ).decode(Int64.self) {
            return sum
        }
        return 0
    }

    public func attachmentStats() async throws -> AttachmentStats {
        let unlinked = "NOT EXISTS (SELECT 1 FROM message_attachments l WHERE l.attachment_id = a.id)"
        for try await (count, bytes, orphans, orphanBytes) in try await client.query(
            """
            SELECT
                (SELECT count(*) FROM attachments),
                (SELECT COALESCE(SUM(b.size), 0)::bigint FROM attachment_blobs b
                    WHERE EXISTS (SELECT 1 FROM attachments a WHERE a.blob_id = b.id)),
                (SELECT count(*) FROM attachments a WHERE \(unescaped: unlinked)),
                (SELECT COALESCE(SUM(b.size), 0)::bigint FROM attachment_blobs b
                    WHERE EXISTS (SELECT 1 FROM attachments a WHERE a.blob_id = b.id AND \(unescaped: unlinked)))
            """, logger: logger
        ).decode((Int, Int64, Int, Int64).self) {
            return AttachmentStats(count: count, bytes: bytes, orphans: orphans, orphanBytes: orphanBytes)
        }
        return AttachmentStats()
    }
}
