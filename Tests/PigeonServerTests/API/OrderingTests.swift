import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md "Per-device order" and "Processing": seq 1, 2, 3 … without gaps or repeats, each device's messages in
/// the order it sent them.
@Suite struct OrderingTests {
    @Test func pipelinedWebSocketSendsAreStoredInSendingOrder() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let count = 200
            let ids = (0..<count).map { _ in newId() }
            for index in 0..<count {
                socket.sendMessage(to: conversation.id, body: "m\(index)", clientMessageId: ids[index])
            }
            let frames = await socket.inbox.collect(timeout: .seconds(20)) { frames in frames.filter { $0.ack != nil }.count >= count }
            let acks = frames.compactMap(\.ack)
            #expect(acks.count == count)
            #expect(frames.compactMap(\.errorFrame).isEmpty, "\(frames.compactMap(\.errorFrame))")
            #expect(Set(acks.map(\.clientMessageId)) == Set(ids))
            #expect(Set(acks.map(\.serverId)).count == count)
            #expect(acks.allSatisfy { $0.status == .queued })

            let messages = try await client.waitForCount(alice, conversation.id, count)
            #expect(messages.count == count)
            #expect(messages.map(\.seq) == (1...Int64(count)).map { $0 })
            #expect(messages.map(\.body) == (0..<count).map { "m\($0)" })
            #expect(messages.map(\.clientMessageId) == ids)
            await socket.close()
        }
    }

    @Test func httpSendsAwaitedInTurnKeepTheirOrder() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            var serverIds: [String] = []
            for index in 0..<50 {
                serverIds.append(try await client.sendAccepted(alice, to: conversation.id, body: "h\(index)").serverId)
            }
            let messages = try await client.waitForCount(alice, conversation.id, 50)
            #expect(messages.map(\.serverId) == serverIds)
            #expect(messages.map(\.seq) == (1...50).map { Int64($0) })
            #expect(messages.map(\.body) == (0..<50).map { "h\($0)" })
        }
    }

    @Test func seqIsGaplessUnderEightConcurrentSenders() async throws {
        try await withTestServer { client in
            let users = (0..<8).map { "user\($0)" }
            var devices: [TestDevice] = []
            for user in users { devices.append(try await client.register(user)) }
            let conversation = try await client.createConversation(devices[0], members: users)
            let perDevice = 50
            // Devices 0–3 send over HTTP (each awaiting its answers in turn), 4–7 pipeline over a WebSocket; all at once.
            let sockets = try await withThrowingTaskGroup(of: (Int, TestWebSocket).self) { group in
                for index in 4..<8 {
                    let device = devices[index]
                    group.addTask { (index, try await TestWebSocket.connect(port: client.port, token: device.token)) }
                }
                return try await group.reduce(into: [Int: TestWebSocket]()) { $0[$1.0] = $1.1 }
            }
            let accepted = try await withThrowingTaskGroup(of: [String].self) { group in
                for index in 0..<8 {
                    let device = devices[index]
                    group.addTask {
                        if let socket = sockets[index] {
                            for i in 0..<perDevice { socket.sendMessage(to: conversation.id, body: "d\(index)-\(i)") }
                            let frames = await socket.inbox.collect(timeout: .seconds(30)) { $0.filter { $0.ack != nil }.count >= perDevice }
                            return frames.compactMap(\.ack).map(\.serverId)
                        }
                        var ids: [String] = []
                        for i in 0..<perDevice {
                            ids.append(try await client.sendAccepted(device, to: conversation.id, body: "d\(index)-\(i)").serverId)
                        }
                        return ids
                    }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            let total = 8 * perDevice
            #expect(accepted.count == total)
            #expect(Set(accepted).count == total)

            let messages = try await client.waitForCount(devices[3], conversation.id, total, timeout: .seconds(30))
            #expect(messages.map(\.seq) == (1...Int64(total)).map { $0 })
            #expect(Set(messages.map(\.serverId)) == Set(accepted))
            #expect(Set(messages.map(\.serverId)).count == total)
            for (index, device) in devices.enumerated() {
                let own = messages.filter { $0.senderDeviceId == device.deviceId }
                #expect(own.map(\.body) == (0..<perDevice).map { "d\(index)-\($0)" }, "device \(index) out of order")
                #expect(own.allSatisfy { $0.senderId == device.userId })
            }
            #expect(try await client.conversation(devices[5], conversation.id).lastSeq == Int64(total))
            for socket in sockets.values { await socket.close() }
        }
    }

    @Test func conversationsNumberTheirMessagesIndependently() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let first = try await client.createConversation(alice, members: ["bob"])
            let second = try await client.createConversation(alice, members: ["carol"])
            for index in 0..<6 {
                try await client.sendAccepted(alice, to: (index % 2 == 0 ? first : second).id, body: "\(index)")
            }
            let one = try await client.waitForCount(alice, first.id, 3)
            let two = try await client.waitForCount(alice, second.id, 3)
            #expect(one.map(\.seq) == [1, 2, 3])
            #expect(one.map(\.body) == ["0", "2", "4"])
            #expect(two.map(\.seq) == [1, 2, 3])
            #expect(two.map(\.body) == ["1", "3", "5"])
        }
    }
}
