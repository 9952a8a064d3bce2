import Foundation
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The embedded default's accept path (issue 13): a send is written straight into the store, one durable write;
/// SQLite's write-ahead log is the log it is recovered from.
@Suite struct OneDurableWriteTests {
    static let alice = "alice"
    static let device = "alice-phone"

    static func message(_ conversationId: String, _ index: Int, clientMessageId: String? = nil) -> BufferedMessage {
        BufferedMessage(
            serverId: Identifiers.uuidV7(nowMillis: 1_700_000_000_000 + Int64(index)), conversationId: conversationId, senderId: alice,
            senderDeviceId: device, clientMessageId: clientMessageId ?? String(format: "00000000-0000-4000-8000-%012x", index), type: "text",
            body: "m\(index)", clientTimestamp: 1, acceptedAt: 1_700_000_000_000 + Int64(index))
    }

    static func accept(_ store: SQLiteMessageStore, _ message: BufferedMessage, refusal: PigeonError? = nil) async throws -> AppendOutcome {
        try await withCheckedThrowingContinuation { continuation in
            store.accept(message, refusal: refusal) { continuation.resume(with: $0) }
        }
    }

    /// Submits every accept at once, in order, and returns their outcomes in that order.
    static func acceptAll(_ store: SQLiteMessageStore, _ messages: [BufferedMessage]) async throws -> [AppendOutcome] {
        let outcomes = NIOLockedValueBox([Int: Result<AppendOutcome, any Error>]())
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let left = NIOLockedValueBox(messages.count)
            for (index, message) in messages.enumerated() {
                store.accept(message, refusal: nil) { result in
                    outcomes.withLockedValue { $0[index] = result }
                    if left.withLockedValue({ $0 -= 1; return $0 }) == 0 { done.resume() }
                }
            }
        }
        return try outcomes.withLockedValue { outcomes in try messages.indices.map { try outcomes[$0]!.get() } }
    }

    static func allMessages(_ store: SQLiteMessageStore, _ conversationId: String) async throws -> [Message] {
        try await store.messages(conversationId: conversationId, after: 0, before: nil, limit: 1000).messages
    }

    static func openStore(_ directory: String) throws -> SQLiteMessageStore {
        try SQLiteMessageStore(path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
    }

    @Test func anAcceptIsStoredWithItsSeqAndItsEventsInTheSameCommit() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sink = StoreContractTests.RecordingSink()
        let store = try SQLiteMessageStore(path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: sink))
        let conversation = try await store.createConversation(creator: Self.alice, members: ["bob"], name: nil)
        let first = Self.message(conversation.id, 1)
        #expect(try await Self.accept(store, first) == .stored(seq: 1))
        #expect(try await Self.accept(store, Self.message(conversation.id, 2)) == .stored(seq: 2))
        // Its events were published once the completion ran (in the same commit's after-commit step).
        let published = try await sink.wait { events in events.filter { $0.type == "message.new" }.count == 4 }
        #expect(published.filter { $0.type == "message.stored" }.count == 2)
        #expect(try await Self.allMessages(store, conversation.id).map(\.seq) == [1, 2])

        // A resend (a new serverId, the same clientMessageId) is answered with the original and writes nothing.
        var resend = Self.message(conversation.id, 99, clientMessageId: first.clientMessageId)
        resend.body = "other content"
        #expect(try await Self.accept(store, resend) == .duplicate(serverId: first.serverId, acceptedAt: first.acceptedAt))
        // Refused (over the rate): a resend is still answered, a new message is not written.
        #expect(try await Self.accept(store, resend, refusal: .overloaded("full")) == .duplicate(serverId: first.serverId, acceptedAt: first.acceptedAt))
        await #expect(throws: PigeonError.self) { try await Self.accept(store, Self.message(conversation.id, 3), refusal: .overloaded("full")) }
        // A sender who is not a member: 404, nothing written, the others of the same commit unaffected.
        var outsider = Self.message(conversation.id, 4)
        outsider.senderId = "mallory"
        async let refused = Result(catching: { try await Self.accept(store, outsider) })
        async let fine = Self.accept(store, Self.message(conversation.id, 5))
        let refusedResult = await refused
        #expect((refusedResult.failure as? PigeonError)?.detail.code == .notFound)
        #expect(try await fine == .stored(seq: 3))
        #expect(try await Self.allMessages(store, conversation.id).map(\.body) == ["m1", "m2", "m5"])
    }

    /// Many concurrent accepts share commits and each conversation's seq stays gapless in submission order.
    @Test func concurrentAcceptsKeepEachSendersOrder() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Self.openStore(directory)
        let conversation = try await store.createConversation(creator: Self.alice, members: ["bob"], name: nil)
        let outcomes = try await Self.acceptAll(store, (0..<500).map { Self.message(conversation.id, $0) })
        #expect(outcomes == (0..<500).map { AppendOutcome.stored(seq: Int64($0 + 1)) })
        #expect(try await Self.allMessages(store, conversation.id).map(\.body) == (0..<500).map { "m\($0)" })
    }

    /// A power cut during a commit leaves a torn WAL tail. The store's files as they were after every accepted message
    /// of the first batch had its answer, followed by a cut-off tail of the second batch's commits (cut at random
    /// offsets, or garbage, or a corrupted frame): on opening, every answered message of the first batch is there once,
    /// what survived of the second is a prefix of it in order, and resending the second batch stores each message once.
    @Test(arguments: ["truncated", "garbage", "corrupted"])
    func aTornWriteAheadLogTailLosesNoAnsweredMessage(_ damage: String) async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Self.openStore(directory)
        let conversation = try await store.createConversation(creator: Self.alice, members: ["bob"], name: nil)
        let firstBatch = (0..<30).map { Self.message(conversation.id, $0) }
        let secondBatch = (30..<60).map { Self.message(conversation.id, $0) }
        for message in firstBatch { _ = try await Self.accept(store, message) }
        // The crash image after the first batch's answers: nothing is checkpointed while the store is open (no
        // checkpointer runs here), so the database file stays as it is and the WAL only grows.
        let databaseImage = try Data(contentsOf: URL(fileURLWithPath: directory + "/store.sqlite"))
        let walAfterFirst = try Data(contentsOf: URL(fileURLWithPath: directory + "/store.sqlite-wal"))
        // Submitted in order without waiting (several per commit, as under load), so they are stored in that order.
        _ = try await Self.acceptAll(store, secondBatch)
        let walAfterSecond = try Data(contentsOf: URL(fileURLWithPath: directory + "/store.sqlite-wal"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: directory + "/store.sqlite")) == databaseImage, "the test's premise: no checkpoint ran")
        #expect(walAfterSecond.count > walAfterFirst.count && walAfterSecond.prefix(walAfterFirst.count) == walAfterFirst, "the test's premise: the WAL only grew")

        var generator = SystemRandomNumberGenerator()
        let rounds = damage == "truncated" ? 8 : 3
        for round in 0..<rounds {
            var wal: Data
            switch damage {
            case "truncated":
                // Cut anywhere inside the second batch's frames, including mid-frame and mid-header.
                wal = walAfterSecond.prefix(Int.random(in: walAfterFirst.count..<walAfterSecond.count, using: &generator))
            case "garbage":
                wal = walAfterFirst + Data((0..<Int.random(in: 1...20_000, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
            default:
                // A flipped byte somewhere in the second batch's frames: recovery stops at the frame whose checksum fails.
                wal = walAfterSecond
                let offset = Int.random(in: walAfterFirst.count..<walAfterSecond.count, using: &generator)
                wal[offset] ^= 0xFF
            }
            let image = directory + "/image-\(round)"
            try FileManager.default.createDirectory(atPath: image, withIntermediateDirectories: true)
            try databaseImage.write(to: URL(fileURLWithPath: image + "/store.sqlite"))
            try wal.write(to: URL(fileURLWithPath: image + "/store.sqlite-wal"))

            let recovered = try Self.openStore(image)
            let survivors = try await Self.allMessages(recovered, conversation.id)
            #expect(survivors.map(\.seq) == Array(1...Int64(survivors.count)), "\(damage): seq gapless")
            #expect(Array(survivors.prefix(30).map(\.serverId)) == firstBatch.map(\.serverId), "\(damage): every answered message of the first batch, in order")
            let secondSurvivors = survivors.dropFirst(30).map(\.clientMessageId)
            #expect(Array(secondSurvivors) == Array(secondBatch.prefix(secondSurvivors.count).map(\.clientMessageId)), "\(damage): a prefix of the second batch")

            // The senders resend what they did not get answered (here: all of the second batch): stored once each.
            for message in secondBatch {
                var resend = message
                resend.serverId = Identifiers.uuidV7(nowMillis: WallClock.nowMillis())
                _ = try await Self.accept(recovered, resend)
            }
            let final = try await Self.allMessages(recovered, conversation.id)
            #expect(final.map(\.clientMessageId) == (firstBatch + secondBatch).map(\.clientMessageId), "\(damage): each message once, in order")
            #expect(final.map(\.seq) == Array(1...60))
        }
    }

    /// The accepts waiting for their commit are bounded by `maxBufferedMessages` on the one-write path too: past it a new
    /// send is `503 overloaded` with nothing stored, and a resend is still answered with its original.
    @Test(.enabled(if: TestBackend.current == .embedded, "the embedded store and buffer only"))
    func acceptsWaitingForTheirCommitAreBounded() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (alice, conversationId, original) = try await withTestServer(dataDirectory: directory) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let clientMessageId = newId()
            let original = try await client.sendAccepted(alice, to: conversation.id, body: "first", clientMessageId: clientMessageId)
            return (alice, conversation.id, (original, clientMessageId))
        }
        // No room at all: every new send is over the bound.
        try await withTestServer(dataDirectory: directory, configure: { $0.maxBufferedMessages = 0 }) { client in
            expectError(try await client.send(alice, to: conversationId, body: "refused"), 503, .overloaded, "over the bound")
            let resend = try await client.send(alice, to: conversationId, body: "first", clientMessageId: original.1)
            #expect(resend.status == 200, "\(resend.text)")
            #expect(try resend.decode(SendMessageResponse.self).serverId == original.0.serverId)
            #expect(try await client.allMessages(alice, conversationId).map(\.body) == ["first"])
        }
    }

    /// A data directory of a server that ran with `--separate-buffer` and stopped with messages buffered: the default
    /// server drains them into the store (and sends new ones straight to it).
    @Test(.enabled(if: TestBackend.current == .embedded, "the embedded store and buffer only"))
    func aLeftoverSeparateBufferIsDrainedAtStart() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (alice, conversationId) = try await withTestServer(dataDirectory: directory, configure: { configuration in
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = { _ in throw TestFailure("held in the buffer") }
            configuration.maxAttempts = 1_000
            configuration.retryBaseDelay = .seconds(30)
        }) { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            for index in 0..<5 { _ = try await client.sendAccepted(alice, to: conversation.id, body: "buffered \(index)") }
            #expect(try await client.allMessages(alice, conversation.id).isEmpty)
            return (alice, conversation.id)
        }
        try await withTestServer(dataDirectory: directory) { client in
            let messages = try await client.waitForCount(alice, conversationId, 5)
            #expect(messages.map(\.body) == (0..<5).map { "buffered \($0)" })
            let direct = try await client.sendAccepted(alice, to: conversationId, body: "direct")
            // Stored when answered: no processor in between.
            #expect(try await client.allMessages(alice, conversationId).last?.serverId == direct.serverId)
            #expect(try await client.metric("pigeon_buffer_depth") == 0)
        }
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { error } else { nil }
    }
}

extension Result where Failure == any Error {
    fileprivate init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
