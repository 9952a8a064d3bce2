import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// Pushes owed survive a SIGKILL of the real `pigeon-server` binary, and several nodes share the work without
/// pushing twice (API.md 1.1, "Push for devices that are not connected").
@Suite(.serialized) struct PushCrashTests {
    static func arguments(_ gateway: MatrixPushGateway, timeoutSeconds: Int = 10) -> [String] {
        ["--push-gateway", gateway.url, "--push-timeout-seconds", String(timeoutSeconds)]
    }

    /// A push in flight when the node is killed (the gateway received it and never answered) is sent again after
    /// the restart; a push the gateway had answered 200 before the kill is not sent again.
    @Test func aNodeKilledWithAPushInFlightSendsItAfterTheRestartAndNothingAnsweredTwice() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let gateway = try await MatrixPushGateway.start()
        let backend = try await TestBackendInstance.make()
        let first = try await ServerProcess(dataDirectory: directory, backend: backend, arguments: Self.arguments(gateway))
        let alice = try await first.client.register("alice")
        let bob = try await first.client.register("bob")
        try await PushTests.registerPush(first.client, bob, pushkey: "bob-phone")
        let conversation = try await first.client.createConversation(alice, members: ["bob"])

        let answered = try await first.client.sendAccepted(alice, to: conversation.id, body: "pushed before the kill")
        try await waitUntil("the first push was answered") { gateway.accepted.count == 1 }
        // After a 200 the push is done; give the node a moment to record it, as it would before any later kill.
        try await waitUntil("the first push is recorded as sent") { try await PushTests.registration(first.client, bob)?.lastPushedAt != nil }

        gateway.setMode(.hang)
        try await Task.sleep(for: .milliseconds(1100))  // past the one-a-second spacing of pushes to a device
        let owed = try await first.client.sendAccepted(alice, to: conversation.id, body: "owed at the kill")
        try await waitUntil("the second push is in flight") { gateway.received.contains { $0.eventId == owed.serverId } }
        try await first.stop(signal: SIGKILL)

        gateway.setMode(.accept)
        let second = try await ServerProcess(dataDirectory: directory, backend: backend, arguments: Self.arguments(gateway))
        try await waitUntil("the owed push is sent after the restart", timeout: .seconds(30)) {
            gateway.accepted.contains { $0.eventId == owed.serverId }
        }
        // A marker pushed after them: pushes to a device go out in order, so a repeat of either would be in by now.
        let marker = try await second.client.sendAccepted(alice, to: conversation.id, body: "marker")
        try await waitUntil("the marker is pushed", timeout: .seconds(30)) { gateway.accepted.contains { $0.eventId == marker.serverId } }
        let accepted = gateway.accepted.compactMap(\.eventId)
        #expect(accepted == [answered.serverId, owed.serverId, marker.serverId], "each once, the answered one never again: \(accepted)")
        #expect(gateway.malformedCount == 0)
        try await second.stop(signal: SIGTERM)
        await gateway.stop()
        await backend.tearDown()
    }

}

/// Several nodes share the push work without pushing twice, and push only devices with no stream on any node
/// (always on the production backends, whatever `PIGEON_TEST_BACKEND` says, like ``MultiNodeTests``).
@Suite(.serialized) struct PushMultiNodeTests {
    /// Two nodes on one PostgreSQL and Redis: a device connected to node B is not pushed for messages sent through
    /// node A (presence is shared); once it disconnects it is pushed, by one node, once per message.
    @Test func twoNodesPushADeviceOnlyWhenItHasNoStreamOnEitherAndOnlyOnce() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let gateway = try await MatrixPushGateway.start()
        let backend = try await TestBackendInstance.make(.production)
        var nodes: [ServerProcess] = []
        for index in 0..<2 {
            let nodeDirectory = directory + "/node\(index)"
            try FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            nodes.append(try await ServerProcess(dataDirectory: nodeDirectory, backend: backend, arguments: PushCrashTests.arguments(gateway)))
        }
        let a = nodes[0].client
        let alice = try await a.register("alice")
        let bob = try await a.register("bob")
        try await PushTests.registerPush(a, bob, pushkey: "bob-phone")
        let conversation = try await a.createConversation(alice, members: ["bob"])
        // Carol is never connected: her push marks where the collection of pushes has got to.
        let carol = try await a.register("carol")
        try await PushTests.registerPush(a, carol, pushkey: "carol-phone")
        let withCarol = try await a.createConversation(alice, members: ["carol"])
        // A sync without a cursor starts now: the probes' `message.stored` events are read from here on.
        let start = try await a.headCursor(alice)
        let bobSocket = try await TestWebSocket.connect(port: nodes[1].port, token: bob.token)
        // Presence is shared asynchronously: wait until node A counts bob online before asserting no push.
        try await waitUntil("node A sees bob online", timeout: .seconds(40), every: .milliseconds(200)) {
            let stored = try await a.sendAccepted(alice, to: conversation.id, body: "presence probe")
            var online: Int?
            _ = try await eventually(within: .seconds(10)) {
                online = try await Self.recipientsOnline(a, alice, from: start, stored.serverId)
                return online != nil
            }
            return online == 1
        }
        gateway.reset()
        var online: [SendMessageResponse] = []
        for index in 0..<5 { online.append(try await a.sendAccepted(alice, to: conversation.id, body: "online \(index)")) }
        // Not a fixed wait. The nodes are separate processes, so their clocks cannot be moved from here, and what
        // is waited for is real I/O (the store's commits and the collection transaction): instead, a message to
        // carol, sent once bob's five are stored, is pushed only by a collection that read every event committed
        // before it, bob's included (a collection reads every partition of the log up to its head, a few hundred
        // events at a time). Once carol is pushed, a push owed to bob was recorded by that collection; once none is
        // owed any more, it was sent (the gateway has it) or dropped, and nothing later can owe him one.
        let lastOnline = try #require(online.last)
        _ = try await a.waitForMessages(alice, conversation.id, timeout: .seconds(30)) { $0.contains { $0.serverId == lastOnline.serverId } }
        let marker = try await a.sendAccepted(alice, to: withCarol.id, body: "marker")
        try await waitUntil("carol, offline, is pushed", timeout: .seconds(30)) { gateway.accepted.contains { $0.eventId == marker.serverId } }
        try await waitUntil("no push is owed to bob", timeout: .seconds(30)) { try await PushTests.registration(a, bob)?.pending == false }
        let notCarol = gateway.received.filter { $0.devices.map(\.pushkey) != ["carol-phone"] }
        #expect(notCarol.isEmpty, "bob has a stream open on node B: \(gateway.received)")
        gateway.reset()

        await bobSocket.close()
        var sent: [SendMessageResponse] = []
        try await waitUntil("bob, now offline, is pushed", timeout: .seconds(40), every: .milliseconds(300)) {
            sent.append(try await a.sendAccepted(alice, to: conversation.id, body: "offline \(sent.count)"))
            return !gateway.accepted.isEmpty
        }
        // A marker pushed after them: whatever either node still had to push for bob went out before it.
        let lastMarker = try await a.sendAccepted(alice, to: conversation.id, body: "marker")
        sent.append(lastMarker)
        try await waitUntil("the marker is pushed", timeout: .seconds(30)) { gateway.accepted.contains { $0.eventId == lastMarker.serverId } }
        let pushed = gateway.received.compactMap(\.eventId)
        #expect(Set(pushed).count == pushed.count, "never one message twice, whichever node sent it: \(pushed)")
        #expect(Set(pushed).isSubset(of: Set(sent.map(\.serverId))), "only messages sent after the stream closed")
        #expect(pushed.last == sent.last?.serverId, "the newest message was pushed last")
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await gateway.stop()
        await backend.tearDown()
    }

    /// The `recipientsOnline` a stored message reported, read from the sender's sync after `start`.
    static func recipientsOnline(_ client: PigeonTestClient, _ sender: TestDevice, from start: String, _ serverId: String) async throws -> Int? {
        var cursor = start
        for _ in 0..<50 {
            let page = try await client.sync(sender, cursor: cursor, limit: 500)
            for event in page.events {
                if case .messageStored(_, let stored) = event, stored.serverId == serverId { return stored.recipientsOnline }
            }
            guard page.hasMore else { break }
            cursor = page.cursor
        }
        return nil
    }
}
