import Foundation
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 11, item 8: a full disk under the embedded store and buffer. Writes are refused with a generic
/// `503 overloaded` (never SQLite's own text), `/readyz` answers 503 naming the disk until a write succeeds again,
/// and nothing that was accepted is lost. The data directory is a 4 MiB tmpfs (the tests run as root). Both tests run
/// the default configuration, the one-write path (``DirectAcceptPath``: a send is written straight into the store),
/// one over HTTP, one over a WebSocket.
@Suite struct StoreDiskFullTests {
    /// What a WebSocket send got.
    enum SocketAnswer: Sendable {
        case ack(AckFrame)
        case refused(ErrorFrame)
    }

    /// Runs `body` with a data directory on a fresh 4 MiB tmpfs.
    static func withSmallDisk(_ body: (String) async throws -> Void) async throws {
        let directory = makeTemporaryDirectory()
        try await Command.run(["/usr/bin/mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", directory])
        let outcome: Result<Void, any Error>
        do {
            try await body(directory)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        // Lazily: the store's last file handles may close a moment after the server has stopped ("target is busy").
        _ = try? await Command.run(["/usr/bin/umount", "--lazy", directory])
        try? FileManager.default.removeItem(atPath: directory)
        try outcome.get()
    }

    /// Waits until `/readyz` answers 200 again.
    static func waitUntilReady(_ client: PigeonTestClient) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while try await client.request(.GET, "/readyz").status != 200 {
            guard ContinuousClock.now < deadline else { throw TestFailure("/readyz stayed 503 after the disk had space again") }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Fills the file system of `directory` with one file; returns its path.
    static func fill(_ directory: String, name: String = "filler") throws -> String {
        let path = directory + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        let chunk = Data(count: 4096)
        while true {
            do {
                try handle.write(contentsOf: chunk)
            } catch {
                return path
            }
        }
    }

    /// Over a WebSocket: a send on a full disk gets an `error` frame `overloaded` with the generic text (the socket
    /// stays open), every acknowledged send is stored once and in order, and once space returns the same socket sends
    /// again, the refused send's retry included, without a restart.
    @Test(.enabled(if: TestBackend.current == .embedded))
    func aFullDiskRefusesWebSocketSendsAndRecoversWithoutLosingAnAck() async throws {
        #expect(!ServerConfiguration().separateEmbeddedBuffer, "the default is the one-write path")
        try await Self.withSmallDisk { directory in
            try await withTestServer(dataDirectory: directory) { client in
                let alice = try await client.register("alice")
                let bob = try await client.register("bob")
                let conversation = try await client.createConversation(alice, members: ["bob"])
                let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
                // Sends `body` on the socket; the ack, or the error frame, answering it.
                @Sendable func send(_ body: String, id: String = UUID().uuidString.lowercased()) async throws -> SocketAnswer {
                    socket.sendMessage(to: conversation.id, body: body, clientMessageId: id)
                    let answer = await socket.first(timeout: .seconds(20)) { $0.ack?.clientMessageId == id || $0.errorFrame?.clientMessageId == id }
                    if let ack = answer?.ack { return .ack(ack) }
                    if let error = answer?.errorFrame { return .refused(error) }
                    throw TestFailure("no answer to a send on the WebSocket")
                }
                guard case .ack = try await send("before") else { throw TestFailure("the first send was refused") }
                var acknowledged = ["before"]

                let filler = try Self.fill(directory)
                let body = String(repeating: "x", count: 16_000)
                var refused: (id: String, text: String, error: ErrorFrame)?
                for index in 0..<400 {
                    let text = "\(index) " + body
                    let id = UUID().uuidString.lowercased()
                    switch try await send(text, id: id) {
                    case .ack: acknowledged.append(text)
                    case .refused(let error): refused = (id, text, error)
                    }
                    if refused != nil { break }
                }
                guard let refused else { throw TestFailure("400 messages of 16 KB were acknowledged on a full 4 MiB disk") }
                #expect(refused.error.error.code == .overloaded, "\(refused.error)")
                #expect(refused.error.error.message == "the server's disk is full; retry later")
                let moreFiller = try Self.fill(directory, name: "filler-2")
                if case .ack = try await send(body) { Issue.record("a send on a refilled disk was acknowledged") }
                #expect(try await client.request(.GET, "/readyz").status == 503)

                try FileManager.default.removeItem(atPath: filler)
                try FileManager.default.removeItem(atPath: moreFiller)
                try await Self.waitUntilReady(client)
                // The same socket, no reconnection: the refused send's retry (same clientMessageId) and a new one.
                guard case .ack = try await send(refused.text, id: refused.id) else { throw TestFailure("the retry was refused") }
                guard case .ack = try await send("after") else { throw TestFailure("a send after recovery was refused") }
                acknowledged += [refused.text, "after"]
                let stored = try await client.waitForCount(bob, conversation.id, acknowledged.count)
                #expect(stored.map(\.body) == acknowledged)
                #expect(stored.map(\.seq) == Array(1...Int64(acknowledged.count)))
                await socket.close()
            }
        }
    }

    @Test(.enabled(if: TestBackend.current == .embedded))
    func aFullDiskAnswers503GenericallyAndRecoversWithoutLosingAnything() async throws {
        try await Self.withSmallDisk { directory in
            try await withTestServer(dataDirectory: directory) { client in
                let alice = try await client.register("alice")
                let bob = try await client.register("bob")
                let conversation = try await client.createConversation(alice, members: ["bob"])
                try await client.sendAccepted(alice, to: conversation.id, body: "before")
                _ = try await client.waitForCount(bob, conversation.id, 1)
                #expect(try await client.request(.GET, "/readyz").status == 200)

                let filler = try Self.fill(directory)
                var accepted = ["before"]
                var refusal: HTTPAnswer?
                let body = String(repeating: "x", count: 16_000)
                for index in 0..<400 {
                    let text = "\(index) " + body
                    let answer = try await client.send(alice, to: conversation.id, body: text)
                    if answer.status == 202 {
                        accepted.append(text)
                        continue
                    }
                    refusal = answer
                    break
                }
                guard let refusal else { throw TestFailure("400 messages of 16 KB were accepted on a full 4 MiB disk") }
                expectError(refusal, 503, .overloaded, "a send on a full disk")
                #expect(try refusal.decode(ErrorBody.self).error.message == "the server's disk is full; retry later")
                #expect(!refusal.text.lowercased().contains("sqlite"), "\(refusal.text)")
                // A checkpoint may have given back the write-ahead log's space since: fill that too, and let one more
                // send meet the full disk, so /readyz is asked while the disk is full for certain.
                let moreFiller = try Self.fill(directory, name: "filler-2")
                expectError(try await client.send(alice, to: conversation.id, body: body), 503, .overloaded, "a send on a refilled disk")
                let notReady = try await client.request(.GET, "/readyz")
                expectError(notReady, 503, .overloaded, "/readyz on a full disk")
                #expect(notReady.text.contains("disk is full"), "\(notReady.text)")

                try FileManager.default.removeItem(atPath: filler)
                try FileManager.default.removeItem(atPath: moreFiller)
                try await Self.waitUntilReady(client)
                try await client.sendAccepted(alice, to: conversation.id, body: "after")
                accepted.append("after")
                let stored = try await client.waitForCount(bob, conversation.id, accepted.count)
                #expect(stored.map(\.body) == accepted)
                #expect(stored.map(\.seq) == Array(1...Int64(accepted.count)))
            }
        }
    }
}
