import Foundation
@testable import PigeonKit
import PigeonProtocol
import PigeonTestSupport
import Testing

/// `PigeonClient.export`: a conversation as the device now reads it, against a real in-process server: seq order, edits
/// applied and not listed apart, a deletion as "message deleted", the quote of a reply, reactions, a message not sent
/// yet last; as JSON and as text.
@Suite(.timeLimit(.minutes(3)))
struct ExportTests {
    @Test func aConversationIsExportedAsItNowReads() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let first = try bob.client.send("first", to: conversation)
            try await bob.waitForStatus(first.localId, atLeast: .stored)
            try await waitUntil("alice has bob's first") { alice.received.contains { $0.body == "first" } }
            let quoted = try #require(alice.received.first { $0.body == "first" })
            let reply = try alice.client.send("second", to: conversation, replyTo: quoted)
            try await alice.waitForStatus(reply.localId, atLeast: .stored)
            let typo = try bob.client.send("tpyo", to: conversation)
            try await bob.waitForStatus(typo.localId, atLeast: .stored)
            _ = try bob.client.edit(localId: typo.localId, body: "fixed")
            let gone = try alice.client.send("gone soon", to: conversation)
            try await alice.waitForStatus(gone.localId, atLeast: .stored)
            _ = try alice.client.delete(localId: gone.localId)
            try await waitUntil("bob has alice's reply") { bob.received.contains { $0.body == "second" } }
            _ = try bob.client.react("👍", to: try #require(bob.received.first { $0.body == "second" }))
            try await waitUntil("alice's copy has the edit, the deletion and the reaction") {
                let messages = try alice.allMessages(in: conversation)
                return messages.contains { $0.body == "fixed" && $0.editedAt != nil }
                    && messages.contains { $0.localId == gone.localId && $0.deletedAt != nil && $0.status >= .stored }
                    && messages.contains { $0.localId == reply.localId && $0.reactions.first?.key == "👍" }
            }
            alice.client.setNetworkEnabled(false)
            try await waitUntil("alice is offline") { alice.client.connectionState == .offline }
            _ = try alice.client.send("still waiting", to: conversation)

            let document = try #require(try JSONSerialization.jsonObject(with: alice.client.export(conversation: conversation, format: .json)) as? [String: Any])
            #expect((document["conversation"] as? [String: Any])?["id"] as? String == conversation)
            #expect(document["exportedBy"] as? String == "alice")
            let messages = try #require(document["messages"] as? [[String: Any]])
            #expect(messages.map { $0["text"] as? String } == ["first", "second", "fixed", "message deleted", "still waiting"], "\(messages)")
            let seqs = messages.compactMap { $0["seq"] as? Int }
            #expect(seqs.count == 4 && seqs == seqs.sorted() && Set(seqs).count == 4, "stored ones in seq order, the edit and deletion not listed: \(seqs)")
            #expect(messages.last?["seq"] == nil && messages.last?["status"] as? String == "pending")
            #expect((messages[1]["replyTo"] as? [String: Any])?["text"] as? String == "first")
            #expect((messages[1]["replyTo"] as? [String: Any])?["senderId"] as? String == "bob")
            #expect((messages[1]["reactions"] as? [[String: Any]])?.first?["key"] as? String == "👍")
            #expect(messages[2]["edited"] as? Bool == true && messages[3]["deleted"] as? Bool == true)
            #expect(messages[0]["status"] == nil && messages[1]["status"] as? String != nil, "a tick only on the user's own messages")

            let text = String(decoding: try alice.client.export(conversation: conversation, format: .text, timeZone: TimeZone(identifier: "UTC")!), as: UTF8.self)
            let lines = text.split(separator: "\n").map(String.init)
            #expect(lines.contains { $0.contains("#\(seqs[0]) bob: first") && $0.contains("+00:00]") }, "\(text)")
            #expect(lines.contains { $0.contains("↪ replying to bob: \"first\"") }, "\(text)")
            #expect(lines.contains { $0.contains("bob: fixed (edited)") }, "\(text)")
            #expect(lines.contains { $0.contains("alice: message deleted") }, "\(text)")
            #expect(lines.contains { $0.trimmingCharacters(in: .whitespaces) == "👍 1" }, "\(text)")
            #expect(lines.last?.contains("(not sent yet) alice: still waiting [pending]") == true, "\(text)")
            #expect(!text.contains("tpyo") && !text.contains("gone soon"), "nothing of what was edited away or deleted")

            #expect(throws: PigeonClientError.self) { try alice.client.export(conversation: "0193a5c2-0000-7000-8000-00000000abcd", format: .json) }
            await alice.client.stop()
            await bob.client.stop()
        }
    }
}
