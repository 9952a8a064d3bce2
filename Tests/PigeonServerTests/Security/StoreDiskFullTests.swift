import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 11, item 8: a full disk under the embedded store and buffer. Writes are refused with a generic
/// `503 overloaded` (never SQLite's own text), `/readyz` answers 503 naming the disk until a write succeeds again,
/// and nothing that was accepted is lost. The data directory is a 4 MiB tmpfs (the tests run as root).
@Suite struct StoreDiskFullTests {
    static func run(_ executable: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw TestFailure("\(executable) \(arguments) exited \(process.terminationStatus)") }
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

    @Test(.enabled(if: TestBackend.current == .embedded))
    func aFullDiskAnswers503GenericallyAndRecoversWithoutLosingAnything() async throws {
        let directory = makeTemporaryDirectory()
        try Self.run("/usr/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", directory])
        defer {
            try? Self.run("/usr/bin/umount", [directory])
            try? FileManager.default.removeItem(atPath: directory)
        }
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
            let deadline = ContinuousClock.now + .seconds(20)
            while try await client.request(.GET, "/readyz").status != 200 {
                guard ContinuousClock.now < deadline else { throw TestFailure("/readyz stayed 503 after the disk had space again") }
                try await Task.sleep(for: .milliseconds(100))
            }
            try await client.sendAccepted(alice, to: conversation.id, body: "after")
            accepted.append("after")
            let stored = try await client.waitForCount(bob, conversation.id, accepted.count)
            #expect(stored.map(\.body) == accepted)
            #expect(stored.map(\.seq) == Array(1...Int64(accepted.count)))
        }
    }
}
