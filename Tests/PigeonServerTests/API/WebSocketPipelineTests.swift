import Foundation
import PigeonServer
import PigeonTestSupport
import Testing

/// The WebSocket hot path leans on the pipeline Hummingbird builds at the upgrade: the server's `WebSocketConnection`
/// goes right behind the frame decoder and takes the data frames, and Hummingbird's WebSocket handler behind it must
/// still answer the control frames (ping, close). A Hummingbird release that lays the pipeline out differently would
/// end every stream at once; this test says so by name, on a real socket.
@Suite struct WebSocketPipelineTests {
    @Test func theUpgradedPipelineHasTheShapeTheHotPathReliesOn() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let socket = try await RawStreamSocket.webSocket(port: client.port, token: alice.token)
            // A data frame reaches the server's connection handler, which answers it on the event loop.
            try socket.sendText("{\"op\":\"test.probe\",\"clientMessageId\":\"shape-probe\"}")
            let answer = await socket.readFrames { $0.opcode == 1 && $0.text.contains("shape-probe") || $0.opcode == 8 }
            let frames = try #require(answer, "the connection ended before the operation was answered")
            let last = try #require(frames.last)
            #expect(last.opcode == 1, "no answer to a data frame; the stream closed with \(last.closeCode): \(last.text)")
            // A control frame goes past it to Hummingbird's handler, which answers a ping with its payload.
            try socket.sendFrame(opcode: 9, payload: Array("shape".utf8))
            let pong = await socket.readFrames { $0.opcode == 10 || $0.opcode == 8 }?.last
            #expect(pong?.opcode == 10 && pong?.text == "shape", "a ping is answered by a pong with its payload: \(String(describing: pong))")
            // And the client's close is answered with a close (1000).
            try socket.sendFrame(opcode: 8, payload: [0x03, 0xE8])
            #expect(await socket.readUntilClosed() == 1000)
        }
    }
}
