import Foundation
import GRDB
import PigeonProtocol

/// Attachments (API.md 1.2) in the local database.
///
/// A message's attachments are a JSON column of the message (``LocalAttachment``s, in the sender's order). For one
/// this device sends, each names its copy in ``AttachmentFiles/sent`` and has no id until its upload is answered:
/// the outbox uploads those in order before the message goes, and an answered upload is written at once, so an app
/// killed mid-way uploads only what was not answered. The download cache's bookkeeping is the `attachmentCache`
/// table (``AttachmentCache``).
extension LocalStore {
    static func attachmentsColumn(_ attachments: [LocalAttachment]) -> String? {
        attachments.isEmpty ? nil : json(attachments)
    }

    static func decodeAttachments(_ text: String?) -> [LocalAttachment] {
        decodeJSON([LocalAttachment].self, text) ?? []
    }

    /// Whether an attachments column names an attachment not uploaded yet.
    static func hasUploadsPending(_ text: String?) -> Bool {
        decodeAttachments(text).contains { $0.id == nil }
    }

    /// The first attachment of the message `localId` without an id, with its place; `nil` when every one has its id
    /// (or the message is gone).
    func nextUpload(localId: Int64) async throws -> (index: Int, attachment: LocalAttachment)? {
        try await pool.read { db in
            let text = try String.fetchOne(db.cachedStatement(sql: "SELECT attachments FROM messages WHERE localId = ?"), arguments: [localId])
            let attachments = Self.decodeAttachments(text)
            return attachments.firstIndex { $0.id == nil }.map { ($0, attachments[$0]) }
        }
    }

    /// The server answered the upload of the attachment at `index` of the message `localId`: it has its id (and the
    /// server's word on its name, size, type and hash).
    func recordUpload(localId: Int64, index: Int, upload: AttachmentUpload) async throws {
        try await pool.write { db in
            let text = try String.fetchOne(db.cachedStatement(sql: "SELECT attachments FROM messages WHERE localId = ?"), arguments: [localId])
            var attachments = Self.decodeAttachments(text)
            guard attachments.indices.contains(index) else { return }
            attachments[index].id = upload.id
            attachments[index].name = upload.name
            attachments[index].size = upload.size
            attachments[index].contentType = upload.contentType
            attachments[index].sha256 = upload.sha256
            try db.cachedStatement(sql: "UPDATE messages SET attachments = ? WHERE localId = ?")
                .execute(arguments: [Self.attachmentsColumn(attachments), localId])
        }
    }

    /// The attachment `id` as a message on this device carries it, with this device's copy when it sent it (a copy
    /// is preferred); `nil` when no message here carries it.
    func attachment(id: String) async throws -> (attachment: LocalAttachment, copy: URL?)? {
        try await pool.read { db in
            let texts = try String.fetchAll(
                db.cachedStatement(sql: """
                    SELECT attachments FROM messages
                    WHERE attachments IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(messages.attachments) WHERE json_extract(value, '$.id') = ?)
                    ORDER BY isOutgoing DESC, localId
                    """),
                arguments: [id])
            let found = texts.flatMap(Self.decodeAttachments).filter { $0.id == id }
            guard let first = found.first else { return nil }
            if let own = found.first(where: { $0.file != nil }), let file = own.file {
                return (own, self.files.sent.appendingPathComponent(file))
            }
            return (first, nil)
        }
    }

    /// The copies in `sent/` among `files` that no message names (left by an app killed between the copy and the
    /// save, or by a message gone since).
    func unreferencedCopies(among files: [String]) throws -> [String] {
        guard !files.isEmpty else { return [] }
        let named = try pool.read { db in
            Set(try String.fetchAll(db, sql: "SELECT attachments FROM messages WHERE attachments IS NOT NULL").flatMap(Self.decodeAttachments).compactMap(\.file))
        }
        return files.filter { !named.contains($0) }
    }

    // MARK: The download cache

    /// Whether the download of `id` is in the cache; marks it used now.
    func useCached(id: String) async throws -> Bool {
        try await pool.write { db in
            try db.cachedStatement(sql: "UPDATE attachmentCache SET lastUsed = (SELECT coalesce(max(lastUsed), 0) + 1 FROM attachmentCache) WHERE id = ?")
                .execute(arguments: [id])
            return db.changesCount > 0
        }
    }

    /// Records a download put in the cache, used now.
    func addCached(id: String, size: Int64) async throws {
        try await pool.write { db in
            try db.cachedStatement(sql: """
                INSERT OR REPLACE INTO attachmentCache (id, size, lastUsed) VALUES (?, ?, (SELECT coalesce(max(lastUsed), 0) + 1 FROM attachmentCache))
                """).execute(arguments: [id, size])
        }
    }

    /// Forgets cached downloads (their files are removed by the caller).
    func removeCached(ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.write { db in
            for id in ids { try db.cachedStatement(sql: "DELETE FROM attachmentCache WHERE id = ?").execute(arguments: [id]) }
        }
    }

    /// The cached downloads to remove, least recently used first, for the cache to hold at most `limit` bytes; never
    /// `keep` (the one just used) unless it alone is over the limit.
    func cachedOverLimit(_ limit: Int64, keep: String?) async throws -> [String] {
        try await pool.read { db in
            var total = try Int64.fetchOne(db, sql: "SELECT coalesce(sum(size), 0) FROM attachmentCache") ?? 0
            var evicted: [String] = []
            let rows = try Row.fetchAll(db, sql: "SELECT id, size FROM attachmentCache ORDER BY lastUsed")
            for row in rows where total > limit {
                let id: String = row[0]
                if id == keep { continue }
                evicted.append(id)
                total -= row[1]
            }
            if total > limit, let keep { evicted.append(keep) }
            return evicted
        }
    }

    /// The bytes the cache holds, by its bookkeeping.
    func cachedBytes() async throws -> Int64 {
        try await pool.read { try Int64.fetchOne($0, sql: "SELECT coalesce(sum(size), 0) FROM attachmentCache") ?? 0 }
    }
}
