import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonSQLite
import PigeonTestSupport
import Testing

/// What only the embedded attachment store has: files on disk that a restart cleans up, memory that stays bounded
/// while a large upload streams through, and the embedded paths a message takes besides `process` (the direct accept,
/// the separate buffer).
@Suite struct SQLiteAttachmentStoreTests {
    typealias Contract = AttachmentStoreContractTests

    static var logger: Logger {
        var logger = Logger(label: "sqlite-attachments")
        logger.logLevel = .error
        return logger
    }

    static func open(_ directory: String) throws -> (SQLiteMessageStore, SQLiteAttachmentStore) {
        let store = try SQLiteMessageStore(
            path: directory + "/store.sqlite", durable: true, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
        let attachments = try SQLiteAttachmentStore(
            messageStore: store, directory: URL(fileURLWithPath: directory + "/attachments"), durable: true, logger: logger)
        return (store, attachments)
    }

    /// A killed process may leave a half-written upload in tmp/, or whole bytes renamed into place whose row never
    /// committed: opening the store again removes both, and keeps what rows name.
    @Test func whatAKilledUploadLeftIsRemovedWhenTheStoreIsOpenedAgain() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = Contract.bytes(70_000)
        let kept: StoredAttachment
        do {
            let (_, attachments) = try Self.open(directory)
            kept = try await attachments.upload(Contract.request("alice", length: bytes.count), body: Contract.body(bytes))
        }
        let root = directory + "/attachments"
        let manager = FileManager.default
        try Data(repeating: 1, count: 5000).write(to: URL(fileURLWithPath: root + "/tmp/" + UUID().uuidString.lowercased()))
        try Data(repeating: 2, count: 10).write(to: URL(fileURLWithPath: root + "/tmp/" + UUID().uuidString.lowercased()))
        let unnamed = Contract.bytes(3000, seed: 42)
        let unnamedSha = Contract.sha256(unnamed)
        try manager.createDirectory(atPath: root + "/" + unnamedSha.prefix(2), withIntermediateDirectories: true)
        try Data(unnamed).write(to: URL(fileURLWithPath: root + "/" + unnamedSha.prefix(2) + "/" + unnamedSha))
        try Data(repeating: 3, count: 10).write(to: URL(fileURLWithPath: root + "/" + kept.sha256.prefix(2) + "/" + String(repeating: "0", count: 64)))

        let (_, reopened) = try Self.open(directory)
        #expect(try manager.contentsOfDirectory(atPath: root + "/tmp") == [])
        try Contract.expectFiles(reopened, only: [kept.sha256])
        #expect(try await Contract.read(reopened, kept) == bytes)
        #expect(try await reopened.attachmentStats() == AttachmentStats(count: 1, bytes: 70_000, orphans: 1, orphanBytes: 70_000))
    }

    /// 64 KiB chunks, made as they are asked for; samples this process's resident memory every 64 of them.
    struct GeneratedBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        static let chunk = 64 * 1024
        var chunks: Int
        var peak: ResidentPeak?

        static func chunk(_ index: Int) -> ByteBuffer {
            var buffer = ByteBufferAllocator().buffer(capacity: chunk)
            buffer.writeRepeatingByte(UInt8(truncatingIfNeeded: index &* 37 &+ 11), count: chunk)
            buffer.setInteger(UInt64(index), at: 0)
            return buffer
        }

        struct AsyncIterator: AsyncIteratorProtocol {
            let body: GeneratedBody
            var index = 0

            mutating func next() async throws -> ByteBuffer? {
                guard index < body.chunks else { return nil }
                if index % 64 == 0 { body.peak?.sample() }
                defer { index += 1 }
                return GeneratedBody.chunk(index)
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
    }

    /// The largest resident size sampled.
    final class ResidentPeak: Sendable {
        private let peak = NIOLockedValueBox(0)
        func sample() {
            let now = SQLiteAttachmentStoreTests.residentBytes()
            peak.withLockedValue { $0 = max($0, now) }
        }
        var bytes: Int { peak.withLockedValue { $0 } }
    }

    /// This process's resident set size, from /proc/self/statm (its second field, in pages).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/proc/self/statm")))
    func aLargeUploadAndItsDownloadStreamInBoundedMemory() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (_, attachments) = try Self.open(directory)
        let chunks = 1024
        let length = chunks * GeneratedBody.chunk
        var hash = SHA256()
        for index in 0..<chunks { GeneratedBody.chunk(index).withUnsafeReadableBytes { hash.update(bufferPointer: $0) } }
        let expectedSha = hash.finalize().map { String(format: "%02x", $0) }.joined()
        // Warm up (thread pool, statements, allocator) with a small upload first.
        _ = try await attachments.upload(Contract.request("alice", length: 4 * GeneratedBody.chunk), body: GeneratedBody(chunks: 4))

        let before = Self.residentBytes()
        let peak = ResidentPeak()
        let stored = try await attachments.upload(Contract.request("alice", length: length), body: GeneratedBody(chunks: chunks, peak: peak))
        let after = Self.residentBytes()
        #expect(stored.sha256 == expectedSha && stored.size == Int64(length))

        var readHash = SHA256()
        var read = 0
        var readPeak = 0
        for try await chunk in try await attachments.read(stored, range: nil) {
            chunk.withUnsafeReadableBytes { readHash.update(bufferPointer: $0) }
            read += chunk.readableBytes
            if read % (4 << 20) == 0 { readPeak = max(readPeak, Self.residentBytes()) }
        }
        #expect(read == length)
        #expect(readHash.finalize().map { String(format: "%02x", $0) }.joined() == expectedSha)
        let mebibyte = Double(1 << 20)
        let growth = Double(after - before) / mebibyte
        let peakGrowth = Double(max(peak.bytes, after) - before) / mebibyte
        let readGrowth = Double(max(readPeak, after) - before) / mebibyte
        print(
            "64 MiB upload: RSS before \(String(format: "%.1f", Double(before) / mebibyte)) MiB, growth after \(String(format: "%.1f", growth)) MiB, "
                + "peak growth while uploading \(String(format: "%.1f", peakGrowth)) MiB, while downloading \(String(format: "%.1f", readGrowth)) MiB")
        #expect(growth < 16, "resident memory grew \(growth) MiB")
        #expect(peakGrowth < 16, "resident memory peaked \(peakGrowth) MiB above the start")
        #expect(readGrowth < 16, "resident memory peaked \(readGrowth) MiB above the start while reading")
    }

    /// The embedded default's direct accept (one durable write per message) stores and links attachments as
    /// `process` does.
    @Test func theDirectAcceptLinksTheAttachments() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (store, attachments) = try Self.open(directory)
        let group = try await store.createConversation(creator: "alice", members: ["bob"], name: "g")
        let upload = try await attachments.upload(Contract.request("alice", length: 100), body: Contract.body(Contract.bytes(100)))
        let message = Contract.item(group.id, carrying: [Contract.carried(upload)]).entry.message
        let outcome = try await withCheckedThrowingContinuation { continuation in
            store.accept(message, refusal: nil) { continuation.resume(with: $0) }
        }
        #expect(outcome == .stored(seq: 1))
        #expect(try await attachments.readable(id: upload.id, by: "bob")?.linked == true)
        #expect(try await store.messages(conversationId: group.id, after: 0, before: nil, limit: 10).messages.map(\.attachments) == [[Contract.carried(upload)]])
    }

    /// The separate buffer (`--separate-buffer`) keeps a message's attachments until it is stored.
    @Test func theEmbeddedBufferKeepsAMessagesAttachments() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let buffer = try EmbeddedBuffer(path: directory + "/buffer.sqlite", durable: false)
        let attachment = PigeonProtocol.Attachment(
            id: "u1", name: "clip.mp4", size: 12_345, contentType: "video/mp4", sha256: String(repeating: "ab", count: 32), width: 1920, height: 1080,
            durationMs: 61_000)
        var carrying = StoreContractTests.item(conversation: "c1").entry.message
        carrying.attachments = [attachment, PigeonProtocol.Attachment(id: "u2", name: "a b.txt", size: 0, contentType: "text/plain", sha256: "00")]
        let plain = StoreContractTests.item(conversation: "c1").entry.message
        for message in [carrying, plain] { _ = try await buffer.append(message) }
        let batch = try await buffer.nextBatch(max: 10, wait: .zero)
        #expect(batch.map(\.message) == [carrying, plain])
        try await buffer.requeue(carrying)
        #expect(try await buffer.nextBatch(max: 10, wait: .zero).map(\.message) == [carrying])
    }
}
