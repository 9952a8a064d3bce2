import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// `pigeon-server backup` of a running embedded server and `pigeon-server restore`, through the real binary.
@Suite(.serialized) struct BackupTests {
    /// A sent message and when its ✓ came.
    struct Acknowledged: Sendable {
        var conversationId: String
        var body: String
        var at: ContinuousClock.Instant
    }

    /// A backup taken while sends are in flight restores every message acknowledged before it began, gapless per
    /// conversation; tokens from before work, an attachment downloads, a cursor from before the backup resumes and one
    /// beyond the restored log is answered `reset`, even once new events pass its position.
    @Test func aBackupUnderLoadRestoresEveryAcknowledgedMessage() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let live = directory + "/live"
        try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: true)
        let server = try await ServerProcess(dataDirectory: live)
        let client = server.client
        let alice = try await client.register("alice")
        let bob = try await client.register("bob")
        let conversations = [try await client.createConversation(alice, members: ["bob"]), try await client.createConversation(alice, members: ["bob"])]
        let picture = AttachmentTests.bytes(300_000)
        let upload = try AttachmentTests.uploaded(try await AttachmentTests.upload(client, alice, name: "p.png", picture))
        #expect(try await AttachmentTests.sendWith(client, alice, conversations[0].id, [AttachmentReference(id: upload.id)], body: "photo").status == 202)
        _ = try await client.waitForCount(bob, conversations[0].id, 1)
        let cursorBefore = try await client.headCursor(bob)

        let acknowledged = NIOLockedValueBox<[Acknowledged]>([])
        let stop = NIOLockedValueBox(false)
        // Four senders, each with one send in flight at all times.
        let load = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<4 {
                    let conversation = conversations[lane % 2].id
                    group.addTask {
                        var n = 0
                        while !stop.withLockedValue({ $0 }) {
                            let body = "load-\(n)-\(lane)"
                            try await client.sendAccepted(alice, to: conversation, body: body)
                            acknowledged.withLockedValue { $0.append(Acknowledged(conversationId: conversation, body: body, at: .now)) }
                            n += 1
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        // A backup takes a fraction of a second: on a loaded machine no send may happen to be answered inside one, so
        // up to five are taken, and the first with sends answered while it ran is the one restored.
        var archive = ""
        var began = ContinuousClock.now
        var duringBackup = 0
        for attempt in 1...5 {
            archive = directory + "/backup-\(attempt).tar"
            began = ContinuousClock.now
            let backup = try await ServerProcess.run(["backup", "--data-dir", live, "--to", archive])
            let ended = ContinuousClock.now
            #expect(backup.status == 0, "\(backup.output)")
            try await Task.sleep(for: .milliseconds(100))
            duringBackup = acknowledged.withLockedValue { acks in acks.filter { $0.at > began && $0.at < ended }.count }
            if duringBackup > 0 { break }
        }
        try await Task.sleep(for: .milliseconds(300))
        stop.withLockedValue { $0 = true }
        try await load.value
        let acks = acknowledged.withLockedValue { $0 }
        #expect(duringBackup > 0, "sends went on during the backup (\(acks.count) in all)")
        let before = acks.filter { $0.at < began }
        // Beyond what the backup holds: every event of the sends after it.
        let cursorBeyond = try await client.headCursor(bob)
        try await server.stop(signal: SIGTERM)

        let restoredDirectory = directory + "/restored"
        let restore = try await ServerProcess.run(["restore", "--from", archive, "--data-dir", restoredDirectory])
        #expect(restore.status == 0, "\(restore.output)")
        let restored = try await ServerProcess(dataDirectory: restoredDirectory)
        let again = restored.client
        for conversation in conversations {
            let messages = try await again.allMessages(bob, conversation.id)
            #expect(messages.map(\.seq) == Array(1...Int64(messages.count)), "conversation \(conversation.id) is gapless")
            let bodies = Set(messages.map(\.body))
            #expect(bodies.count == messages.count, "no message twice")
            let missing = before.filter { $0.conversationId == conversation.id && !bodies.contains($0.body) }
            #expect(missing.isEmpty, "acknowledged before the backup began, not restored: \(missing.map(\.body).prefix(5))")
        }
        let download = try await AttachmentTests.download(again, bob, upload.id)
        #expect(download.status == 200 && [UInt8](download.body) == picture)

        // A cursor from before the backup resumes where it was (no reset); one beyond the restored log is reset, also
        // once new events pass its position.
        let resumed = try await again.sync(bob, cursor: cursorBefore, limit: 1)
        #expect(resumed.events.first?.type != "reset")
        #expect(try await again.sync(bob, cursor: cursorBeyond).events.map(\.type) == ["reset"])
        // Embedded cursors are `<epoch>-<event id>`.
        func eventId(_ cursor: String) throws -> Int64 { try #require(Int64(cursor.split(separator: "-").last ?? "")) }
        let beyond = try eventId(cursorBeyond)
        var head = try eventId(try await again.headCursor(bob))
        while head <= beyond {
            // Each send makes at least two events (bob's message.new, alice's).
            for _ in 0...(beyond - head) / 2 { try await again.sendAccepted(alice, to: conversations[1].id, body: "after restore") }
            head = try eventId(try await again.headCursor(bob))
        }
        #expect(try await again.sync(bob, cursor: cursorBeyond).events.map(\.type) == ["reset"])
        try await restored.stop(signal: SIGTERM)
    }

    /// Bad input changes nothing: a missing data directory, an archive that exists, a corrupt or truncated archive,
    /// a data directory that is not empty without `--replace`.
    @Test func badInputIsRefusedAndChangesNothing() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let live = directory + "/live"
        try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: true)
        let server = try await ServerProcess(dataDirectory: live)
        let alice = try await server.client.register("alice")
        let conversation = try await server.client.createConversation(alice, members: ["bob"])
        try await server.client.sendAccepted(alice, to: conversation.id, body: "kept")
        let archive = directory + "/backup.tar"
        #expect(try await ServerProcess.run(["backup", "--data-dir", live, "--to", archive]).status == 0)
        try await server.stop(signal: SIGTERM)

        let missing = try await ServerProcess.run(["backup", "--data-dir", directory + "/nowhere", "--to", directory + "/other.tar"])
        #expect(missing.status != 0 && missing.output.contains("is not a Pigeon data directory"), "\(missing.output)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/other.tar"))
        let original = try Data(contentsOf: URL(fileURLWithPath: archive))
        let exists = try await ServerProcess.run(["backup", "--data-dir", live, "--to", archive])
        #expect(exists.status != 0 && exists.output.contains("exists already"), "\(exists.output)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: archive)) == original)
        let unwritable = try await ServerProcess.run(["backup", "--data-dir", live, "--to", directory + "/no/such/dir/b.tar"])
        #expect(unwritable.status != 0 && unwritable.output.contains("cannot create"), "\(unwritable.output)")

        // One byte changed in the middle of the store's bytes; the archive cut short.
        var flipped = original
        flipped[flipped.count / 3] ^= 0x55
        try flipped.write(to: URL(fileURLWithPath: directory + "/flipped.tar"))
        try original.prefix(original.count - 2_000).write(to: URL(fileURLWithPath: directory + "/cut.tar"))
        for corrupt in ["flipped.tar", "cut.tar"] {
            let target = directory + "/from-" + corrupt
            let refused = try await ServerProcess.run(["restore", "--from", directory + "/" + corrupt, "--data-dir", target])
            #expect(refused.status != 0 && refused.output.contains("the backup archive is not intact"), "\(corrupt): \(refused.output)")
            #expect(!FileManager.default.fileExists(atPath: target))
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).allSatisfy { !$0.contains(".restore-") })

        // A data directory that is not empty: refused, then replaced with --replace.
        let before = try FileManager.default.contentsOfDirectory(atPath: live).sorted()
        let full = try await ServerProcess.run(["restore", "--from", archive, "--data-dir", live])
        #expect(full.status != 0 && full.output.contains("is not empty"), "\(full.output)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: live).sorted() == before)
        let replaced = try await ServerProcess.run(["restore", "--from", archive, "--data-dir", live, "--replace"])
        #expect(replaced.status == 0, "\(replaced.output)")
        let restarted = try await ServerProcess(dataDirectory: live)
        #expect(try await restarted.client.allMessages(alice, conversation.id).map(\.body) == ["kept"])
        try await restarted.stop(signal: SIGTERM)
    }

    /// After `restore --replace`, the restored server's next message in a conversation takes a seq the server before
    /// the restore never gave (it gave seq 18 to a second message); a device that has a message the backup lacks
    /// keeps it, and the history after it brings the new one.
    @Test func aRestoredServerNeverGivesASeqTwice() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let live = directory + "/live"
        try FileManager.default.createDirectory(atPath: live, withIntermediateDirectories: true)
        let server = try await ServerProcess(dataDirectory: live)
        let alice = try await server.client.register("alice")
        let bob = try await server.client.register("bob")
        let conversation = try await server.client.createConversation(alice, members: ["bob"])
        try await server.client.sendAccepted(alice, to: conversation.id, body: "before the backup")
        _ = try await server.client.waitForCount(bob, conversation.id, 1)
        let archive = directory + "/backup.tar"
        #expect(try await ServerProcess.run(["backup", "--data-dir", live, "--to", archive]).status == 0)
        try await server.client.sendAccepted(alice, to: conversation.id, body: "M1")
        let m1 = try #require(try await server.client.waitForCount(bob, conversation.id, 2).last)
        try await server.stop(signal: SIGTERM)

        let restore = try await ServerProcess.run(["restore", "--from", archive, "--data-dir", live, "--replace"])
        #expect(restore.status == 0, "\(restore.output)")
        let restored = try await ServerProcess(dataDirectory: live)
        try await restored.client.sendAccepted(alice, to: conversation.id, body: "M2")
        let all = try await restored.client.waitForCount(bob, conversation.id, 2)
        #expect(all.map(\.body) == ["before the backup", "M2"])
        let m2 = try #require(all.last)
        #expect(m2.seq > m1.seq, "M2 at \(m2.seq), M1 was at \(m1.seq)")
        // Bob's device, which has M1 at its seq, asks for what follows it and gets M2.
        let after = try await restored.client.request(.GET, "/v1/conversations/\(conversation.id)/messages?after=\(m1.seq)", token: bob.token)
        #expect(try after.decode(MessagePage.self).messages.map(\.body) == ["M2"])
        try await restored.stop(signal: SIGTERM)
    }
}
