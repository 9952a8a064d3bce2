import Foundation
import PigeonKit
import PigeonProtocol
import PigeonSQLite
import PigeonTestSupport
import Testing

/// A server restored from a backup never gives a seq twice: a device that holds a message the backup lacks keeps it,
/// gets every message the restored server stores, and never has two messages at one seq (it used to keep "#18 M1"
/// while the restored server gave seq 18 to M2, which the device then never showed).
@Suite(.timeLimit(.minutes(3)))
struct RestoreTests {
    @Test func aDeviceKeepsWhatTheBackupLacksAndGetsEveryMessageAfterTheRestore() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let first = try alice.client.send("before the backup", to: conversation)
            try await alice.waitForStatus(first.localId, atLeast: .delivered)
            let archive = makeTemporaryDirectory() + "/backup.tar"
            _ = try EmbeddedBackup.backup(dataDirectory: server.dataDirectory, to: archive)
            let lost = try alice.client.send("after the backup", to: conversation)
            try await alice.waitForStatus(lost.localId, atLeast: .delivered)
            let lostSeq = try #require(bob.allMessages(in: conversation).first { $0.body == "after the backup" }?.seq)

            await server.stop()
            _ = try EmbeddedBackup.restore(from: archive, to: server.dataDirectory, replace: true)
            try await server.start()

            let next = try alice.client.send("after the restore", to: conversation)
            try await alice.waitForStatus(next.localId, atLeast: .stored)
            let stored = try await server.history(conversationId: conversation, token: bob.credentials.token)
            #expect(stored.map(\.body) == ["before the backup", "after the restore"])
            let nextSeq = try #require(stored.last?.seq)
            #expect(nextSeq > lostSeq, "a seq is never given twice: \(nextSeq) after \(lostSeq)")
            try await waitUntil("bob's device has the message stored after the restore", timeout: .seconds(30)) {
                try bob.allMessages(in: conversation).contains { $0.body == "after the restore" }
            }
            let onBob = try bob.allMessages(in: conversation)
            #expect(onBob.map(\.body) == ["before the backup", "after the backup", "after the restore"], "kept, and nothing missing")
            let seqs = onBob.compactMap(\.seq)
            #expect(Set(seqs).count == seqs.count, "no two messages at one seq: \(seqs)")
            try await waitUntil("bob's contiguous seq passes the restore") {
                try bob.client.conversation(id: conversation)?.contiguousSeq == nextSeq
            }
        }
    }
}
