import Logging
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// The sweep: uploads no message carries, then bytes no upload names.
extension PostgresAttachmentStore {
    /// In one transaction: the uploads to remove are locked first (skipping those a message's transaction is linking,
    /// which holds them), then deleted by a statement that looks again for links, seeing every link committed before
    /// the locks were had. Then the bytes no upload names: their content locks are taken (skipping the contents an
    /// upload holds, from before it chooses the bytes it keeps until its row is committed), then they are deleted by a
    /// statement that looks again for uploads naming them. So bytes a committed upload names are never erased, and
    /// bytes skipped are erased by a later sweep.
    public func sweep(now: Int64) async throws -> AttachmentSweep {
        let cutoff = now - AttachmentLimits.unreferencedLifetimeMillis
        let removable = """
            (a.linked OR a.created_at < \(cutoff)) AND NOT EXISTS (SELECT 1 FROM message_attachments l WHERE l.attachment_id = a.id)
            """
        let unnamed = "NOT EXISTS (SELECT 1 FROM attachments a WHERE a.blob_id = b.id)"
        let logger = logger
        return try await client.withConnection { connection in
            try await Self.transaction(connection, logger: logger) { connection in
                var sweep = AttachmentSweep()
                var uploads: [String] = []
                for try await id in try await connection.query(
                    "SELECT a.id FROM attachments a WHERE \(unescaped: removable) FOR UPDATE OF a SKIP LOCKED", logger: logger
                ).decode(String.self) {
                    uploads.append(id)
                }
                if !uploads.isEmpty {
                    for try await count in try await connection.query(
                        """
                        WITH gone AS (DELETE FROM attachments a WHERE a.id = ANY(\(uploads)) AND \(unescaped: removable) RETURNING 1)
                        SELECT count(*) FROM gone
                        """, logger: logger
                    ).decode(Int.self) {
                        sweep.attachments = count
                    }
                }
                var (blobs, contents): ([Int64], [String]) = ([], [])
                for try await (id, sha256) in try await connection.query(
                    "SELECT b.id, b.sha256 FROM attachment_blobs b WHERE \(unescaped: unnamed)", logger: logger
                ).decode((Int64, String).self) {
                    blobs.append(id)
                    contents.append(sha256)
                }
                if !blobs.isEmpty {
                    var erasable: [Int64] = []
                    for try await id in try await connection.query(
                        """
                        SELECT t.id FROM unnest(\(blobs)::bigint[], \(contents)::text[]) AS t(id, sha256)
                        WHERE \(unescaped: Self.contentLockedForErasing("t.sha256"))
                        """, logger: logger
                    ).decode(Int64.self) {
                        erasable.append(id)
                    }
                    blobs = erasable
                }
                if !blobs.isEmpty {
                    for try await bytes in try await connection.query(
                        """
                        WITH gone AS (DELETE FROM attachment_blobs b WHERE b.id = ANY(\(blobs)) AND \(unescaped: unnamed) RETURNING b.size)
                        SELECT COALESCE(SUM(size), 0)::bigint FROM gone
                        """, logger: logger
                    ).decode(Int64.self) {
                        sweep.bytes = bytes
                    }
                }
                return sweep
            }
        }
    }
}
