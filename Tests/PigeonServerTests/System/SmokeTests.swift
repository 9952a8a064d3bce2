import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

@Suite struct SmokeTests {
    @Test func sendIsStoredAndPushedOverWebSocket() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            let answer = try await client.send(alice, to: conversation.id, body: "hello")
            #expect(answer.status == 202)
            let frames = await socket.frames { if case .event(.messageNew) = $0 { true } else { false } }
            guard case .event(.messageNew(_, let message)) = frames.last else {
                Issue.record("no message.new: \(frames)")
                return
            }
            #expect(message.body == "hello")
            #expect(message.seq == 1)
            await socket.close()
        }
    }
}
