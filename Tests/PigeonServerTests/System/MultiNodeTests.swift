import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonRedisBuffer
import PigeonTestSupport
import Testing

@testable import PigeonServer

/// Several `pigeon-server` processes on one Redis and one PostgreSQL form one service (always on the production
/// backends, whatever `PIGEON_TEST_BACKEND` says: that is what these tests are about).
@Suite(.serialized) struct MultiNodeTests {
    static func startNodes(_ count: Int, backend: TestBackendInstance, directory: String) async throws -> [ServerProcess] {
        var nodes: [ServerProcess] = []
        for index in 0..<count {
            let nodeDirectory = directory + "/node\(index)"
            try FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            nodes.append(try await ServerProcess(dataDirectory: nodeDirectory, backend: backend))
        }
        return nodes
    }

    static func messageNews(_ frames: [ServerFrame]) -> [Message] {
        frames.compactMap { if case .event(.messageNew(_, let message)) = $0 { message } else { nil } }
    }

    static func lastCursor(_ frames: [ServerFrame]) -> String? {
        frames.compactMap { frame -> String? in
            guard case .event(let event) = frame else { return nil }
            return event.cursor
        }.last
    }

    /// Senders on node A, a receiver on node B: every message arrives once, in seq order; the receiver then
    /// reconnects to node A with its cursor and gets exactly what it missed. Processing is shared by both nodes.
    @Test func sendersOnOneNodeReceiversOnAnotherAndAReconnectThatSwitchesNodes() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production, leaseMilliseconds: 2_000)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let bob = try await a.register("bob")
        // Both nodes process: the 16 partitions are split 8 and 8 before anything is sent, and the conversations
        // fall in at least 9 distinct partitions, so each node holds some of them.
        try await waitUntil("the two nodes split the buffer's partitions", timeout: .seconds(30)) {
            let heldByA = try await a.metric("pigeon_buffer_partitions_held")
            let heldByB = try await b.metric("pigeon_buffer_partitions_held")
            return heldByA == 8 && heldByB == 8
        }
        var senders: [TestDevice] = []
        var conversations: [Conversation] = []
        var partitions = Set<Int>()
        while conversations.count < 8 || partitions.count < 9 {
            let sender = try await a.register("sender\(senders.count)")
            let conversation = try await b.createConversation(sender, members: ["bob"])
            senders.append(sender)
            conversations.append(conversation)
            partitions.insert(RedisStreamsBuffer.partition(ofConversation: conversation.id, partitions: 16))
        }
        let socket = try await TestWebSocket.connect(port: nodes[1].port, token: bob.token)
        let perSender = 40
        let targets = conversations
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, sender) in senders.enumerated() {
                group.addTask {
                    for n in 0..<perSender { try await a.sendAccepted(sender, to: targets[index].id, body: "m\(n)") }
                }
            }
            try await group.waitForAll()
        }
        let received = await socket.inbox.collect(timeout: .seconds(30)) { items in
            Self.messageNews(items).count >= senders.count * perSender
        }
        let messages = Self.messageNews(received)
        #expect(messages.count == senders.count * perSender, "bob on node B got \(messages.count) message.new")
        for conversation in conversations {
            let seqs = messages.filter { $0.conversationId == conversation.id }.map(\.seq)
            #expect(seqs == Array(1...Int64(perSender)), "conversation \(conversation.id): \(seqs)")
        }
        guard let cursor = Self.lastCursor(received) else {
            Issue.record("no cursor")
            return
        }
        await socket.close()

        // Sent through node B while bob is away; bob comes back on node A with his cursor.
        for (index, sender) in senders.enumerated() { try await b.sendAccepted(sender, to: conversations[index].id, body: "later") }
        let again = try await TestWebSocket.connect(port: nodes[0].port, token: bob.token, cursor: cursor)
        let missed = Self.messageNews(await again.inbox.collect(timeout: .seconds(30)) { Self.messageNews($0).count >= senders.count })
        #expect(missed.count == senders.count)
        #expect(missed.allSatisfy { $0.body == "later" && $0.seq == Int64(perSender + 1) }, "\(missed.map { ($0.body, $0.seq) })")
        let extra = Self.messageNews(await again.inbox.drain(for: .milliseconds(500)))
        #expect(extra.isEmpty, "duplicates after resuming: \(extra.count)")
        await again.close()

        let storedA = try await a.metric("pigeon_messages_stored_total") ?? 0
        let storedB = try await b.metric("pigeon_messages_stored_total") ?? 0
        #expect(storedA + storedB == Double(senders.count * (perSender + 1)))
        #expect(storedA > 0 && storedB > 0, "processing should be shared: node A stored \(storedA), node B \(storedB)")
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// Typing on node A reaches a device on node B.
    @Test func typingReachesADeviceOnAnotherNode() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let alice = try await nodes[0].client.register("alice")
        let bob = try await nodes[0].client.register("bob")
        let conversation = try await nodes[0].client.createConversation(alice, members: ["bob"])
        let socket = try await TestWebSocket.connect(port: nodes[1].port, token: bob.token)
        let answer = try await nodes[0].client.typing(alice, conversation.id, active: true)
        #expect(answer.status == 204 || answer.status == 200 || answer.status == 202)
        let typing = await socket.firstEvent(timeout: .seconds(10)) { if case .typing = $0 { true } else { false } }
        guard case .typing(let event) = typing else {
            Issue.record("no typing event on node B")
            return
        }
        #expect(event.userId == "alice" && event.active)
        await socket.close()
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// `recipientsOnline` counts the recipient's device connected to the other node, whichever node processes the
    /// message (eight conversations spread over both nodes' partitions), and stops counting it once it left.
    @Test func recipientsOnlineCountsDevicesOnEveryNode() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let a = nodes[0].client
        let alice = try await a.register("alice")
        let bob = try await a.register("bob")
        var conversations: [Conversation] = []
        for _ in 0..<8 { conversations.append(try await a.createConversation(alice, members: ["bob"])) }
        let aliceSocket = try await TestWebSocket.connect(port: nodes[0].port, token: alice.token)
        let bobSocket = try await TestWebSocket.connect(port: nodes[1].port, token: bob.token)

        /// Sends one message per conversation until every `message.stored` says `expected` (presence is written
        /// asynchronously, so the first ones may still see the old state).
        func expectRecipientsOnline(_ expected: Int) async throws {
            var pending = Set(conversations.map(\.id))
            var seen: [Int] = []
            let deadline = ContinuousClock.now + .seconds(20)
            while !pending.isEmpty, ContinuousClock.now < deadline {
                for id in pending { try await a.sendAccepted(alice, to: id, body: "ping") }
                let stored = await aliceSocket.inbox.collect(timeout: .seconds(10)) { frames in
                    frames.filter { if case .event(.messageStored) = $0 { true } else { false } }.count >= pending.count
                }
                for frame in stored {
                    guard case .event(.messageStored(_, let event)) = frame else { continue }
                    seen.append(event.recipientsOnline)
                    if event.recipientsOnline == expected { pending.remove(event.conversationId) }
                }
                if !pending.isEmpty { try await Task.sleep(for: .milliseconds(200)) }
            }
            #expect(pending.isEmpty, "recipientsOnline never became \(expected) in \(pending.count) conversations; seen \(seen)")
        }

        try await expectRecipientsOnline(1)
        await bobSocket.close()
        try await expectRecipientsOnline(0)
        await aliceSocket.close()
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// The operator's page lists every node of the deployment with its last heartbeat, this one marked, and the
    /// conversation route sees a device online on another node.
    @Test func theStatsOfEachNodeListEveryNodeAndItsHeartbeat() async throws {
        struct Stats: Decodable {
            struct Node: Decodable { var nodeId: String; var lastHeartbeatAt: Int64; var thisNode: Bool }
            var nodeId: String
            var serverTime: Int64
            var nodes: [Node]
        }
        struct Delivery: Decodable {
            struct Member: Decodable { var userId: String; var devices: [Device] }
            struct Device: Decodable { var deviceId: String; var online: Bool }
            var members: [Member]
        }
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production)
        var nodes: [ServerProcess] = []
        for (index, name) in ["node-a", "node-b"].enumerated() {
            let nodeDirectory = directory + "/node\(index)"
            try FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
            nodes.append(try await ServerProcess(dataDirectory: nodeDirectory, backend: backend, arguments: ["--node-id", name, "--admin-token", "t"]))
        }
        for (node, name) in zip(nodes, ["node-a", "node-b"]) {
            var stats: Stats?
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                stats = try await node.client.request(.GET, "/v1/admin/stats", token: "t").decode(Stats.self)
                if stats?.nodes.map(\.nodeId) == ["node-a", "node-b"] { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            let seen = try #require(stats)
            #expect(seen.nodeId == name)
            #expect(seen.nodes.map(\.nodeId) == ["node-a", "node-b"], "\(name): \(seen.nodes.map(\.nodeId))")
            #expect(seen.nodes.filter(\.thisNode).map(\.nodeId) == [name])
            #expect(seen.nodes.allSatisfy { abs(seen.serverTime - $0.lastHeartbeatAt) < 15_000 }, "\(seen.nodes)")
        }
        let alice = try await nodes[0].client.register("alice")
        let bob = try await nodes[0].client.register("bob")
        let conversation = try await nodes[0].client.createConversation(alice, members: ["bob"])
        let bobSocket = try await TestWebSocket.connect(port: nodes[1].port, token: bob.token)
        var online = false
        let deadline = ContinuousClock.now + .seconds(20)
        while !online, ContinuousClock.now < deadline {
            let delivery = try await nodes[0].client.request(.GET, "/v1/admin/conversations/\(conversation.id)", token: "t").decode(Delivery.self)
            online = delivery.members.first { $0.userId == "bob" }?.devices.first { $0.deviceId == bob.deviceId }?.online == true
            if !online { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(online, "node A sees bob's device online on node B")
        await bobSocket.close()
        for node in nodes { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// kill -9 one of two nodes in the middle of a send storm: the other node takes over its partitions (and the
    /// entries it had been handed) and every acknowledged message is stored exactly once, seq gapless, in order.
    @Test func killingOneNodeMidBatchLosesNothing() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production, leaseMilliseconds: 2_000)
        let nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let receiver = try await b.register("receiver")
        var logs: [CrashTests.SenderLog] = []
        var conversations: [Conversation] = []
        for index in 0..<4 {
            logs.append(CrashTests.SenderLog(device: try await b.register("sender\(index)")))
            conversations.append(try await b.createConversation(receiver, members: ["sender\(index)"]))
        }
        let stop = NIOLockedValueBox(false)
        let answered = NIOLockedValueBox(0)
        let initial = logs
        let targets = conversations
        let victim = nodes[0]
        let results = try await withThrowingTaskGroup(of: (Int, CrashTests.SenderLog).self) { group in
            for index in 0..<4 {
                // Half of the senders send through the node that dies, half through the survivor.
                let client = index % 2 == 0 ? a : b
                group.addTask {
                    (index, await CrashTests.httpSender(
                        client, initial[index], senderIndex: index, conversationId: targets[index].id, stop: stop, answered: answered))
                }
            }
            group.addTask {
                // Mid-storm: once a hundred sends were answered (a fixed time lets too few through on a slow machine).
                let deadline = ContinuousClock.now + .seconds(30)
                while answered.withLockedValue({ $0 }) < 100, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
                try await victim.stop(signal: SIGKILL)
                try await Task.sleep(for: .milliseconds(500))
                stop.withLockedValue { $0 = true }
                return (-1, initial[0])
            }
            var results: [Int: CrashTests.SenderLog] = [:]
            for try await (index, log) in group where index >= 0 { results[index] = log }
            return results
        }
        logs = (0..<4).map { results[$0]! }
        #expect(logs.map(\.answered.count).reduce(0, +) > 50)
        for (index, log) in logs.enumerated() {
            let answered = Set(log.answered.keys)
            let messages = try await b.waitForMessages(receiver, conversations[index].id, timeout: .seconds(60)) { messages in
                answered.isSubset(of: Set(messages.map(\.clientMessageId)))
            }
            try CrashTests.verify(messages, logs: [log], requireAll: false)
        }
        try await nodes[1].stop(signal: SIGTERM)
        await backend.tearDown()
    }

    /// Four nodes, senders on all of them, a receiver's stream on one: kill -9 one node once 150 sends were answered.
    /// Every answered message is stored exactly once, each conversation's seq gapless and in sending order, and the
    /// receiver's stream (on a survivor) gets each stored message once, in seq order, whichever node stored it.
    @Test func fourNodesWithOneKilledMidStormLoseNothingAndStoreNothingTwice() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production, leaseMilliseconds: 2_000)
        let nodes = try await Self.startNodes(4, backend: backend, directory: directory)
        let clients = nodes.map(\.client)
        let receiver = try await clients[3].register("receiver")
        var logs: [CrashTests.SenderLog] = []
        var conversations: [Conversation] = []
        for index in 0..<8 {
            logs.append(CrashTests.SenderLog(device: try await clients[index % 4].register("sender\(index)")))
            conversations.append(try await clients[index % 4].createConversation(receiver, members: ["sender\(index)"]))
        }
        let socket = try await TestWebSocket.connect(port: nodes[3].port, token: receiver.token)
        let answered = NIOLockedValueBox(0)
        let stop = NIOLockedValueBox(false)
        let (initial, targets, victim) = (logs, conversations, nodes[0])
        let results = try await withThrowingTaskGroup(of: (Int, CrashTests.SenderLog).self) { group in
            for index in 0..<8 {
                // Two senders per node, one of them through the node that dies.
                let client = clients[index % 4]
                group.addTask {
                    var log = initial[index]
                    var next = 0
                    while !stop.withLockedValue({ $0 }), next < 2_000 {
                        let id = CrashTests.clientMessageId(sender: index, index: next)
                        log.sent.append(id)
                        next += 1
                        guard
                            let answer = try? await client.send(
                                log.device, to: targets[index].id, body: "m\(next)", clientMessageId: id, timeout: .seconds(3)),
                            answer.status == 202 || answer.status == 200, let response = try? answer.decode(SendMessageResponse.self)
                        else { break }
                        log.answered[id] = response.serverId
                        answered.withLockedValue { $0 += 1 }
                    }
                    return (index, log)
                }
            }
            group.addTask {
                let deadline = ContinuousClock.now + .seconds(30)
                while answered.withLockedValue({ $0 }) < 150, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
                try await victim.stop(signal: SIGKILL)
                // The survivors go on for a while: the dead node's partitions move to them meanwhile.
                let resumed = answered.withLockedValue { $0 }
                while answered.withLockedValue({ $0 }) < resumed + 150, ContinuousClock.now < deadline + .seconds(30) {
                    try await Task.sleep(for: .milliseconds(5))
                }
                stop.withLockedValue { $0 = true }
                return (-1, initial[0])
            }
            var results: [Int: CrashTests.SenderLog] = [:]
            for try await (index, log) in group where index >= 0 { results[index] = log }
            return results
        }
        logs = (0..<8).map { results[$0]! }
        #expect(logs.map(\.answered.count).reduce(0, +) >= 300)
        var stored: [String: [Message]] = [:]
        for (index, log) in logs.enumerated() {
            let answeredIds = Set(log.answered.keys)
            let messages = try await clients[1].waitForMessages(receiver, conversations[index].id, timeout: .seconds(60)) { messages in
                answeredIds.isSubset(of: Set(messages.map(\.clientMessageId)))
            }
            try CrashTests.verify(messages, logs: [log], requireAll: false)
            stored[conversations[index].id] = messages
        }
        // A send caught by the kill may be stored without its answer, a moment later: settle, then read the final history.
        try await Task.sleep(for: .seconds(2))
        for conversation in conversations {
            stored[conversation.id] = try await clients[1].waitForMessages(receiver, conversation.id, timeout: .seconds(10)) { _ in true }
        }
        let total = stored.values.map(\.count).reduce(0, +)
        let frames = await socket.inbox.collect(timeout: .seconds(30)) { Self.messageNews($0).count >= total }
        let pushed = Self.messageNews(frames)
        #expect(pushed.count == total, "the stream got \(pushed.count) message.new for \(total) stored messages")
        for (conversationId, messages) in stored {
            #expect(pushed.filter { $0.conversationId == conversationId }.map(\.seq) == messages.map(\.seq), "conversation \(conversationId)")
        }
        await socket.close()
        for node in nodes.dropFirst() { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }

    /// A cursor taken on node A resumes exactly once on node C after A stopped (its buffer partitions went to B) and
    /// C joined (partitions rebalanced again): the event log's position does not depend on which node wrote an event.
    @Test func aCursorTakenOnOneNodeResumesExactlyOnceOnAnotherAfterPartitionsMoved() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make(.production, leaseMilliseconds: 2_000)
        var nodes = try await Self.startNodes(2, backend: backend, directory: directory)
        let (a, b) = (nodes[0].client, nodes[1].client)
        let bob = try await a.register("bob")
        var senders: [TestDevice] = []
        var conversations: [Conversation] = []
        for index in 0..<12 {
            let sender = try await a.register("sender\(index)")
            senders.append(sender)
            conversations.append(try await a.createConversation(sender, members: ["bob"]))
        }
        let socket = try await TestWebSocket.connect(port: nodes[0].port, token: bob.token)
        for (index, sender) in senders.enumerated() { try await a.sendAccepted(sender, to: conversations[index].id, body: "first") }
        let first = await socket.inbox.collect(timeout: .seconds(30)) { Self.messageNews($0).count >= senders.count }
        #expect(Self.messageNews(first).count == senders.count)
        let cursor = try #require(Self.lastCursor(first))
        await socket.close()

        // A stops: B takes all partitions and stores what is sent while bob is away.
        try await nodes[0].stop(signal: SIGTERM)
        for (index, sender) in senders.enumerated() { try await b.sendAccepted(sender, to: conversations[index].id, body: "second") }
        // C joins: the partitions are shared between B and C again.
        let cDirectory = directory + "/node2"
        try FileManager.default.createDirectory(atPath: cDirectory, withIntermediateDirectories: true)
        nodes.append(try await ServerProcess(dataDirectory: cDirectory, backend: backend))
        let c = nodes[2].client
        try await Task.sleep(for: .seconds(3))
        for (index, sender) in senders.enumerated() { try await c.sendAccepted(sender, to: conversations[index].id, body: "third") }
        for conversation in conversations {
            _ = try await c.waitForMessages(bob, conversation.id, timeout: .seconds(30)) { $0.count == 3 }
        }

        let again = try await TestWebSocket.connect(port: nodes[2].port, token: bob.token, cursor: cursor)
        let missed = Self.messageNews(await again.inbox.collect(timeout: .seconds(30)) { Self.messageNews($0).count >= 2 * senders.count })
        #expect(missed.count == 2 * senders.count, "bob resumed on C with \(missed.count) message.new")
        for conversation in conversations {
            let bodies = missed.filter { $0.conversationId == conversation.id }.map { "\($0.seq):\($0.body)" }
            #expect(bodies == ["2:second", "3:third"], "conversation \(conversation.id): \(bodies)")
        }
        let extra = Self.messageNews(await again.inbox.drain(for: .milliseconds(500)))
        #expect(extra.isEmpty, "duplicates after resuming: \(extra.count)")
        await again.close()
        for node in nodes.dropFirst() { try await node.stop(signal: SIGTERM) }
        await backend.tearDown()
    }
}
