import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Reading an upload's bytes: pulled from the chunks as the reader asks for them.
extension PostgresAttachmentStore {
    public func read(_ attachment: StoredAttachment, range: ClosedRange<Int64>?) async throws -> AttachmentBytes {
        guard attachment.size > 0 else { return AttachmentBytes { $0.finish() } }
        let range = range ?? 0...(attachment.size - 1)
        guard range.lowerBound >= 0, range.upperBound < attachment.size else {
            throw PigeonError.invalid("the range \(range) is not within the \(attachment.size) bytes of attachment \(attachment.id)")
        }
        var blob: Int64?
        for try await id in try await client.query(
            "SELECT id FROM attachment_blobs WHERE sha256 = \(attachment.sha256)", logger: logger
        ).decode(Int64.self) {
            blob = id
        }
        guard let blob else { throw PigeonError(.notFound, "the bytes of attachment \(attachment.id) are gone") }
        let reader = ChunkReader(client: client, blob: blob, range: range, cipher: cipher, logger: logger)
        return AttachmentBytes(unfolding: { try await reader.next() })
    }

    /// The chunks of one read, fetched ``PostgresAttachmentStore/chunksPerRead`` at a time when the previous ones were
    /// taken, the first and the last trimmed to the range by the query (chunks are stored uncompressed out of line, so a
    /// small range reads only the slices it needs).
    actor ChunkReader {
        let client: PostgresClient
        let blob: Int64
        let range: ClosedRange<Int64>
        let cipher: AtRestCipher
        let logger: Logger
        /// The next chunk to fetch, and the last one of the range.
        var nextChunk: Int64
        let last: Int64
        var fetched: [ByteBuffer] = []

        init(client: PostgresClient, blob: Int64, range: ClosedRange<Int64>, cipher: AtRestCipher, logger: Logger) {
            self.client = client
            self.cipher = cipher
            self.blob = blob
            self.range = range
            self.logger = logger
            let size = Int64(PostgresAttachmentStore.chunkSize)
            self.nextChunk = range.lowerBound / size
            self.last = range.upperBound / size
        }

        /// The next part of the range; nil after the last one. Throws if the bytes were erased while being read.
        func next() async throws -> ByteBuffer? {
            if fetched.isEmpty {
                guard nextChunk <= last else { return nil }
                let through = min(last, nextChunk + Int64(PostgresAttachmentStore.chunksPerRead) - 1)
                let size = Int64(PostgresAttachmentStore.chunkSize)
                let (lower, upper) = (range.lowerBound, range.upperBound)
                var expected = nextChunk
                // Sealed chunks are fetched whole (a seal opens only whole) and trimmed here.
                let query: PostgresQuery =
                    cipher.isOn
                    ? """
                    SELECT n, data FROM attachment_chunks WHERE blob_id = \(blob) AND n BETWEEN \(Int32(nextChunk)) AND \(Int32(through)) ORDER BY n
                    """
                    : """
                    SELECT n, substring(data FROM (GREATEST(\(lower) - n * \(size), 0) + 1)::integer
                        FOR (LEAST(\(upper) - n * \(size), \(size - 1)) - GREATEST(\(lower) - n * \(size), 0) + 1)::integer)
                    FROM attachment_chunks WHERE blob_id = \(blob) AND n BETWEEN \(Int32(nextChunk)) AND \(Int32(through)) ORDER BY n
                    """
                for try await (index, data) in try await client.query(query, logger: logger).decode((Int32, ByteBuffer).self) {
                    guard Int64(index) == expected else { break }
                    if cipher.isOn {
                        let plain = try PostgresMessageStore.openChunk(data, n: index, cipher: cipher)
                        let start = Int(max(lower - Int64(index) * size, 0))
                        let end = Int(min(upper - Int64(index) * size, Int64(plain.count) - 1))
                        fetched.append(ByteBuffer(bytes: plain[start...end]))
                    } else {
                        fetched.append(data)
                    }
                    expected += 1
                }
                guard expected == through + 1 else {
                    fetched.removeAll()
                    throw PigeonError(.notFound, "the bytes of this attachment were erased while being read")
                }
                fetched.reverse()
                nextChunk = through + 1
            }
            return fetched.popLast()
        }
    }
}
