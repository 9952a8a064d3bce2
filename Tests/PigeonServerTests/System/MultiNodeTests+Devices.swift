import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// A revocation reaches every node (docs/API.md, "Devices"): within a second of the `204` another node refuses the
/// token and ends the device's streams, and within the poll interval when no wake-up reaches it.
extension MultiNodeTests {
    /// The bound the tests hold a node to: the 1 s poll, plus a loaded machine's slack.
    static let revocationBound = Duration.seconds(3)

    /// A device whose token node B has cached and whose streams are open on node B, revoked through node A.
    @Test func aRevocationOnOneNodeReachesTheOtherNodeAtOnce() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let laptop = try await a.register("alice")
        let phone = try await a.register("alice", existing: laptop)
        #expect(try await b.request(.GET, "/v1/conversations", token: phone.token).status == 200, "node B has checked (and cached) the token")
        let socket = try await TestWebSocket.connect(port: nodes[1].port, token: phone.token)
        let sse = try await TestSSE.open(port: nodes[1].port, token: phone.token)

        let revoked = ContinuousClock.now
        #expect(try await a.request(.DELETE, "/v1/devices/\(phone.deviceId)", token: laptop.token).status == 204)
        expectError(try await a.request(.GET, "/v1/conversations", token: phone.token), 401, .unauthorized, "node A, at once")
        try await waitUntil("node B refuses the revoked token", timeout: Self.revocationBound) {
            try await b.request(.GET, "/v1/conversations", token: phone.token).status == 401
        }
        try await waitUntil("node B closed the revoked device's WebSocket", timeout: Self.revocationBound) {
            socket.closeFrame.withLockedValue { $0 } != nil
        }
        try await waitUntil("node B ended the revoked device's SSE stream", timeout: Self.revocationBound) { sse.events.isClosed }
        let took = ContinuousClock.now - revoked
        #expect(socket.closeFrame.withLockedValue { $0 }?.code == 4001)
        #expect(try await b.request(.GET, "/v1/conversations", token: laptop.token).status == 200)
        #expect(took < Self.revocationBound, "node B took \(took)")
        await socket.close()
        await sse.close()
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// A revocation no node is woken for (written to the store directly, as by a node whose notification was lost):
    /// every node still acts on it within the poll interval.
    @Test func aRevocationWithoutAWakeUpIsFoundByThePoll() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let laptop = try await nodes[0].client.register("alice")
        let phone = try await nodes[0].client.register("alice", existing: laptop)
        var sockets: [TestWebSocket] = []
        for node in nodes {
            #expect(try await node.client.request(.GET, "/v1/conversations", token: phone.token).status == 200)
            sockets.append(try await TestWebSocket.connect(port: node.port, token: phone.token))
        }
        let schema = try #require(backend.schemaName)
        try await TestPostgres.execute(
            """
            UPDATE \(schema).devices SET revoked_at = \(nowMillis()), last_revoked_at = \(nowMillis()), token_hash = NULL,
                revocation_seq = nextval('\(schema).device_revocation_seq')
            WHERE user_id = 'alice' AND id = '\(phone.deviceId)'
            """)
        let written = ContinuousClock.now
        for (index, node) in nodes.enumerated() {
            try await waitUntil("node \(index) refuses the token", timeout: Self.revocationBound) {
                try await node.client.request(.GET, "/v1/conversations", token: phone.token).status == 401
            }
            try await waitUntil("node \(index) closed the WebSocket", timeout: Self.revocationBound) {
                sockets[index].closeFrame.withLockedValue { $0 } != nil
            }
            #expect(sockets[index].closeFrame.withLockedValue { $0 }?.code == 4001)
        }
        let took = ContinuousClock.now - written
        #expect(took < Self.revocationBound, "the nodes took \(took)")
        for socket in sockets { await socket.close() }
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }
}
