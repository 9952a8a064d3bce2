import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonPostgres
import PigeonProtocol
import PigeonTestSupport
import Testing

/// The PostgreSQL attachment store beyond the shared contract: several nodes on one database, uploads that break in
/// every way leaving no row, no blob and no chunk, memory bounded whatever the size, and uploads that never take
/// message processing's connections. One test at a time: the memory test measures this process.
@Suite(.serialized) struct PostgresAttachmentTests {
    /// A body of `count` buffers of `size` bytes made as they are asked for (never held together), the content a
    /// function of the offset; after `pauseAfter` buffers it waits for `gate` (polled), after `failAfter` it throws,
    /// and after `hangAfter` it waits until cancelled.
    struct GeneratedBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        var count: Int
        var size: Int
        var pauseAfter: Int?
        var gate: NIOLockedValueBox<Bool>?
        /// Counts the bodies that reached their pause.
        var paused: NIOLockedValueBox<Int>?
        var failAfter: Int?
        var hangAfter: Int?
        /// Counts the bodies that went quiet at `hangAfter`.
        var hung: NIOLockedValueBox<Int>?

        init(count: Int, size: Int) {
            self.count = count
            self.size = size
        }

        struct AsyncIterator: AsyncIteratorProtocol {
            let body: GeneratedBody
            var index = 0

            mutating func next() async throws -> ByteBuffer? {
                if index == body.pauseAfter, let gate = body.gate {
                    body.paused?.withLockedValue { $0 += 1 }
                    while !gate.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
                }
                if index == body.failAfter { throw BodyBroke() }
                if index == body.hangAfter {
                    body.hung?.withLockedValue { $0 += 1 }
                    try await Task.sleep(for: .seconds(3600))
                }
                guard index < body.count else { return nil }
                defer { index += 1 }
                return GeneratedBody.buffer(index, size: body.size)
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }

        var length: Int { count * size }

        /// Bytes the buffers are cut from (a copy is cheap, even unoptimised).
        static let pattern: [UInt8] = (0..<(1 << 17)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }

        /// Buffer `index`: a slice of ``pattern`` that starts at a place depending on it, its index in its first bytes.
        static func buffer(_ index: Int, size: Int) -> ByteBuffer {
            var buffer = ByteBuffer()
            buffer.reserveCapacity(size)
            var left = size
            var start = (index &* 7_919) % pattern.count
            while left > 0 {
                let count = Swift.min(left, pattern.count - start)
                buffer.writeBytes(pattern[start..<(start + count)])
                left -= count
                start = 0
            }
            _ = withUnsafeBytes(of: UInt64(index).littleEndian) { bytes in
                buffer.setBytes(bytes.prefix(Swift.min(8, size)), at: buffer.readerIndex)
            }
            return buffer
        }

        /// The SHA-256 of the whole body, computed by making it once more.
        var sha256: String {
            var hasher = SHA256()
            for index in 0..<count { GeneratedBody.buffer(index, size: size).withUnsafeReadableBytes { hasher.update(bufferPointer: $0) } }
            return hasher.finalize().map { String(format: "%02x", $0) }.joined()
        }
    }

    struct BodyBroke: Error {}

    static func request(_ owner: String, length: Int, quota: Int64 = 1 << 40) -> AttachmentUploadRequest {
        AttachmentUploadRequest(
            id: Identifiers.uuidV7(), ownerId: owner, name: "file.bin", contentType: "application/octet-stream", length: Int64(length),
            quotaBytes: quota, at: WallClock.nowMillis())
    }

    /// Rows of `attachments`, `attachment_blobs` and `attachment_chunks`.
    static func counts(_ store: PostgresMessageStore) async throws -> [Int] {
        for try await (uploads, blobs, chunks) in try await store.client.query(
            "SELECT (SELECT count(*) FROM attachments), (SELECT count(*) FROM attachment_blobs), (SELECT count(*) FROM attachment_chunks)"
        ).decode((Int, Int, Int).self) {
            return [uploads, blobs, chunks]
        }
        return []
    }

    static func read(_ store: any AttachmentStore, _ attachment: StoredAttachment, _ range: ClosedRange<Int64>? = nil) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in try await store.read(attachment, range: range) {
            #expect(chunk.readableBytes <= PostgresAttachmentStore.chunkSize)
            bytes += chunk.readableBytesView
        }
        return bytes
    }

    /// This process's resident memory, from /proc/self/statm.
    static func residentBytes() throws -> Int {
        let statm = try String(contentsOfFile: "/proc/self/statm", encoding: .utf8).split(separator: " ")
        guard statm.count > 1, let pages = Int(statm[1]) else { throw TestFailure("unreadable /proc/self/statm") }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    @Test func anUploadOnOneNodeIsReadBackOnAnother() async throws {
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 2) { _, stores in
            let body = GeneratedBody(count: 17, size: 65_536 + 3)
            let bytes = [UInt8]((0..<body.count).flatMap { GeneratedBody.buffer($0, size: body.size).readableBytesView })
            let request = Self.request("alice", length: body.length)
            let stored = try await stores[0].upload(request, body: body)
            #expect(stored.sha256 == body.sha256 && stored.size == Int64(bytes.count))
            #expect(try await stores[1].attachments(ids: [request.id]) == [stored])
            #expect(try await stores[1].readable(id: request.id, by: "alice") == stored)
            #expect(try await stores[1].readable(id: request.id, by: "bob") == nil)
            #expect(try await Self.read(stores[1], stored) == bytes)
            let chunk = Int64(PostgresAttachmentStore.chunkSize)
            let last = Int64(bytes.count - 1)
            for range in [0...0, last...last, 1...(last - 1), (chunk - 1)...chunk, chunk...(3 * chunk - 1), (2 * chunk + 5)...(4 * chunk + 1), 7...9] {
                #expect(try await Self.read(stores[1], stored, range) == Array(bytes[Int(range.lowerBound)...Int(range.upperBound)]), "\(range)")
            }
            #expect(try await stores[1].storedBytes(of: "alice") == Int64(bytes.count))
        }
    }

    /// A processing item of alice carrying `uploads`.
    static func item(_ conversation: String, carrying uploads: [StoredAttachment]) -> ProcessingItem {
        var item = StoreContractTests.item(conversation: conversation)
        item.entry.message.attachments = uploads.map { PigeonProtocol.Attachment($0.upload, AttachmentReference(id: $0.id)) }
        return item
    }

    /// The (upload, seq) links of the conversation.
    static func links(_ store: PostgresMessageStore, _ conversation: String) async throws -> [String] {
        var links: [String] = []
        for try await (id, seq) in try await store.client.query(
            "SELECT attachment_id, seq FROM message_attachments WHERE conversation_id = \(conversation) ORDER BY seq, attachment_id"
        ).decode((String, Int64).self) {
            links.append("\(id)@\(seq)")
        }
        return links
    }

    /// A message's uploads are linked whichever way its batch is stored: in one statement planned on the last seq this
    /// node cached, under the conversation's lock on a node without it, or under the lock after the one statement found
    /// the seq moved; a message deleted by a later one of its own batch carries nothing and links nothing.
    @Test func everyProcessingPathLinksTheUploads() async throws {
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 2) { messageStores, stores in
            var uploads: [StoredAttachment] = []
            for index in 0..<5 {
                let body = GeneratedBody(count: 1, size: 1000 + index)
                uploads.append(try await stores[0].upload(Self.request("alice", length: body.length), body: body))
            }
            let conversation = try await messageStores[0].createConversation(creator: "alice", members: ["bob"], name: nil).id
            #expect(StoreContractTests.seqs(try await messageStores[0].process([StoreContractTests.item(conversation: conversation)])) == [1])
            #expect(messageStores[0].lastSeqCache.withLockedValue { $0[conversation] } == 1, "node 0 plans its next batch on its cache")
            #expect(StoreContractTests.seqs(try await messageStores[0].process([Self.item(conversation, carrying: [uploads[0]])])) == [2])
            #expect(StoreContractTests.seqs(try await messageStores[1].process([Self.item(conversation, carrying: [uploads[1], uploads[2]])])) == [3])
            #expect(StoreContractTests.seqs(try await messageStores[0].process([Self.item(conversation, carrying: [uploads[2]])])) == [4])
            let deleted = Self.item(conversation, carrying: [uploads[3]])
            let delete = GroupStoreContractTests.change(deleted.entry.message.serverId, in: conversation, newBody: nil)
            #expect(StoreContractTests.seqs(try await messageStores[1].process([deleted, delete])) == [5, 6])
            #expect(
                try await Self.links(messageStores[0], conversation)
                    == ["\(uploads[0].id)@2", "\(uploads[1].id)@3", "\(uploads[2].id)@3", "\(uploads[2].id)@4"])
            let page = try await messageStores[1].messages(conversationId: conversation, after: 0, before: nil, limit: 10)
            #expect(page.messages.map { $0.attachments.map(\.id) } == [[], [uploads[0].id], [uploads[1].id, uploads[2].id], [uploads[2].id], [], []])
            for upload in uploads.prefix(3) {
                #expect(try await stores[1].readable(id: upload.id, by: "bob")?.linked == true)
            }
            #expect(try await stores[1].readable(id: uploads[3].id, by: "bob") == nil)
            #expect(try await stores[0].attachments(ids: [uploads[3].id, uploads[4].id]).map(\.linked).sorted { !$0 && $1 } == [false, true])
            // The upload of the deleted message goes at once, the one never sent waits for its day.
            #expect(try await stores[1].sweep(now: WallClock.nowMillis()) == AttachmentSweep(attachments: 1, bytes: 1003))
        }
    }

    @Test func twoNodesUploadingEqualBytesAtOnceStoreTwoRowsAndTheBytesOnce() async throws {
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 2) { messageStores, stores in
            let gate = NIOLockedValueBox(false)
            let paused = NIOLockedValueBox(0)
            var body = GeneratedBody(count: 12, size: 60_000)
            body.pauseAfter = 11
            body.gate = gate
            body.paused = paused
            let requests = [Self.request("alice", length: body.length), Self.request("bob", length: body.length)]
            try await withThrowingTaskGroup(of: StoredAttachment.self) { group in
                for (store, request) in zip(stores, requests) { group.addTask { [body] in try await store.upload(request, body: body) } }
                // Both have staged their chunks before either stores its blob.
                let deadline = ContinuousClock.now + .seconds(10)
                while paused.withLockedValue({ $0 }) < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
                #expect(paused.withLockedValue { $0 } == 2)
                gate.withLockedValue { $0 = true }
                let stored = try await group.reduce(into: []) { $0.append($1) }
                #expect(Set(stored.map(\.id)) == Set(requests.map(\.id)))
                #expect(Set(stored.map(\.sha256)) == [body.sha256])
            }
            let chunks = (body.length + PostgresAttachmentStore.chunkSize - 1) / PostgresAttachmentStore.chunkSize
            #expect(try await Self.counts(messageStores[0]) == [2, 1, chunks])
            for (store, request) in zip(stores.reversed(), requests) {
                let upload = try #require(try await store.attachments(ids: [request.id]).first)
                #expect(try await Self.read(store, upload).count == body.length)
            }
            #expect(try await stores[0].attachmentStats() == AttachmentStats(count: 2, bytes: Int64(body.length), orphans: 2, orphanBytes: Int64(body.length)))
        }
    }

    @Test func aBodyThatBreaksOrEndsEarlyOrRunsOverLeavesNoRowNoBlobNoChunk() async throws {
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 1) { messageStores, stores in
            var broken = GeneratedBody(count: 10, size: 100_000)
            broken.failAfter = 7
            do {
                _ = try await stores[0].upload(Self.request("alice", length: broken.length), body: broken)
                Issue.record("a broken body was stored")
            } catch {
                #expect(error is BodyBroke, "\(error)")
            }
            #expect(try await Self.counts(messageStores[0]) == [0, 0, 0])
            let short = GeneratedBody(count: 9, size: 100_000)
            do {
                _ = try await stores[0].upload(Self.request("alice", length: 1_000_000), body: short)
                Issue.record("a truncated body was stored")
            } catch {
                #expect(error as? AttachmentUploadError == .truncated(received: 900_000, expected: 1_000_000))
            }
            #expect(try await Self.counts(messageStores[0]) == [0, 0, 0])
            do {
                _ = try await stores[0].upload(Self.request("alice", length: 999_999), body: GeneratedBody(count: 10, size: 100_000))
                Issue.record("a body longer than its length was stored")
            } catch {
                #expect(error as? AttachmentUploadError == .tooLong(expected: 999_999))
            }
            #expect(try await Self.counts(messageStores[0]) == [0, 0, 0])
            // The pool's connections are left usable: the same bytes go through.
            let whole = GeneratedBody(count: 10, size: 100_000)
            let stored = try await stores[0].upload(Self.request("alice", length: whole.length), body: whole)
            #expect(stored.sha256 == whole.sha256)
            #expect(try await Self.counts(messageStores[0]) == [1, 1, 4])
        }
    }

    @Test func aCancelledUploadLeavesNothing() async throws {
        // One connection for uploads: the next upload gets the cancelled one's connection, out of its transaction.
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 1, uploadConnections: 1) { messageStores, stores in
            let hung = NIOLockedValueBox(0)
            var hanging = GeneratedBody(count: 20, size: 65_536)
            hanging.hangAfter = 10
            hanging.hung = hung
            let store = stores[0]
            let upload = Task { [hanging] in try await store.upload(Self.request("alice", length: hanging.length), body: hanging) }
            // Two chunks of the ten buffers sent are written when the body goes quiet.
            let deadline = ContinuousClock.now + .seconds(10)
            while hung.withLockedValue({ $0 }) < 1, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            upload.cancel()
            await #expect(throws: (any Error).self) { try await upload.value }
            #expect(try await Self.counts(messageStores[0]) == [0, 0, 0])
            let whole = GeneratedBody(count: 20, size: 65_536)
            let stored = try await store.upload(Self.request("alice", length: whole.length), body: whole)
            #expect(stored.sha256 == whole.sha256)
            #expect(try await Self.counts(messageStores[0]) == [1, 1, 5])
        }
    }

    @Test func a64MiBUploadIsStreamedInBoundedMemory() async throws {
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 1) { _, stores in
            let body = GeneratedBody(count: 1024, size: 65_536)
            let store = stores[0]
            // A small upload first: the pool's connection and the code paths are warm before measuring.
            _ = try await store.upload(Self.request("alice", length: 65_536), body: GeneratedBody(count: 1, size: 65_536))
            let before = try Self.residentBytes()
            let started = ContinuousClock.now
            let stored = try await store.upload(Self.request("alice", length: body.length), body: body)
            let uploaded = ContinuousClock.now - started
            let afterUpload = try Self.residentBytes()
            var hasher = SHA256()
            var read = 0
            let reading = ContinuousClock.now
            for try await chunk in try await store.read(stored, range: nil) {
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                read += chunk.readableBytes
            }
            let downloaded = ContinuousClock.now - reading
            let afterRead = try Self.residentBytes()
            #expect(read == body.length)
            #expect(hasher.finalize().map { String(format: "%02x", $0) }.joined() == body.sha256)
            #expect(stored.sha256 == body.sha256)
            let mib = Double(1 << 20)
            print(
                "64 MiB upload: \(uploaded), RSS +\(Double(afterUpload - before) / mib) MiB; download: \(downloaded), RSS +\(Double(afterRead - before) / mib) MiB"
            )
            #expect(afterUpload - before < 16 << 20, "RSS grew by \(afterUpload - before) bytes during the upload")
            #expect(afterRead - before < 16 << 20, "RSS grew by \(afterRead - before) bytes by the end of the download")
        }
    }

    @Test func slowUploadsHoldingTheirTransactionsDoNotHoldUpProcessing() async throws {
        try await StoreContractTests.withPostgresAttachmentBackends(nodes: 1) { messageStores, stores in
            let gate = NIOLockedValueBox(false)
            let paused = NIOLockedValueBox(0)
            var body = GeneratedBody(count: 8, size: 65_536)
            body.pauseAfter = 5
            body.gate = gate
            body.paused = paused
            let (messages, store) = (messageStores[0], stores[0])
            try await withThrowingTaskGroup(of: StoredAttachment.self) { group in
                for index in 0..<6 {
                    group.addTask { [body] in try await store.upload(Self.request("user-\(index)", length: body.length), body: body) }
                }
                // The uploads' pool (4 connections) is all taken by uploads whose clients went quiet; two more wait.
                let deadline = ContinuousClock.now + .seconds(10)
                while paused.withLockedValue({ $0 }) < 4, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
                #expect(paused.withLockedValue { $0 } == 4)
                let started = ContinuousClock.now
                let conversation = try await messages.createConversation(creator: "alice", members: ["bob"], name: nil)
                let results = try await messages.process([StoreContractTests.item(conversation: conversation.id)])
                let page = try await messages.messages(conversationId: conversation.id, after: 0, before: nil, limit: 10)
                let took = ContinuousClock.now - started
                #expect(StoreContractTests.seqs(results) == [1] && page.messages.count == 1)
                #expect(took < .seconds(2), "processing took \(took) beside the uploads")
                gate.withLockedValue { $0 = true }
                let stored = try await group.reduce(into: []) { $0.append($1) }
                #expect(stored.count == 6)
            }
            #expect(try await Self.counts(messageStores[0]) == [6, 1, 2])
        }
    }
}
