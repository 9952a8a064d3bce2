import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol
import PigeonRedis
@testable import PigeonServer
import PigeonSQLite
import PigeonTestSupport
import Testing

/// SECURITY.md "Encryption at rest": with `--encryption-key-file`, what users wrote (bodies, edits, reply previews,
/// attachment bytes, push data, webhook payloads) is in no file of the data directory and in no PostgreSQL table,
/// while every read (history, sync, reply previews, downloads, the push gateway, the webhooks) gets the plaintext; a
/// missing or wrong key refuses to start; a key ring rotates and `rekey` moves everything to its newest key. Each test
/// picks its stores itself: the embedded one, and PostgreSQL (`PIGEON_TEST_POSTGRES_URL`).
@Suite struct AtRestEncryptionTests {
    enum Store: String, CaseIterable, Sendable {
        case embedded, postgres

        var backend: TestBackend { self == .postgres ? .postgres : .embedded }
    }

    /// What makes one test's texts its own: the Redis server (and its append-only file) is shared by every test, so a
    /// test that writes the texts in plaintext must not write another test's.
    @TaskLocal static var tag = "4471"

    /// Distinctive texts: found anywhere on disk, they leaked.
    static var body: String { "zebra-plaintext-\(tag)" }
    static var edited: String { "quokka-edited-\(tag)" }
    static var reply: String { "ibis-reply-\(tag)" }
    static var pushData: String { "narwhal-pushdata-\(tag)" }
    static var attachmentMark: String { "okapi-attachment-\(tag)" }
    static var secrets: [String] { [body, edited, reply, pushData, attachmentMark] }

    /// Attachment bytes over two chunks (a sealed file is read a chunk at a time), the mark all through them.
    static var attachment: [UInt8] {
        Array(String(repeating: attachmentMark + " ", count: 300 * 1024 / (attachmentMark.utf8.count + 1)).utf8)
    }

    // MARK: Nothing in plaintext

    /// Everything written under a key is sealed on disk (SQLite files with their -wal and -shm, attachment files,
    /// every PostgreSQL table), and reads answer the plaintext.
    @Test(arguments: Store.allCases) func nothingUsersWroteIsStoredInPlaintext(store: Store) async throws {
        let found = try await exercise(backend: store.backend, cipher: try Self.ring([("k1", 1)]))
        #expect(found.isEmpty, "found in plaintext: \(found)")
    }

    /// With the Redis buffer, the messages cross Redis (its streams, and its append-only file, which every write is
    /// synced to) sealed too: nothing of them is in what Redis appended to its files during the test.
    @Test func theRedisBufferAppendsNothingInPlaintext() async throws {
        try await Self.$tag.withValue(Self.freshTag()) {
            let before = try await RedisAppendOnlyFile.sizes()
            let found = try await exercise(backend: .redisBuffer, cipher: try Self.ring([("k1", 1)]))
            let appended = try await RedisAppendOnlyFile.bytes(since: before)
            #expect(found.isEmpty, "found in plaintext: \(found)")
            #expect(!appended.isEmpty, "the sends went through Redis")
            let inRedis = Self.secrets.filter { appended.range(of: Data($0.utf8)) != nil }
            #expect(inRedis.isEmpty, "in Redis's append-only file: \(inRedis)")
        }
    }

    /// The same without a key: the bodies are in Redis's append-only file (the scan above can fail).
    @Test func withoutAKeyTheRedisBufferAppendsThePlaintext() async throws {
        try await Self.$tag.withValue(Self.freshTag()) {
            let before = try await RedisAppendOnlyFile.sizes()
            _ = try await exercise(backend: .redisBuffer, cipher: .off)
            let appended = try await RedisAppendOnlyFile.bytes(since: before)
            for secret in [Self.body, Self.reply] {
                #expect(appended.range(of: Data(secret.utf8)) != nil, "\(secret) is in Redis's append-only file")
            }
        }
    }

    /// Six digits of its own for one test's texts.
    static func freshTag() -> String { String(Int.random(in: 100_000...999_999)) }

    /// The same scan without a key finds the texts: the scan can fail. (The body before its edit is overwritten in
    /// place: PostgreSQL no longer shows it, SQLite may keep it in its WAL or a free page, so it is not required.)
    @Test(arguments: Store.allCases) func withoutAKeyTheScanFindsThePlaintext(store: Store) async throws {
        let found = try await exercise(backend: store.backend, cipher: .off)
        #expect(Set(Self.secrets).subtracting([Self.body]).isSubset(of: found.map(\.secret)), "found: \(found)")
    }

    /// Runs the scenario on a fresh store under `cipher`, checks every read answers the plaintext, stops the server and
    /// answers where each secret is found in plaintext.
    func exercise(backend: TestBackend, cipher: AtRestCipher) async throws -> [(secret: String, place: String)] {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let instance = try await TestBackendInstance.make(backend)
        let gateway = try await MatrixPushGateway.start()
        let receiver = try await WebhookReceiver.start()
        do {
            _ = try await withTestServer(dataDirectory: directory, instance: instance, configure: Self.configure(cipher, gateway, receiver)) {
                client in try await Self.writeAndRead(client, gateway: gateway, receiver: receiver)
            }
            let found = try await Self.plaintext(in: directory, instance: instance)
            await gateway.stop()
            await receiver.stop()
            await instance.tearDown()
            return found
        } catch {
            await gateway.stop()
            await receiver.stop()
            await instance.tearDown()
            throw error
        }
    }

    static func configure(_ cipher: AtRestCipher, _ gateway: MatrixPushGateway, _ receiver: WebhookReceiver) -> (inout ServerConfiguration) -> Void {
        { configuration in
            configuration.atRest = cipher
            PushTests.pushing(to: gateway)(&configuration)
            WebhookTests.configure(receiver)(&configuration)
        }
    }

    /// What ``writeAndRead(_:gateway:receiver:)`` wrote, to read it again after a restart.
    struct Written: Sendable {
        var bob: TestDevice
        var conversationId: String
        var attachmentId: String
        var alice: TestDevice
        /// Alice's cursor before any of it.
        var aliceStart: String
    }

    /// An attachment, a message carrying it, a reply quoting it, an edit, push data; then every read of them.
    @discardableResult
    static func writeAndRead(_ client: PigeonTestClient, gateway: MatrixPushGateway, receiver: WebhookReceiver) async throws -> Written {
        let alice = try await client.register("alice")
        let bob = try await client.register("bob")
        try await PushTests.registerPush(client, bob, pushkey: "bob-phone", data: #"{"secret":"\#(pushData)"}"#)
        let conversation = try await client.createConversation(alice, members: ["bob"])
        let start = try await client.headCursor(bob)
        let aliceStart = try await client.headCursor(alice)
        let upload = try AttachmentTests.uploaded(try await AttachmentTests.upload(client, alice, name: "file.bin", attachment))
        let sent = try await AttachmentTests.sendWith(
            client, alice, conversation.id, [AttachmentReference(id: upload.id)], body: body)
        #expect(sent.status == 202, "\(sent.text)")
        let original = try sent.decode(SendMessageResponse.self)
        _ = try await client.waitForCount(bob, conversation.id, 1)
        #expect(try await ReactionsAndThreadsTests.sendReply(client, bob, conversation.id, body: reply, replyTo: original.serverId).status == 202)
        _ = try await client.waitForCount(bob, conversation.id, 2)
        #expect(try await EditDeleteTests.edit(client, alice, conversation.id, original.serverId, body: edited).status == 202)
        _ = try await client.waitForCount(bob, conversation.id, 3)
        let written = Written(bob: bob, conversationId: conversation.id, attachmentId: upload.id, alice: alice, aliceStart: aliceStart)
        try await expectReads(client, written)
        // Sync (the event log): the other's messages as each device gets them.
        let bobSynced = try await client.request(.GET, "/v1/sync?limit=100&cursor=\(start)", token: bob.token)
        #expect(bobSynced.status == 200 && bobSynced.text.contains(edited), "\(bobSynced.text)")
        let aliceSynced = try await client.request(.GET, "/v1/sync?limit=100&cursor=\(aliceStart)", token: alice.token)
        #expect(aliceSynced.status == 200 && aliceSynced.text.contains(reply), "\(aliceSynced.text)")
        // The push gateway gets the device's data; the app's backend the bodies.
        try await waitUntil("bob's phone was pushed with its data") {
            gateway.received.contains { $0.devices.contains { $0.data?["secret"] == pushData } }
        }
        try await waitUntil("the webhooks carried the bodies") {
            let bodies = receiver.received.map { String(decoding: $0.body, as: UTF8.self) }
            return bodies.contains { $0.contains(body) } && bodies.contains { $0.contains(edited) } && bodies.contains { $0.contains(reply) }
        }
        return written
    }

    /// History (the edited text, the reply and its preview of the edited message), the attachment's bytes (whole, and
    /// a range across its chunk boundary) and the push registration's data all read back in plaintext.
    static func expectReads(_ client: PigeonTestClient, _ written: Written) async throws {
        let messages = try await client.allMessages(written.bob, written.conversationId)
        #expect(messages.first { $0.type == "photo" }?.body == edited, "\(messages)")
        let replied = messages.first { $0.body == reply }
        #expect(replied?.replyPreview?.body == edited, "\(String(describing: replied))")
        let download = try await AttachmentTests.download(client, written.bob, written.attachmentId)
        #expect(download.status == 200 && Array(download.body) == attachment)
        let range = try await AttachmentTests.download(client, written.bob, written.attachmentId, headers: ["Range": "bytes=262000-263000"])
        #expect(range.status == 206 && Array(range.body) == Array(attachment[262_000...263_000]))
        let registration = try await PushTests.registration(client, written.bob)
        #expect(registration?.data?["secret"] == .string(pushData))
    }

    /// Where each secret is in plaintext: every byte of every file under `directory`, and (PostgreSQL) every row of
    /// every table of the test's schema as text (`bytea` shows as hex, so the hex of each secret is looked for too).
    static func plaintext(in directory: String, instance: TestBackendInstance, of needles: [String] = secrets) async throws
        -> [(secret: String, place: String)]
    {
        var found: [(String, String)] = []
        let files = FileManager.default.enumerator(atPath: directory)?.compactMap { $0 as? String } ?? []
        for file in files {
            let path = directory + "/" + file
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                let data = FileManager.default.contents(atPath: path)
            else { continue }
            for secret in needles where data.range(of: Data(secret.utf8)) != nil { found.append((secret, file)) }
        }
        if let schema = instance.schemaName {
            for table in try await TestPostgres.texts(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = '\(schema)' AND table_type = 'BASE TABLE'")
            {
                let rows = try await TestPostgres.texts("SELECT t::text FROM \(schema).\(table) t").joined(separator: "\n")
                for secret in needles {
                    let hex = secret.utf8.map { String(format: "%02x", $0) }.joined()
                    if rows.contains(secret) || rows.contains(hex) { found.append((secret, "table \(table)")) }
                }
            }
        }
        return found
    }

    // MARK: Keys

    /// A ring of `(id, seed)` keys, newest last (each key 32 bytes of its seed).
    static func ring(_ keys: [(String, UInt8)]) throws -> AtRestCipher {
        let text = keys.map { "\($0.0):" + Data(repeating: $0.1, count: 32).base64EncodedString() }.joined(separator: "\n")
        return try AtRestCipher.parse(Data(text.utf8), source: "test ring")
    }

    /// The key file formats: 32 raw bytes (id from its SHA-256) or `id:base64` lines; anything else is one clear error.
    @Test func keyFiles() throws {
        let raw = try AtRestCipher.parse(Data(repeating: 9, count: 32), source: "raw")
        #expect(raw.keys.count == 1 && raw.newest?.id.count == 16)
        let ring = try AtRestCipher.parse(Data("# old first\nold:\(Data(repeating: 1, count: 32).base64EncodedString())\n\nnew:\(Data(repeating: 2, count: 32).base64EncodedString())\n".utf8), source: "ring")
        #expect(ring.keys.map(\.id) == ["old", "new"])
        for (contents, expected) in [
            ("", "holds no key"), ("k1\n", "expected id:base64key"), ("k1:AAAA\n", "must be 32 bytes"),
            ("bad id:\(Data(count: 32).base64EncodedString())", "a key id is"),
            ("a:\(Data(count: 32).base64EncodedString())\na:\(Data(count: 32).base64EncodedString())", "appears twice"),
        ] {
            let error = #expect(throws: AtRestKeyError.self) { try AtRestCipher.parse(Data(contents.utf8), source: "f") }
            #expect(error.map { $0.message.contains(expected) && !$0.message.contains("\n") } == true, "\(String(describing: error))")
        }
        let sealed = ring.seal("hello")
        #expect(sealed != "hello")
        #expect(try ring.open(sealed) == "hello")
        #expect(try ring.open("plain") == "plain")
        #expect(throws: AtRestKeyError.self) { try Self.ring([("other", 3)]).open(sealed) }
    }

    /// A store written under a key refuses to start without it, with another key of the same id, or with a ring
    /// that lacks its key: one clear line each, and nothing is changed (it starts again with the right key).
    @Test(arguments: Store.allCases) func aMissingOrWrongKeyRefusesToStart(store: Store) async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let instance = try await TestBackendInstance.make(store.backend)
        do {
            let key = try Self.ring([("k1", 1)])
            try await withTestServer(dataDirectory: directory, instance: instance, configure: { $0.atRest = key }) { client in
                let alice = try await client.register("alice")
                let conversation = try await client.createConversation(alice, members: ["bob"])
                try await client.sendAccepted(alice, to: conversation.id, body: Self.body)
                _ = try await client.waitForCount(alice, conversation.id, 1)
            }
            for (cipher, expected) in [
                (AtRestCipher.off, "start with --encryption-key-file"),
                (try Self.ring([("k1", 2)]), "is not the key the store was encrypted with"),
                (try Self.ring([("k2", 1)]), "key id k1, which is not in the encryption key file"),
            ] {
                let error = await #expect(throws: AtRestKeyError.self) {
                    try await withTestServer(dataDirectory: directory, instance: instance, configure: { $0.atRest = cipher }) { _ in }
                }
                let line = error.map { String(reflecting: $0) } ?? ""
                #expect(line.contains(expected) && !line.contains("\n"), "\(line)")
            }
            try await withTestServer(dataDirectory: directory, instance: instance, configure: { $0.atRest = key }) { client in
                _ = try await client.register("carol")
            }
        } catch {
            await instance.tearDown()
            throw error
        }
        await instance.tearDown()
    }

    /// The binary says it in one line and exits non-zero: a key file of the wrong size, and a store started without
    /// its key.
    @Test func theServerBinaryRefusesWithOneLine() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let badKey = directory + "/bad.key"
        try Data(repeating: 1, count: 31).write(to: URL(fileURLWithPath: badKey))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: badKey)
        let bad = try await Self.runServer(["serve", "--data-dir", directory + "/data", "--port", "0", "--encryption-key-file", badKey])
        #expect(bad.status != 0)
        #expect(bad.output.split(separator: "\n").contains { $0.contains("bad.key, line 1: expected id:base64key") }, "\(bad.output)")

        let key = directory + "/good.key"
        try Data(repeating: 4, count: 32).write(to: URL(fileURLWithPath: key))
        // Readable by others: refused in one line, unless --allow-insecure-key-file.
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key)
        let open = try await Self.runServer(["serve", "--data-dir", directory + "/data", "--port", "0", "--encryption-key-file", key])
        #expect(open.status != 0)
        #expect(
            open.output.split(separator: "\n").filter { $0.contains("is accessible by others (mode 644): chmod 600 it") }.count == 1, "\(open.output)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/data"), "a refused start created the data directory")
        let insecure = try await ServerProcess(
            dataDirectory: directory + "/insecure", arguments: ["--encryption-key-file", key, "--allow-insecure-key-file"])
        try await insecure.stop(signal: SIGTERM)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key)
        let server = try await ServerProcess(dataDirectory: directory + "/data", arguments: ["--encryption-key-file", key])
        let alice = try await server.client.register("alice")
        let conversation = try await server.client.createConversation(alice, members: ["bob"])
        try await server.client.sendAccepted(alice, to: conversation.id, body: Self.body)
        _ = try await server.client.waitForCount(alice, conversation.id, 1)
        try await server.stop(signal: SIGTERM)
        let missing = try await Self.runServer(["serve", "--data-dir", directory + "/data", "--port", "0"])
        #expect(missing.status != 0)
        #expect(
            missing.output.split(separator: "\n").contains { $0.contains("the store holds values encrypted at rest: start with --encryption-key-file") },
            "\(missing.output)")
    }

    /// Runs `pigeon-server` with `arguments` to its end (a refusal at start); its exit status and output.
    static func runServer(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await ServerProcess.run(arguments)
    }

    // MARK: Rotation

    /// Written under A; a ring [A, B] reads it all and writes under B; `rekey` moves everything to B (counting what it
    /// rewrote); then a ring of B alone reads everything, and A alone is refused.
    @Test(arguments: Store.allCases) func aKeyRingRotatesAndRekeyRetiresTheOldKey(store: Store) async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let instance = try await TestBackendInstance.make(store.backend)
        let gateway = try await MatrixPushGateway.start()
        let receiver = try await WebhookReceiver.start()
        do {
            let a = try Self.ring([("a", 1)])
            let both = try Self.ring([("a", 1), ("b", 2)])
            let b = try Self.ring([("b", 2)])
            let written = try await withTestServer(dataDirectory: directory, instance: instance, configure: Self.configure(a, gateway, receiver)) {
                client in try await Self.writeAndRead(client, gateway: gateway, receiver: receiver)
            }
            try await withTestServer(dataDirectory: directory, instance: instance, configure: { $0.atRest = both }) { client in
                // Everything under A reads with the ring, and what is written now is under B.
                try await Self.expectReads(client, written)
                try await client.sendAccepted(written.bob, to: written.conversationId, body: "under b")
                _ = try await client.waitForCount(written.bob, written.conversationId, 4)
            }
            let counts: [(table: String, rewritten: Int)]
            if case .postgres(let url) = instance.store {
                counts = try await AtRestRekey.run(dataDirectory: nil, postgresURL: url, cipher: both, batch: 2, logger: .init(label: "rekey"))
            } else {
                counts = try await AtRestRekey.run(dataDirectory: directory, postgresURL: nil, cipher: both, batch: 2, logger: .init(label: "rekey"))
            }
            let rewritten = Dictionary(counts.map { ($0.table, $0.rewritten) }, uniquingKeysWith: +)
            #expect(rewritten["messages"].map { $0 >= 3 } == true, "\(counts)")
            #expect(rewritten["push_registrations"] == 1, "\(counts)")
            #expect((rewritten["attachment files"] ?? rewritten["attachment_chunks"] ?? 0) >= 1, "\(counts)")
            // A second run has nothing left to do.
            let again: [(table: String, rewritten: Int)]
            if case .postgres(let url) = instance.store {
                again = try await AtRestRekey.run(dataDirectory: nil, postgresURL: url, cipher: both, batch: 2, logger: .init(label: "rekey"))
            } else {
                again = try await AtRestRekey.run(dataDirectory: directory, postgresURL: nil, cipher: both, batch: 2, logger: .init(label: "rekey"))
            }
            #expect(again.allSatisfy { $0.rewritten == 0 }, "\(again)")
            // No value and no attachment chunk is left under the old key (in the tables; SQLite's free pages may keep
            // old ciphertext until reused, SECURITY.md).
            if instance.schemaName != nil {
                let underA = try await Self.plaintext(in: directory, instance: instance, of: ["\u{1}at1:a:", "PGNE\u{1}a"])
                #expect(underA.isEmpty, "under the old key: \(underA)")
            } else {
                #expect(try SQLiteRekey.remaining(dataDirectory: URL(fileURLWithPath: directory), cipher: b) == 0)
                let files = try await Self.plaintext(in: directory + "/attachments", instance: TestBackendInstance(), of: ["PGNE\u{1}a"])
                #expect(files.isEmpty, "attachment files under the old key: \(files)")
            }

            let refused = await #expect(throws: AtRestKeyError.self) {
                try await withTestServer(dataDirectory: directory, instance: instance, configure: { $0.atRest = a }) { _ in }
            }
            #expect(refused?.message.contains("key id b, which is not in the encryption key file") == true, "\(String(describing: refused))")
            try await withTestServer(dataDirectory: directory, instance: instance, configure: { $0.atRest = b }) { client in
                try await Self.expectReads(client, written)
                let synced = try await client.request(.GET, "/v1/sync?limit=100&cursor=\(written.aliceStart)", token: written.alice.token)
                #expect(synced.status == 200 && synced.text.contains(Self.reply) && synced.text.contains("under b"), "\(synced.text)")
            }
            let found = try await Self.plaintext(in: directory, instance: instance)
            #expect(found.isEmpty, "found in plaintext: \(found)")
        } catch {
            await gateway.stop()
            await receiver.stop()
            await instance.tearDown()
            throw error
        }
        await gateway.stop()
        await receiver.stop()
        await instance.tearDown()
    }
}

/// The test Redis server's append-only files (`appendonly yes`, synced at every write: scripts/services.sh), read to
/// see what a test made Redis write to disk.
enum RedisAppendOnlyFile {
    /// Each append-only file's size now (Redis 7 keeps them under `<dir>/<appenddirname>`).
    static func sizes() async throws -> [String: Int] {
        let directory = try await directory()
        var sizes: [String: Int] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasSuffix(".aof") {
            let path = directory + "/" + name
            sizes[path] = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        }
        guard !sizes.isEmpty else { throw TestFailure("Redis keeps no append-only file under \(directory)") }
        return sizes
    }

    /// What was appended since `before` (a file that is new since, as a whole).
    static func bytes(since before: [String: Int]) async throws -> Data {
        var appended = Data()
        for (path, size) in try await sizes() {
            let start = before[path] ?? 0
            guard size > start, let handle = FileHandle(forReadingAtPath: path) else { continue }
            try handle.seek(toOffset: UInt64(start))
            appended += try handle.readToEnd() ?? Data()
            try handle.close()
        }
        return appended
    }

    private static func directory() async throws -> String {
        let redis = try NodeIdentityTests.redis()
        func config(_ name: String) async throws -> String {
            let reply = try await redis.send(RESPCommand("CONFIG", "GET", name))
            guard let value = reply.array?.last?.string else { throw TestFailure("CONFIG GET \(name) answered \(reply)") }
            return value
        }
        do {
            try await redis.waitUntilConnected()
            let path = try await config("dir") + "/" + config("appenddirname")
            await redis.shutdown()
            return path
        } catch {
            await redis.shutdown()
            throw error
        }
    }
}
