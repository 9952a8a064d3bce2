import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonSQLite
import PigeonTestSupport
import Testing

/// The ``AttachmentStore`` contract (API.md 1.2), with the message store of the same backend: uploads streamed,
/// stored once per content, read back in ranges; a refused or broken upload leaves nothing; who may read an upload;
/// stored messages carry and link their attachments, a delete for everyone unlinks them; the sweep; the stats.
/// Every backend runs it through ``StoreContractTests/withAttachmentStores(_:nodes:_:)``.
@Suite struct AttachmentStoreContractTests {
    typealias Kind = StoreContractTests.Kind

    /// An upload's body: `chunks`, then `failure` thrown if any, or a wait until cancelled with `hangs`.
    struct Body: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        var chunks: [ByteBuffer]
        var failure: (any Error & Sendable)?
        var hangs = false
        /// Awaited before each chunk after the first (lets concurrent uploads line up).
        var beforeNext: (@Sendable () async throws -> Void)?

        struct AsyncIterator: AsyncIteratorProtocol {
            var body: Body
            var index = 0

            mutating func next() async throws -> ByteBuffer? {
                if index > 0, let beforeNext = body.beforeNext { try await beforeNext() }
                guard index < body.chunks.count else {
                    if let failure = body.failure { throw failure }
                    if body.hangs { try await Task.sleep(for: .seconds(3600)) }
                    return nil
                }
                defer { index += 1 }
                return body.chunks[index]
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
    }

    struct BodyBroke: Error {}

    /// `count` bytes that differ with `seed`.
    static func bytes(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed) &* 7 &+ ($0 >> 8)) }
    }

    /// `bytes` as a body of chunks of `chunkSize`.
    static func body(_ bytes: [UInt8], chunkSize: Int = 10_000) -> Body {
        Body(chunks: stride(from: 0, to: bytes.count, by: chunkSize).map { ByteBuffer(bytes: bytes[$0..<min($0 + chunkSize, bytes.count)]) })
    }

    static func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() }

    static let epoch: Int64 = 1_700_000_000_000
    static let day = AttachmentLimits.unreferencedLifetimeMillis

    static func request(_ owner: String, length: Int, quota: Int64 = 1 << 30, at: Int64 = epoch, name: String = "photo.png") -> AttachmentUploadRequest {
        AttachmentUploadRequest(
            id: Identifiers.uuidV7(), ownerId: owner, name: name, contentType: "image/png", length: Int64(length), quotaBytes: quota, at: at)
    }

    /// The bytes `range` of `attachment`, checking each chunk is at most 256 KiB.
    static func read(
        _ store: any AttachmentStore, _ attachment: StoredAttachment, _ range: ClosedRange<Int64>? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in try await store.read(attachment, range: range) {
            #expect(chunk.readableBytes <= 256 * 1024, "a chunk of \(chunk.readableBytes) bytes", sourceLocation: sourceLocation)
            bytes += chunk.readableBytesView
        }
        return bytes
    }

    /// The attachment a message carries for `upload`, with the sender's dimensions.
    static func carried(_ upload: StoredAttachment) -> PigeonProtocol.Attachment {
        PigeonProtocol.Attachment(upload.upload, AttachmentReference(id: upload.id, width: 640, height: 480))
    }

    /// A processing item of `sender` carrying `attachments`.
    static func item(_ conversation: String, _ sender: String = "alice", carrying attachments: [PigeonProtocol.Attachment]) -> ProcessingItem {
        var item = StoreContractTests.item(conversation: conversation, sender: sender, device: "\(sender)-phone", body: "look")
        item.entry.message.attachments = attachments
        return item
    }

    /// Checks that nothing of a refused or broken upload is left in an embedded store's directory: no temporary file, and
    /// only the contents `kept` (other backends keep their bytes elsewhere and answer true).
    static func expectFiles(_ store: any AttachmentStore, only kept: [String], sourceLocation: SourceLocation = #_sourceLocation) throws {
        guard let store = store as? SQLiteAttachmentStore else { return }
        let directory = store.files.directory.path
        let manager = FileManager.default
        #expect(try manager.contentsOfDirectory(atPath: directory + "/tmp") == [], "no temporary file left", sourceLocation: sourceLocation)
        var contents: [String] = []
        for prefix in try manager.contentsOfDirectory(atPath: directory) where prefix != "tmp" {
            contents += try manager.contentsOfDirectory(atPath: directory + "/" + prefix)
        }
        #expect(contents.sorted() == kept.sorted(), "stored contents", sourceLocation: sourceLocation)
    }

    @Test(arguments: Kind.allCases) func anUploadIsReadBackWholeAndInRanges(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { _, stores in
            let store = stores[0]
            let bytes = Self.bytes(600 * 1024 + 123)
            let request = Self.request("alice", length: bytes.count)
            let stored = try await store.upload(request, body: Self.body(bytes, chunkSize: 65_536 + 7))
            #expect(
                stored
                    == StoredAttachment(
                        id: request.id, ownerId: "alice", name: "photo.png", contentType: "image/png", size: Int64(bytes.count),
                        sha256: Self.sha256(bytes), createdAt: Self.epoch, linked: false))
            #expect(try await store.attachments(ids: [request.id, "no-such-upload"]) == [stored])
            #expect(try await store.attachments(ids: []) == [])
            #expect(try await Self.read(store, stored) == bytes, "whole")
            let last = Int64(bytes.count - 1)
            let chunk: Int64 = 256 * 1024
            for range in [0...0, last...last, 0...last, 1...(last - 1), (chunk - 3)...(2 * chunk + 5), chunk...(chunk + 1), 100...200] {
                #expect(try await Self.read(store, stored, range) == Array(bytes[Int(range.lowerBound)...Int(range.upperBound)]), "\(range)")
            }
            #expect(try await store.storedBytes(of: "alice") == Int64(bytes.count))
            #expect(try await store.storedBytes(of: "bob") == 0)
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: Int64(bytes.count), orphans: 1, orphanBytes: Int64(bytes.count)))
            try Self.expectFiles(store, only: [stored.sha256])
        }
    }

    @Test(arguments: Kind.allCases) func equalBytesAreStoredOnceAndEachUploadKeepsItsOwnRow(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { _, stores in
            let store = stores[0]
            let bytes = Self.bytes(300_000, seed: 2)
            let size = Int64(bytes.count)
            let alices = try await store.upload(Self.request("alice", length: bytes.count, name: "a.png"), body: Self.body(bytes))
            let bobs = try await store.upload(Self.request("bob", length: bytes.count, at: Self.epoch + 10 * 3_600_000, name: "b.png"), body: Self.body(bytes))
            #expect(alices.id != bobs.id && alices.sha256 == bobs.sha256)
            #expect(alices.name == "a.png" && bobs.name == "b.png" && bobs.ownerId == "bob")
            #expect(try await store.storedBytes(of: "alice") == size, "each owner's quota counts it")
            #expect(try await store.storedBytes(of: "bob") == size)
            #expect(try await store.attachmentStats() == AttachmentStats(count: 2, bytes: size, orphans: 2, orphanBytes: size), "bytes counted once")
            try Self.expectFiles(store, only: [alices.sha256])
            // alice's upload is past its day, bob's is not: alice's goes, the bytes stay for bob's.
            #expect(try await store.sweep(now: Self.epoch + Self.day + 1) == AttachmentSweep(attachments: 1, bytes: 0))
            #expect(try await store.attachments(ids: [alices.id, bobs.id]) == [bobs])
            #expect(try await store.readable(id: bobs.id, by: "bob") == bobs)
            #expect(try await Self.read(store, bobs) == bytes)
            #expect(try await store.storedBytes(of: "alice") == 0)
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: size, orphans: 1, orphanBytes: size))
            try Self.expectFiles(store, only: [bobs.sha256])
            #expect(try await store.sweep(now: bobs.createdAt + Self.day + 1) == AttachmentSweep(attachments: 1, bytes: size))
            #expect(try await store.attachmentStats() == AttachmentStats())
            try Self.expectFiles(store, only: [])
        }
    }

    @Test(arguments: Kind.allCases) func aRefusedOrBrokenUploadLeavesNothing(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { _, stores in
            let store = stores[0]
            let kept = try await store.upload(Self.request("alice", length: 1000), body: Self.body(Self.bytes(1000, seed: 9)))
            let before = try await store.attachmentStats()
            let bytes = Self.bytes(700_000, seed: 3)
            let full = Self.body(bytes, chunkSize: 50_000)
            var short = full
            short.chunks.removeLast(2)
            var broken = full
            broken.chunks.removeLast(5)
            broken.failure = BodyBroke()
            let cases: [(String, AttachmentUploadRequest, Body, (any Error) -> Bool)] = [
                ("truncated", Self.request("alice", length: bytes.count), short, { $0 as? AttachmentUploadError == .truncated(received: 600_000, expected: 700_000) }),
                ("too long", Self.request("alice", length: bytes.count - 10), full, { $0 as? AttachmentUploadError == .tooLong(expected: 699_990) }),
                ("body throws", Self.request("alice", length: bytes.count), broken, { $0 is BodyBroke }),
                ("over the quota", Self.request("alice", length: bytes.count, quota: 700_999), full,
                 { $0 as? AttachmentUploadError == .quotaExceeded(used: 1000, quota: 700_999) }),
            ]
            for (name, request, body, expected) in cases {
                do {
                    let stored = try await store.upload(request, body: body)
                    Issue.record("\(name): stored \(stored)")
                } catch {
                    #expect(expected(error), "\(name): \(error)")
                }
                #expect(try await store.attachments(ids: [request.id]) == [], "\(name): no row")
                #expect(try await store.storedBytes(of: "alice") == 1000, "\(name)")
                #expect(try await store.attachmentStats() == before, "\(name)")
                try Self.expectFiles(store, only: [kept.sha256])
            }
            // Cancelled while the body is still coming.
            var hanging = full
            hanging.chunks.removeLast(4)
            hanging.hangs = true
            let request = Self.request("alice", length: bytes.count)
            let upload = Task { [hanging] in try await store.upload(request, body: hanging) }
            try await Task.sleep(for: .milliseconds(200))
            upload.cancel()
            await #expect(throws: (any Error).self, "cancelled") { try await upload.value }
            #expect(try await store.attachments(ids: [request.id]) == [])
            #expect(try await store.attachmentStats() == before)
            try Self.expectFiles(store, only: [kept.sha256])
            #expect(try await Self.read(store, kept) == Self.bytes(1000, seed: 9))
        }
    }

    /// Two uploads that each fit the quota but not together, both past the first check before either commits: at most
    /// one is stored.
    @Test(arguments: Kind.allCases) func concurrentUploadsCannotPassTheQuotaTogether(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { _, stores in
            let store = stores[0]
            let started = NIOLockedValueBox(0)
            let bothStarted: @Sendable () async throws -> Void = {
                started.withLockedValue { $0 += 1 }
                let deadline = ContinuousClock.now + .seconds(10)
                while started.withLockedValue({ $0 }) < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
            }
            let contents = [Self.bytes(600, seed: 4), Self.bytes(600, seed: 5)]
            let outcomes = await withTaskGroup(of: Result<StoredAttachment, any Error>.self) { group in
                for bytes in contents {
                    var body = Self.body(bytes, chunkSize: 300)
                    body.beforeNext = bothStarted
                    group.addTask {
                        do { return .success(try await store.upload(Self.request("carol", length: 600, quota: 1000), body: body)) } catch {
                            return .failure(error)
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            let stored = outcomes.compactMap { try? $0.get() }
            #expect(stored.count == 1, "\(outcomes)")
            for case .failure(let error) in outcomes {
                #expect(error as? AttachmentUploadError == .quotaExceeded(used: 600, quota: 1000))
            }
            #expect(try await store.storedBytes(of: "carol") == 600)
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: 600, orphans: 1, orphanBytes: 600))
            try Self.expectFiles(store, only: stored.map(\.sha256))
        }
    }

    /// The sweep erases the bytes of an expired upload while an upload of the same bytes commits: whichever comes
    /// first, the new upload's bytes are there to read.
    @Test(arguments: Kind.allCases) func aSweepNeverErasesBytesAnUploadOfTheSameContentIsCommitting(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { _, stores in
            let store = stores[0]
            for round in 0..<20 {
                let bytes = Self.bytes(20_000 + round, seed: UInt8(round))
                _ = try await store.upload(Self.request("alice", length: bytes.count), body: Self.body(bytes))
                async let swept = store.sweep(now: Self.epoch + Self.day + 1)
                let fresh = try await store.upload(Self.request("bob", length: bytes.count, at: Self.epoch + Self.day), body: Self.body(bytes, chunkSize: 997))
                #expect(try await swept.attachments >= 1, "round \(round)")
                #expect(try await Self.read(store, fresh) == bytes, "round \(round)")
                try Self.expectFiles(store, only: [fresh.sha256])
                #expect(try await store.sweep(now: Self.epoch + 3 * Self.day) == AttachmentSweep(attachments: 1, bytes: Int64(bytes.count)))
            }
        }
    }

    @Test(arguments: Kind.allCases) func anUploadIsReadableByItsOwnerAndByMembersWhoSeeAMessageCarryingIt(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { messageStores, stores in
            let (messages, store) = (messageStores[0], stores[0])
            let group = try await messages.createConversation(creator: "alice", members: ["bob"], name: "g")
            let bytes = Self.bytes(5000, seed: 6)
            let upload = try await store.upload(Self.request("alice", length: bytes.count), body: Self.body(bytes))
            #expect(try await store.readable(id: upload.id, by: "alice") == upload, "the owner")
            #expect(try await store.readable(id: upload.id, by: "bob") == nil, "not carried by any message yet")
            let attachment = Self.carried(upload)
            let item = Self.item(group.id, carrying: [attachment])
            #expect(StoreContractTests.seqs(try await messages.process([item])) == [1])
            var linked = upload
            linked.linked = true
            #expect(try await store.readable(id: upload.id, by: "bob") == linked, "a member who sees the message")
            #expect(try await store.readable(id: upload.id, by: "alice") == linked)
            #expect(try await store.readable(id: upload.id, by: "carol") == nil, "a stranger")
            #expect(try await store.readable(id: "no-such-upload", by: "alice") == nil)
            _ = try await messages.changeMembership(
                conversationId: group.id, by: DeviceIdentity(userId: "alice", deviceId: "alice-phone"), .add(userIds: ["dave"], role: .member),
                maxMembers: 10)
            #expect(try await messages.member("dave", of: group.id)?.joinedSeq == 2)
            #expect(try await store.readable(id: upload.id, by: "dave") == nil, "joined after the message")
            // Every read of the message carries its attachments.
            let page = try await messages.messages(conversationId: group.id, after: 0, before: nil, limit: 10)
            #expect(page.messages.first?.attachments == [attachment])
            #expect(page.messages.dropFirst().allSatisfy { $0.attachments.isEmpty }, "the membership message carries none")
            #expect(try await messages.messages(conversationId: group.id, after: nil, before: 2, limit: 10).messages.map(\.attachments) == [[attachment]])
            let stream = try await RelationsStoreContractTests.stream(messages, RelationsStoreContractTests.device("bob"))
            let replayed = stream.compactMap { if case .messageNew(_, let message) = $0, message.seq == 1 { message } else { nil } }
            #expect(replayed.map(\.attachments) == [[attachment]], "message.new read back from the event log")
            let thread = try #require(
                try await messages.threadMessages(
                    conversationId: group.id, root: item.entry.message.serverId, after: nil, before: nil, limit: 10, visibleFrom: 0, reader: "bob"))
            #expect(thread.root.attachments == [attachment])
            // Carried by a message: no sweep removes it, however late.
            #expect(try await store.sweep(now: Self.epoch + 100 * Self.day) == AttachmentSweep())
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: 5000, orphans: 0, orphanBytes: 0))
            #expect(try await Self.read(store, upload) == bytes)
        }
    }

    @Test(arguments: Kind.allCases) func aMessageCarryingAnUploadSweptMeanwhileIsStoredWithoutLinkingIt(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { messageStores, stores in
            let (messages, store) = (messageStores[0], stores[0])
            let group = try await messages.createConversation(creator: "alice", members: ["bob"], name: "g")
            let upload = try await store.upload(Self.request("alice", length: 300), body: Self.body(Self.bytes(300)))
            #expect(try await store.sweep(now: Self.epoch + Self.day + 1) == AttachmentSweep(attachments: 1, bytes: 300))
            #expect(StoreContractTests.seqs(try await messages.process([Self.item(group.id, carrying: [Self.carried(upload)])])) == [1])
            let page = try await messages.messages(conversationId: group.id, after: 0, before: nil, limit: 10)
            #expect(page.messages.map(\.attachments) == [[Self.carried(upload)]], "the message keeps what it was sent with")
            #expect(try await store.readable(id: upload.id, by: "bob") == nil)
            #expect(try await store.attachmentStats() == AttachmentStats())
        }
    }

    @Test(arguments: Kind.allCases) func aDeadLetterKeepsItsAttachments(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { messageStores, stores in
            let (messages, store) = (messageStores[0], stores[0])
            let group = try await messages.createConversation(creator: "alice", members: ["bob"], name: "g")
            let upload = try await store.upload(Self.request("carol", length: 100), body: Self.body(Self.bytes(100)))
            var item = Self.item(group.id, "carol", carrying: [Self.carried(upload)])
            item.isFinalAttempt = true
            let results = try await messages.process([item])
            guard case .deadLettered = results[0] else {
                Issue.record("carol is no member: \(results[0])")
                return
            }
            let serverId = item.entry.message.serverId
            #expect(try await messages.deadLetter(serverId: serverId) == item.entry.message, "the buffered message, attachments and all")
            #expect(try await messages.deadLetters(limit: 10).first { $0.message.serverId == serverId }?.message.attachments == [Self.carried(upload)])
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: 100, orphans: 1, orphanBytes: 100), "not linked")
        }
    }

    @Test(arguments: Kind.allCases) func aDeleteForEveryoneUnlinksAndTheSweepRemovesTheUploadAtOnce(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { messageStores, stores in
            let (messages, store) = (messageStores[0], stores[0])
            let group = try await messages.createConversation(creator: "alice", members: ["bob"], name: "g")
            let bytes = Self.bytes(40_000, seed: 7)
            let upload = try await store.upload(Self.request("alice", length: bytes.count, at: WallClock.nowMillis()), body: Self.body(bytes))
            let other = try await store.upload(Self.request("alice", length: 10, at: WallClock.nowMillis()), body: Self.body(Self.bytes(10, seed: 8)))
            let item = Self.item(group.id, carrying: [Self.carried(upload)])
            let kept = Self.item(group.id, carrying: [Self.carried(other)])
            #expect(StoreContractTests.seqs(try await messages.process([item, kept])) == [1, 2])
            let target = item.entry.message.serverId
            // An edit keeps the attachments.
            _ = try await messages.process([GroupStoreContractTests.change(target, in: group.id, newBody: "edited")])
            var page = try await messages.messages(conversationId: group.id, after: 0, before: nil, limit: 10)
            #expect(page.messages[0].body == "edited" && page.messages[0].attachments == [Self.carried(upload)])
            #expect(try await store.attachmentStats() == AttachmentStats(count: 2, bytes: 40_010, orphans: 0, orphanBytes: 0))
            let deleted = try await messages.process([GroupStoreContractTests.change(target, in: group.id, newBody: nil)])
            guard case .stored = deleted[0] else {
                Issue.record("the delete was \(deleted[0])")
                return
            }
            #expect(try await store.readable(id: upload.id, by: "bob") == nil, "no message carries it any more")
            #expect(try await store.readable(id: other.id, by: "bob") != nil, "the other message still carries its own")
            page = try await messages.messages(conversationId: group.id, after: 0, before: nil, limit: 10)
            #expect(page.messages[0].deletedAt != nil && page.messages[0].attachments == [], "the metadata is erased with the body")
            #expect(page.messages[1].attachments == [Self.carried(other)])
            #expect(try await store.attachmentStats() == AttachmentStats(count: 2, bytes: 40_010, orphans: 1, orphanBytes: 40_000))
            // Linked once, carried no more: removed at the next sweep, not a day later.
            #expect(try await store.sweep(now: WallClock.nowMillis()) == AttachmentSweep(attachments: 1, bytes: 40_000))
            #expect(try await store.attachments(ids: [upload.id, other.id]).map(\.id) == [other.id])
            #expect(try await store.readable(id: upload.id, by: "alice") == nil, "gone for its owner too")
            #expect(try await store.storedBytes(of: "alice") == 10)
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: 10, orphans: 0, orphanBytes: 0))
            try Self.expectFiles(store, only: [other.sha256])
        }
    }

    @Test(arguments: Kind.allCases) func anUploadNoMessageCarriesLivesADay(_ kind: Kind) async throws {
        try await StoreContractTests.withAttachmentStores(kind) { _, stores in
            let store = stores[0]
            let upload = try await store.upload(Self.request("alice", length: 2000), body: Self.body(Self.bytes(2000)))
            #expect(try await store.sweep(now: Self.epoch + Self.day - 1) == AttachmentSweep())
            #expect(try await store.attachments(ids: [upload.id]) == [upload])
            #expect(try await store.attachmentStats() == AttachmentStats(count: 1, bytes: 2000, orphans: 1, orphanBytes: 2000))
            #expect(try await store.sweep(now: Self.epoch + Self.day + 1) == AttachmentSweep(attachments: 1, bytes: 2000))
            #expect(try await store.attachments(ids: [upload.id]) == [])
            #expect(try await store.readable(id: upload.id, by: "alice") == nil)
            #expect(try await store.attachmentStats() == AttachmentStats())
            #expect(try await store.sweep(now: Self.epoch + 2 * Self.day) == AttachmentSweep())
            try Self.expectFiles(store, only: [])
        }
    }
}
