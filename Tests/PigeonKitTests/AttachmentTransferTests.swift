import Foundation
import GRDB
@testable import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Attachments (API.md 1.2) against a real in-process server: through the outbox (copied, uploaded, then sent),
/// across a network loss and an app kill, refused, and downloaded into a bounded cache. One at a time: together they
/// move megabytes through several servers at once, which starves the timing checks of the suites beside them.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct AttachmentTransferTests {
    /// `count` bytes that differ from any other call's with another `seed`.
    static func bytes(_ count: Int, seed: UInt8) -> Data {
        var generator = SplitMix(seed: UInt64(seed))
        var data = Data(count: count)
        data.withUnsafeMutableBytes { (buffer: UnsafeMutableRawBufferPointer) in
            // Eight bytes a draw: a debug build fills megabytes without holding up the tests running beside it.
            for offset in stride(from: 0, to: count, by: 8) {
                withUnsafeBytes(of: generator.next()) { word in
                    for index in 0..<min(8, count - offset) { buffer[offset + index] = word[index] }
                }
            }
        }
        return data
    }

    /// A file of `data` named `name` in a new directory.
    static func file(_ name: String, _ data: Data) throws -> URL {
        let url = URL(fileURLWithPath: makeTemporaryDirectory()).appendingPathComponent(name)
        try data.write(to: url)
        return url
    }

    /// The message with `body` once it is on `device` (announced as received).
    static func received(_ body: String, on device: TestDevice, timeout: Duration = .seconds(30)) async throws -> PigeonMessage {
        try await waitUntil("\(device.userId) has \"\(body)\"", timeout: timeout) { device.received.contains { $0.body == body } }
        return try #require(device.received.first { $0.body == body })
    }

    /// The upload progress `device` announced for its message `localId`: (attachment, sent, total), in order.
    static func progress(of localId: Int64, on device: TestDevice) -> [(index: Int, sent: Int64, total: Int64)] {
        device.events.compactMap { event in
            guard case .uploadProgress(let id, let index, let sent, let total) = event, id == localId else { return nil }
            return (index, sent, total)
        }
    }

    @Test func attachmentsAreUploadedThroughTheOutboxAndArriveWithTheirBytes() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let photo = Self.bytes(300_000, seed: 1)
            let voice = Self.bytes(1_500_000, seed: 2)
            let voiceFile = try Self.file("voice.m4a", voice)

            let message = try alice.client.send(
                "look", to: conversation,
                attachments: [.data(photo, name: "plage été 100%.jpg", width: 640, height: 480), .file(voiceFile, durationMs: 4200)])
            #expect(message.status == .pending)
            #expect(message.attachments.map(\.name) == ["plage été 100%.jpg", "voice.m4a"])
            #expect(message.attachments.map(\.contentType) == ["image/jpeg", "audio/mp4"])
            #expect(message.attachments.allSatisfy { $0.id == nil && $0.localPath != nil }, "shown at once from this device's copy")
            #expect(try Data(contentsOf: URL(fileURLWithPath: try #require(message.attachments[0].localPath))) == photo)
            // The app may delete its own file at once: the SDK uploads from its copy.
            try FileManager.default.removeItem(at: voiceFile)

            try await alice.waitForStatus(message.localId, atLeast: .stored)
            let got = try await Self.received("look", on: bob)
            #expect(got.attachments.map(\.name) == ["plage été 100%.jpg", "voice.m4a"], "a name goes as it is, whatever its characters")
            #expect(got.attachments.map(\.size) == [300_000, 1_500_000])
            #expect(got.attachments[0].width == 640 && got.attachments[0].height == 480 && got.attachments[1].durationMs == 4200)
            #expect(got.attachments.allSatisfy { $0.id != nil && $0.sha256 != nil && $0.localPath == nil })
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments[0].id)) == photo)
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments[1].id)) == voice)
            let file = try await bob.client.attachmentFile(id: try #require(got.attachments[1].id))
            #expect(try Data(contentsOf: file) == voice)

            // Progress reached each attachment's total, and the message was ⏰ until then: `sending` only after.
            let progress = Self.progress(of: message.localId, on: alice)
            for (index, size) in [(0, Int64(300_000)), (1, Int64(1_500_000))] {
                let own = progress.filter { $0.index == index }
                #expect(own.first?.sent == 0 && own.last?.sent == size && own.allSatisfy { $0.total == size }, "\(own)")
                #expect(zip(own, own.dropFirst()).allSatisfy { $0.sent <= $1.sent })
            }
            let events = alice.events
            let lastProgress = try #require(events.lastIndex { if case .uploadProgress(message.localId, _, _, _) = $0 { true } else { false } })
            let sending = try #require(events.firstIndex {
                if case .messageStatusChanged(let changed) = $0 { changed.localId == message.localId && changed.status == .sending } else { false }
            })
            #expect(lastProgress < sending, "nothing is sent before every attachment is uploaded")
            #expect(isMonotonic(alice.statusHistory(localId: message.localId)))

            // The sender keeps its copies: a download of its own attachment is its copy.
            let sent = try alice.message(message.localId)
            #expect(sent.attachments.map(\.id) == got.attachments.map(\.id))
            #expect(sent.attachments.map(\.sha256) == got.attachments.map(\.sha256))
            #expect(try await alice.client.attachmentFile(id: try #require(sent.attachments[0].id)).path == sent.attachments[0].localPath)
            #expect(try await alice.client.attachmentCacheBytes() == 0)
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.count == 1 && history[0].attachments.map(\.id) == got.attachments.map(\.id))
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// The network goes away while a large file is on its way: the message stays ⏰, the upload starts again when the
    /// client is back, and the message is sent once.
    @Test func anUploadCutByTheNetworkStartsAgainAndTheMessageIsSentOnce() async throws {
        try await withKitTestServer { server in
            let proxy = try await FaultProxy.start(upstreamPort: server.port)
            let alice = try await TestDevice.register("alice", on: server.url, connectingThrough: URL(string: "http://127.0.0.1:\(proxy.port)")!)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let large = Self.bytes(2 << 20, seed: 3)

            // Black-holed: the upload's bytes leave and no answer ever comes.
            proxy.setMode(.stall)
            let message = try alice.client.send("large", to: conversation, attachments: [.data(large, name: "large.bin")])
            try await waitUntil("the upload is under way") { Self.progress(of: message.localId, on: alice).contains { $0.sent > 0 } }
            proxy.setMode(.refuse)
            try await waitUntil("alice is offline") { alice.client.connectionState != .online }
            #expect(try alice.message(message.localId).status == .pending)
            #expect(try alice.message(message.localId).attachments.first?.id == nil)

            proxy.setMode(.forward)
            try await alice.waitForStatus(message.localId, atLeast: .stored, timeout: .seconds(60))
            let got = try await Self.received("large", on: bob)
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments.first?.id)) == large)
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == ["large"], "sent once")
            #expect(!alice.statusHistory(localId: message.localId).contains(.failed))
            await alice.client.stop()
            await bob.client.stop()
            await proxy.stop()
        }
    }

    /// An attachment the server answered is never uploaded again, however its message's later uploads fail.
    @Test func anAnsweredUploadIsNotMadeAgainWhenALaterOneFails() async throws {
        try await withKitTestServer { server in
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) {
                $0.retryPolicy = RetryPolicy(baseDelay: .milliseconds(20), maxDelay: .milliseconds(100))
            }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            faulty.failUploads(of: "second.bin", [
                .networkError, .refused(status: 503, ErrorDetail(code: .overloaded, message: "busy"), retryAfter: nil),
            ])
            let first = Self.bytes(50_000, seed: 4)
            let second = Self.bytes(60_000, seed: 5)
            let message = try alice.client.send(
                "two", to: conversation, attachments: [.data(first, name: "first.bin"), .data(second, name: "second.bin")])
            try await alice.waitForStatus(message.localId, atLeast: .stored)
            #expect(faulty.uploads(of: "first.bin") == 1)
            #expect(faulty.uploads(of: "second.bin") == 3)
            let got = try await Self.received("two", on: bob)
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments[0].id)) == first)
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments[1].id)) == second)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// Tries spent on an upload that keeps failing: the message fails (⚠️, with the reason) and is never sent; retry
    /// starts the uploads again and sends it.
    @Test func anUploadOutOfTriesFailsTheMessageAndRetrySendsIt() async throws {
        try await withKitTestServer { server in
            let (alice, faulty) = try await TestDevice.registerFaulty("alice", on: server.url) {
                $0.retryPolicy = RetryPolicy(baseDelay: .milliseconds(20), maxDelay: .milliseconds(100))
            }
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let busy = FaultyTransport.UploadFault.refused(status: 503, ErrorDetail(code: .overloaded, message: "busy"), retryAfter: nil)
            faulty.failUploads(of: "doc.pdf", [busy, busy, busy])
            let message = try alice.client.send(to: conversation, attachments: [.data(Self.bytes(1000, seed: 6), name: "doc.pdf")])
            try await waitUntil("the message failed") { alice.statusHistory(localId: message.localId).last == .failed }
            let failed = try alice.message(message.localId)
            #expect(failed.failure?.code == .overloaded && failed.failure?.message == "doc.pdf: busy", "\(String(describing: failed.failure))")
            #expect(alice.statusHistory(localId: message.localId) == [.pending, .failed], "never ✓")
            #expect(try await server.history(conversationId: conversation, token: alice.credentials.token).isEmpty)

            try alice.client.retry(localId: message.localId)
            try await alice.waitForStatus(message.localId, atLeast: .stored)
            #expect(faulty.uploads(of: "doc.pdf") == 4)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// The server refuses the upload for good (over its size limit, `413`): the message fails with the server's reason
    /// and is never sent (never ✓); the messages after it go.
    @Test func anUploadTheServerRefusesFailsTheMessageWhichIsNeverAccepted() async throws {
        try await withKitTestServer(configure: { $0.attachments.maxBytes = 100_000 }) { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let message = try alice.client.send("too big", to: conversation, attachments: [.data(Self.bytes(200_000, seed: 8), name: "big.bin")])
            try await waitUntil("the message failed") { alice.statusHistory(localId: message.localId).last == .failed }
            let failed = try alice.message(message.localId)
            #expect(failed.failure?.code == .payloadTooLarge, "\(String(describing: failed.failure))")
            #expect(failed.failure?.message.hasPrefix("big.bin: ") == true, "\(String(describing: failed.failure))")
            #expect(failed.attachments.first?.id == nil)

            let next = try alice.client.send("after it", to: conversation)
            try await alice.waitForStatus(next.localId, atLeast: .stored)
            #expect(try await alice.client.sync(timeout: .seconds(10)).failed.map(\.localId) == [message.localId])
            #expect(alice.statusHistory(localId: message.localId) == [.pending, .failed], "never ✓")
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            #expect(history.map(\.body) == ["after it"])
            _ = try await Self.received("after it", on: bob)
            #expect(!bob.received.contains { $0.body == "too big" })
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// The app is killed (SIGKILL) while its message's file is on its way: the next client opened on the database
    /// shows the message with its attachment (⏰), uploads it from the start and sends the message once.
    @Test func anUploadTheAppWasKilledDuringIsCompletedByTheNextStart() async throws {
        try await withKitTestServer { server in
            let proxy = try await FaultProxy.start(upstreamPort: server.port)
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(bob)
            let conversation = try await makeConversation([alice, bob])
            let large = Self.bytes(2 << 20, seed: 7)
            let attachment = try Self.file("clip.mp4", large)
            let credentials = alice.credentials
            let directory = makeTemporaryDirectory()
            let output = directory + "/app.log"
            let go = directory + "/go"
            let helper = try ChildProcess([
                CrashAndPersistenceTests.helperPath, "--server", "http://127.0.0.1:\(proxy.port)", "--db", alice.databasePath,
                "--user", credentials.userId, "--device", credentials.deviceId, "--token", credentials.token, "--conversation", conversation,
                "--count", "1", "--prefix", "clip", "--attach", attachment.path, "--go", go,
            ], stdout: output, truncate: true)
            func log() -> String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }
            try await waitUntil("the app is online", timeout: .seconds(30), describe: log) { log().contains("online") }
            // From now on nothing reaches the server: the upload leaves the app and is never answered.
            proxy.setMode(.stall)
            _ = FileManager.default.createFile(atPath: go, contents: nil)
            try await waitUntil("the upload is under way", timeout: .seconds(30), describe: log) {
                log().split(separator: "\n").contains { $0.hasPrefix("upload 0 ") && !$0.hasPrefix("upload 0 0/") }
            }
            helper.signal(SIGKILL)
            try await helper.waitForExit(what: "the killed app")
            await proxy.stop()
            #expect(try await server.history(conversationId: conversation, token: credentials.token).isEmpty)

            let reopened = try TestDevice.open(credentials: credentials, serverURL: server.url, databasePath: alice.databasePath)
            let unsent = try #require(try reopened.client.unsentMessages().first)
            #expect(unsent.body == "clip 0" && unsent.status == .pending)
            #expect(unsent.attachments.map(\.name) == ["clip.mp4"] && unsent.attachments.first?.id == nil)
            let copy = try #require(unsent.attachments.first?.localPath)
            #expect(try Data(contentsOf: URL(fileURLWithPath: copy)) == large)
            reopened.client.start()
            try await reopened.waitForStatus(unsent.localId, atLeast: .stored, timeout: .seconds(60))
            let got = try await Self.received("clip 0", on: bob)
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments.first?.id)) == large)
            #expect(try await server.history(conversationId: conversation, token: credentials.token).count == 1)
            await reopened.client.stop()
            await bob.client.stop()
        }
    }

    /// Downloads stay within the cache's limit, least recently used out first; what was pushed out comes back from
    /// the server when asked for; a download larger than the whole cache is read but not kept.
    @Test func theDownloadCacheStaysUnderItsLimitLeastRecentlyUsedFirstOut() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url) { $0.attachmentCacheLimit = 250_000 }
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let files = (0..<4).map { Self.bytes(100_000, seed: 10 + UInt8($0)) }
            let huge = Self.bytes(300_000, seed: 20)
            for (index, data) in files.enumerated() {
                try alice.client.send("file \(index)", to: conversation, attachments: [.data(data, name: "f\(index).bin")])
            }
            try alice.client.send("huge", to: conversation, attachments: [.data(huge, name: "huge.bin")])
            var ids: [String] = []
            for index in 0..<4 {
                ids.append(try #require(try await Self.received("file \(index)", on: bob).attachments.first?.id))
            }
            let hugeId = try #require(try await Self.received("huge", on: bob).attachments.first?.id)
            let cache = URL(fileURLWithPath: bob.databasePath + "-attachments/cache")
            func cachedFiles() throws -> [String: Int] {
                var sizes: [String: Int] = [:]
                for name in try FileManager.default.contentsOfDirectory(atPath: cache.path) {
                    sizes[name] = (try FileManager.default.attributesOfItem(atPath: cache.appendingPathComponent(name).path)[.size] as? Int) ?? 0
                }
                return sizes
            }

            #expect(try await bob.client.attachmentData(id: ids[0]) == files[0])
            #expect(try await bob.client.attachmentData(id: ids[1]) == files[1])
            #expect(try await bob.client.attachmentData(id: ids[0]) == files[0], "a hit: file 0 is now the most recently used")
            #expect(try await bob.client.attachmentData(id: ids[2]) == files[2])
            #expect(Set(try cachedFiles().keys) == [ids[0], ids[2]], "file 1, the least recently used, made room")
            #expect(try await bob.client.attachmentCacheBytes() == 200_000)
            #expect(try await bob.client.attachmentData(id: ids[3]) == files[3])
            #expect(Set(try cachedFiles().keys) == [ids[2], ids[3]])
            #expect(try await bob.client.attachmentData(id: ids[1]) == files[1], "pushed out, fetched again")
            #expect(Set(try cachedFiles().keys) == [ids[3], ids[1]])

            #expect(try await bob.client.attachmentData(id: hugeId) == huge)
            await #expect(throws: PigeonClientError.self) { _ = try await bob.client.attachmentFile(id: hugeId) }
            #expect(Set(try cachedFiles().keys) == [ids[3], ids[1]], "larger than the whole cache: not kept, nothing pushed out")
            #expect(try cachedFiles().values.reduce(0, +) <= 250_000)
            #expect(try await bob.client.attachmentCacheBytes() <= 250_000)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// A database written before attachments (schema v4) with a message waiting in its outbox: opened, it is migrated
    /// in place, the message goes (without attachments), and a message with a file can be sent from it.
    @Test func aDatabaseFromBeforeAttachmentsIsMigratedInPlace() async throws {
        try await withKitTestServer { server in
            let bob = try await TestDevice.register("bob", on: server.url)
            let credentials = try await PigeonClient.registerDevice(serverURL: server.url, userId: "alice")
            try await startAll(bob)
            let conversation = try await bob.client.createConversation(members: ["alice"]).id
            let path = makeTemporaryDirectory() + "/pigeon.sqlite"
            let queue = try DatabaseQueue(path: path)
            try LocalDatabase.migrator.migrate(queue, upTo: "v4")
            try await queue.write { db in
                try db.execute(sql: "INSERT INTO device (id, userId, deviceId) VALUES (1, ?, ?)", arguments: [credentials.userId, credentials.deviceId])
                try db.execute(sql: "INSERT INTO conversations (id, createdAt, lastActivityAt) VALUES (?, 0, 0)", arguments: [conversation])
                try db.execute(
                    sql: """
                        INSERT INTO messages (conversationId, clientMessageId, senderId, senderDeviceId, type, body, clientTimestamp, isOutgoing, status)
                        VALUES (?, ?, ?, ?, 'text', 'written by v4', 1763700000000, 1, 'pending')
                        """,
                    arguments: [conversation, UUID().uuidString.lowercased(), credentials.userId, credentials.deviceId])
                try db.execute(sql: "INSERT INTO outbox (localId, conversationId, clientMessageId) SELECT localId, conversationId, clientMessageId FROM messages")
            }
            try queue.close()

            let alice = try TestDevice.open(credentials: credentials, serverURL: server.url, databasePath: path)
            let waiting = try #require(try alice.client.unsentMessages().first)
            #expect(waiting.body == "written by v4" && waiting.attachments.isEmpty)
            try await startAll(alice)
            try await alice.waitForStatus(waiting.localId, atLeast: .stored)
            let photo = Self.bytes(20_000, seed: 30)
            let message = try alice.client.send("after the upgrade", to: conversation, attachments: [.data(photo, name: "p.png")])
            try await alice.waitForStatus(message.localId, atLeast: .stored)
            let got = try await Self.received("after the upgrade", on: bob)
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments.first?.id)) == photo)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func whatASendCannotCarryIsRefusedBeforeAnythingIsWritten() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let small = Data("x".utf8)
            let refused: [[PigeonAttachmentSource]] = [
                Array(repeating: .data(small, name: "a.txt"), count: 11),
                [.data(small, name: "../a.txt")],
                [.data(small, name: "")],
                [.data(small, name: "a.txt", contentType: "not a type")],
                [.data(small, name: "a.png", width: -1)],
                [.data(Data(), name: "empty.txt")],
                [.file(URL(fileURLWithPath: "/nonexistent/photo.jpg"))],
                [.file(URL(fileURLWithPath: makeTemporaryDirectory()))],
            ]
            for attachments in refused {
                #expect(throws: PigeonClientError.self) { try alice.client.send("x", to: conversation, attachments: attachments) }
            }
            #expect(throws: PigeonClientError.self) { try alice.client.send(to: conversation) }
            #expect(try alice.client.unsentMessages().isEmpty)
            let sent = URL(fileURLWithPath: alice.databasePath + "-attachments/sent")
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: sent.path)) ?? []).isEmpty, "no copy left behind")
            await alice.client.stop()
            await bob.client.stop()
        }
    }
}

/// A small deterministic generator (SplitMix64), for test bytes that differ by seed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
