import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// API.md 1.2, "Consent and blocking", across two `pigeon-server` processes on one Redis and one PostgreSQL.
extension MultiNodeTests {
    /// The strangers limit counts a user's adds on every node: 30 strangers through node A and 21 more through node B
    /// pass the 50 of an hour (`429` with `Retry-After`, nothing created), 20 more fit.
    @Test func theStrangersLimitCountsTheAddsOfEveryNode() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let adder = try await a.register("adder")
        #expect(try await BlockingTests.create(a, adder, members: (1...30).map { "s\($0)" }).status == 201)
        let over = try await BlockingTests.create(b, adder, members: (31...51).map { "s\($0)" })
        expectError(over, 429, .rateLimited, "the 51st stranger, through node B")
        #expect(try await b.conversations(adder).count == 1, "nothing was created")
        #expect(try await BlockingTests.create(b, adder, members: (31...50).map { "s\($0)" }).status == 201)
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// A block made through node A holds on node B at once: what mallory sends through node B never reaches alice's
    /// WebSocket on node B, and her typing there stops reaching alice too (node B's cached block set was forgotten).
    @Test func aBlockMadeOnOneNodeHoldsOnTheOther() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let alice = try await a.register("alice")
        let bob = try await a.register("bob")
        let mallory = try await a.register("mallory")
        let group = try await b.createConversation(bob, members: ["alice", "mallory"], name: "team")
        let aliceSocket = try await TestWebSocket.connect(port: nodes[1].port, token: alice.token)
        // Before the block: node B has looked up (and cached) who blocks mallory.
        #expect(try await b.typing(mallory, group.id, active: true).status == 204)
        #expect(await aliceSocket.firstEvent { if case .typing(let t) = $0 { t.userId == "mallory" } else { false } } != nil)
        #expect(try await BlockingTests.block(a, alice, "mallory").status == 204)
        let hidden = try await b.sendAccepted(mallory, to: group.id, body: "hidden")
        let visible = try await b.sendAccepted(bob, to: group.id, body: "visible")
        _ = try await b.waitForCount(bob, group.id, 2)
        #expect(try await b.typing(mallory, group.id, active: false).status == 204)
        #expect(try await b.typing(mallory, group.id, active: true).status == 204)
        let frames = await aliceSocket.frames { frame in
            if case .messageNew(_, let message)? = frame.event { message.serverId == visible.serverId } else { false }
        }
        let later = await aliceSocket.inbox.drain(for: .milliseconds(500))
        let events = (frames + later).compactMap(\.event)
        #expect(BlockingTests.newMessages(events, in: group.id).map(\.serverId) == [visible.serverId])
        #expect(!events.contains { if case .typing(let t) = $0 { t.userId == "mallory" && t.active } else { false } }, "\(events)")
        #expect(!(try await a.allMessages(alice, group.id).contains { $0.serverId == hidden.serverId }))
        await aliceSocket.close()
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }
}
