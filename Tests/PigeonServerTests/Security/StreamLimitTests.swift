import Foundation
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// Issue 11: no stream or device can make the server hold unbounded memory, descriptors or CPU. Each limit is
/// hit through the real stack by sockets that never read; memory is read from this process (the server runs in
/// it), with a generous margin where the unbounded server grew by gigabytes.
@Suite(.serialized, .timeLimit(.minutes(1))) struct StreamLimitTests {
    /// Resident growth allowed over a test: the bounded server stays well under it.
    static let memoryMargin = 150 << 20

    static func hits(_ client: PigeonTestClient, _ limit: String) async throws -> Double {
        try await client.metric("pigeon_limit_hits_total{limit=\"\(limit)\"}") ?? 0
    }

    static func openStreams(_ client: PigeonTestClient, _ transport: String) async throws -> Double {
        try await client.metric("pigeon_open_streams{transport=\"\(transport)\"}") ?? 0
    }

    /// Sends `frame` over `socket` as fast as the server reads it, until `done` or `timeout`.
    static func flood(_ socket: RawStreamSocket, frame: [UInt8], timeout: Duration = .seconds(20), until done: () async throws -> Bool) async throws {
        let batch = Array((0..<256).map { _ in frame }.joined())
        var pending = ArraySlice<UInt8>()
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, try await !done() {
            for _ in 0..<64 {
                if pending.isEmpty { pending = batch[...] }
                let sent = socket.sendWithoutBlocking(Array(pending))
                pending = pending.dropFirst(sent)
                if sent == 0 { break }
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    static func typingFrame(_ conversationId: String) -> [UInt8] {
        RawStreamSocket.frame(payload: Array("{\"op\":\"typing\",\"conversationId\":\"\(conversationId)\",\"active\":true}".utf8))
    }

    // MARK: Outbound byte budget

    /// Typing ops to a victim whose socket never reads: control frames count against its byte budget, so it is
    /// disconnected (close code 4008 once it reads again) instead of growing the server by gigabytes.
    @Test func typingFloodToANeverReadingVictimDisconnectsIt() async throws {
        try await withTestServer(configure: {
            $0.streamLimits.typingPerSecond = 0
            $0.streamLimits.outboundBytes = 1 << 20
            $0.streamLimits.closeTimeout = .seconds(1)
        }) { client in
            let (alice, bob, conversation) = try await StreamTests.setUp(client)
            let victim = try await RawStreamSocket.webSocket(port: client.port, token: bob.token)
            let flooder = try await RawStreamSocket.webSocket(port: client.port, token: alice.token, receiveBuffer: 1 << 20)
            let before = ProcessUsage.residentBytes
            try await Self.flood(flooder, frame: Self.typingFrame(conversation.id)) { try await Self.hits(client, "stream_outbound_bytes") >= 1 }
            let grown = ProcessUsage.residentBytes - before
            #expect(try await Self.hits(client, "stream_outbound_bytes") == 1)
            #expect(grown < Self.memoryMargin, "resident memory grew by \(grown >> 20) MiB")
            let code = await victim.readUntilClosed(timeout: .seconds(10))
            #expect(code == 4008 || code == 0, "victim not disconnected: \(String(describing: code))")
            // The flooder's own stream is still served.
            #expect(try await eventually { try await Self.openStreams(client, "ws") == 1 })
        }
    }

    /// Three never-reading sessions receiving 60 KB messages stay bounded and are disconnected; a reconnect with
    /// the cursor from before gets every message exactly once.
    @Test func neverReadingSessionsAreDisconnectedAndResumeByCursorWithoutLoss() async throws {
        try await withTestServer(configure: {
            $0.streamLimits.outboundBytes = 1 << 20
            $0.streamLimits.closeTimeout = .seconds(1)
        }) { client in
            let (alice, bob, conversation) = try await StreamTests.setUp(client)
            let cursor = try await client.headCursor(bob)
            var sockets: [RawStreamSocket] = []
            for _ in 0..<3 { sockets.append(try await RawStreamSocket.webSocket(port: client.port, token: bob.token, cursor: cursor)) }
            let before = ProcessUsage.residentBytes
            let body = String(repeating: "x", count: 60_000)
            var sent = 0
            while try await Self.hits(client, "stream_outbound_bytes") < 3, sent < 400 {
                try await client.sendAccepted(alice, to: conversation.id, body: "\(sent)-" + body)
                sent += 1
            }
            #expect(try await eventually { try await Self.hits(client, "stream_outbound_bytes") == 3 }, "after \(sent) messages")
            let grown = ProcessUsage.residentBytes - before
            #expect(grown < Self.memoryMargin, "resident memory grew by \(grown >> 20) MiB")
            for socket in sockets {
                let code = await socket.readUntilClosed(timeout: .seconds(10))
                #expect(code == 4008 || code == 0, "not disconnected: \(String(describing: code))")
            }
            #expect(try await eventually { try await Self.openStreams(client, "ws") == 0 })

            let resumed = try await TestWebSocket.connect(port: client.port, token: bob.token, cursor: cursor)
            var received: [String] = []
            let deadline = ContinuousClock.now + .seconds(30)
            while received.count < sent, ContinuousClock.now < deadline {
                guard let message = await resumed.firstEvent(timeout: .seconds(10), where: { $0.newMessage != nil })?.newMessage else { break }
                received.append(String(message.body.prefix { $0 != "-" }))
            }
            #expect(received == (0..<sent).map(String.init), "received \(received.count) of \(sent)")
            #expect(await resumed.inbox.drain(for: .milliseconds(300)).compactMap(\.event?.newMessage).isEmpty)
            await resumed.close()
        }
    }

    // MARK: Write timeout

    /// A stream whose client stopped reading is closed once one write has waited for the write timeout, over
    /// WebSocket and SSE alike, freeing its descriptor.
    @Test(arguments: ["ws", "sse"]) func writeTimeoutClosesANeverReadingStream(transport: String) async throws {
        try await withTestServer(configure: {
            $0.streamLimits.writeTimeout = .seconds(1)
            $0.streamLimits.outboundBytes = 64 << 20
            $0.streamLimits.closeTimeout = .seconds(1)
        }) { client in
            let (alice, bob, conversation) = try await StreamTests.setUp(client)
            let victim = transport == "ws"
                ? try await RawStreamSocket.webSocket(port: client.port, token: bob.token)
                : try await RawStreamSocket.serverSentEvents(port: client.port, token: bob.token)
            #expect(try await eventually { try await Self.openStreams(client, transport) == 1 })
            let body = String(repeating: "y", count: 60_000)
            var sent = 0
            while try await Self.hits(client, "stream_write_timeout") < 1, sent < 300 {
                try await client.sendAccepted(alice, to: conversation.id, body: body)
                sent += 1
            }
            #expect(try await eventually { try await Self.hits(client, "stream_write_timeout") == 1 }, "after \(sent) messages")
            #expect(try await eventually { try await Self.openStreams(client, transport) == 0 })
            #expect(await victim.readUntilClosed(timeout: .seconds(15)) != nil, "the victim's connection is still open")
            #expect(try await Self.hits(client, "stream_outbound_bytes") == 0)
        }
    }

    // MARK: Back-pressure on operations

    /// Clients that send operations and never read their replies are slowed: their operations are not read while
    /// the replies wait, the server spins no core meanwhile and its memory stays bounded.
    ///
    /// The server runs as a process of its own (on the pass's store and buffer), so that its CPU time and memory are
    /// its alone: measured in this process, the suites running beside this one were counted too.
    @Test func operationsFromClientsThatNeverReadTheirRepliesAreSlowedWithoutSpinning() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make()
        let server = try await ServerProcess(
            dataDirectory: directory, backend: backend,
            arguments: ["--stream-outbound-bytes", String(256 << 10), "--max-streams-per-device", "32"])
        let client = server.client
        let alice = try await client.register("alice")
        // Enough to show many sockets stall together, few enough to fill their kernel buffers quickly in a debug
        // build (each takes some 100 KB of replies first).
        var sockets: [RawStreamSocket] = []
        for _ in 0..<8 { sockets.append(try await RawStreamSocket.webSocket(port: client.port, token: alice.token)) }
        let before = try server.residentBytes
        // Each is answered with an error frame of some 150 bytes.
        let operation = RawStreamSocket.frame(payload: Array("{\"op\":\"no.such.operation\",\"clientMessageId\":\"x\"}".utf8))
        let batch = Array((0..<256).map { _ in operation }.joined())
        // Until the server has stopped reading every socket: none of them takes a byte more for a second (a
        // send that finds the kernel buffers full once may only have caught the server between two reads).
        let deadline = ContinuousClock.now + .seconds(45)
        var lastProgress = ContinuousClock.now
        var stalled = false
        // What each socket has still to send of its current batch (a frame is never cut in two).
        var unsent = sockets.map { _ in ArraySlice(batch) }
        while ContinuousClock.now < deadline {
            var progressed = false
            for (index, socket) in sockets.enumerated() {
                if unsent[index].isEmpty { unsent[index] = ArraySlice(batch) }
                let sent = socket.sendWithoutBlocking(Array(unsent[index]))
                unsent[index] = unsent[index].dropFirst(sent)
                if sent > 0 { progressed = true }
            }
            if progressed { lastProgress = .now }
            if ContinuousClock.now - lastProgress >= .seconds(1) {
                stalled = true
                break
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(stalled, "the server kept reading the sockets for 45 s")
        // The client's sends stop once the kernel buffers are full, which on a loaded machine can be before the server
        // has worked through what they hold (CI measured 3.96 s of the server's CPU in the window below, spent reading
        // and answering that backlog into kernel send buffers autotuned to megabytes; they are bounded now): the window
        // starts once the server has settled, under 100 ms of CPU in a second. A server that spun would never settle.
        let settleDeadline = ContinuousClock.now + .seconds(30)
        var settled = false
        var previousCPU = try server.cpuTime
        while ContinuousClock.now < settleDeadline {
            try await Task.sleep(for: .seconds(1))
            let cpuNow = try server.cpuTime
            if cpuNow - previousCPU < .milliseconds(100) {
                settled = true
                break
            }
            previousCPU = cpuNow
        }
        #expect(settled, "the server kept working for 30 s with every socket stalled")
        // No busy wait. Measured in a debug build: the server process idles at 20-40 ms of CPU in these 2 s (its
        // lease and buffer housekeeping on PostgreSQL and Redis included); re-checking each paused socket every
        // millisecond instead of waiting for its replies to drain takes 310 ms.
        let cpuBefore = try server.cpuTime
        try await Task.sleep(for: .seconds(2))
        let cpu = try server.cpuTime - cpuBefore
        #expect(cpu < .milliseconds(200), "\(sockets.count) stalled sockets used \(cpu) of the server's CPU in 2 s")
        let grown = try server.residentBytes - before
        #expect(grown < Self.memoryMargin, "resident memory grew by \(grown >> 20) MiB")
        // Slowed, not disconnected: what they caused themselves is waited out, not counted as too slow.
        #expect(try await Self.hits(client, "stream_outbound_bytes") == 0)
        #expect(try await Self.openStreams(client, "ws") == Double(sockets.count))
        try await server.stop(signal: SIGTERM)
        await backend.tearDown()
    }

    // MARK: Streams per device

    /// Past 8 streams of one device (WebSocket and SSE together) the oldest is closed (4009 on WebSocket, the
    /// response ended on SSE); another device of the same user, and another user's device with the same id,
    /// keep working.
    @Test func ninthStreamOfADeviceClosesItsOldest() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await StreamTests.setUp(client)
            let bobOther = try await client.register("bob", existing: bob)
            let other = try await TestWebSocket.connect(port: client.port, token: bobOther.token)
            let oldestSSE = try await TestSSE.open(port: client.port, token: bob.token)
            var sockets: [TestWebSocket] = []
            for _ in 0..<7 { sockets.append(try await TestWebSocket.connect(port: client.port, token: bob.token)) }
            #expect(try await Self.hits(client, "streams_per_device") == 0)

            let ninth = try await TestWebSocket.connect(port: client.port, token: bob.token)
            #expect(await eventually { oldestSSE.events.isClosed }, "the oldest (SSE) stream was not ended")
            let tenth = try await TestWebSocket.connect(port: client.port, token: bob.token)
            #expect(await eventually { sockets[0].inbox.isClosed }, "the oldest WebSocket was not closed")
            let close = sockets[0].closeFrame.withLockedValue { $0 }
            #expect(close?.code == 4009, "close \(String(describing: close))")
            #expect(close?.reason == "replaced by a newer stream of this device")
            #expect(try await Self.hits(client, "streams_per_device") == 2)
            #expect(try await eventually { try await Self.openStreams(client, "ws") == 9 })

            try await client.sendAccepted(alice, to: conversation.id, body: "still here")
            for socket in [other, ninth, tenth] + sockets.dropFirst() {
                #expect(await socket.firstEvent(where: { $0.newMessage?.body == "still here" }) != nil)
            }
            for socket in [other, ninth, tenth] + sockets { await socket.close() }
            await oldestSSE.close()
        }
    }

    // MARK: Typing rate

    /// Typing ops beyond the device's bucket (burst 10, then 5 a second) are refused: an `error` frame with
    /// `rate_limited` on WebSocket, `429 rate_limited` with `Retry-After` over HTTP; other devices are unaffected.
    @Test func typingIsRateLimitedPerDevice() async throws {
        // A slow refill, so the pause below does not earn the device a new token.
        try await withTestServer(configure: { $0.streamLimits.typingPerSecond = 0.05 }) { client in
            let (alice, bob, conversation) = try await StreamTests.setUp(client)
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            for _ in 0..<11 { socket.send(.typing(conversationId: conversation.id, active: true)) }
            let refused = await socket.first { $0.errorFrame != nil }?.errorFrame
            #expect(refused?.error.code == .rateLimited, "\(String(describing: refused))")
            #expect(await socket.inbox.drain(for: .milliseconds(200)).compactMap(\.errorFrame).isEmpty)

            let answer = try await client.typing(alice, conversation.id, active: true)
            expectError(answer, 429, .rateLimited, "HTTP typing past the burst")
            #expect(try await client.typing(bob, conversation.id, active: true).status == 204)
            #expect(try await Self.hits(client, "typing_rate") == 2)
            await socket.close()
        }
    }

    // MARK: Invalid UTF-8

    /// A WebSocket text frame that is not UTF-8 closes the connection with 1007 (RFC 6455) and stores nothing.
    /// A message may come in fragments, with control frames between them (RFC 6455 5.4): the connection collates them
    /// on its event loop and acts on the whole message once.
    @Test func aFragmentedSendIsCollatedAndStoredOnce() async throws {
        try await withTestServer { client in
            let (alice, _, conversation) = try await StreamTests.setUp(client)
            let socket = try await RawStreamSocket.webSocket(port: client.port, token: alice.token)
            let operation = Array(
                ("{\"op\":\"send\",\"conversationId\":\"\(conversation.id)\",\"clientMessageId\":\"\(newId())\","
                    + "\"type\":\"text\",\"body\":\"in three pieces: \u{1F54A}\",\"clientTimestamp\":1}").utf8)
            // Cut inside the dove's four UTF-8 bytes: only the whole message is text.
            let cut = operation.count - 24
            try socket.sendFrame(opcode: 1, payload: Array(operation[..<40]), fin: false)
            try socket.sendFrame(opcode: 9, payload: Array("ping".utf8))
            try socket.sendFrame(opcode: 0, payload: Array(operation[40..<cut]), fin: false)
            try socket.sendFrame(opcode: 0, payload: Array(operation[cut...]), fin: true)
            let messages = try await client.waitForMessages(alice, conversation.id) { !$0.isEmpty }
            #expect(messages.map(\.body) == ["in three pieces: \u{1F54A}"])
            #expect(await socket.readUntilClosed(timeout: .milliseconds(300)) == nil, "the connection stays open")
        }
    }

    /// A fragmented message over 1 MiB closes the connection with 1009, a continuation with no message begun with
    /// 1002; nothing is stored.
    @Test(arguments: [(true, 1009), (false, 1002)])
    func badFragmentsCloseTheConnectionAndStoreNothing(_ tooLarge: Bool, _ code: Int) async throws {
        try await withTestServer { client in
            let (alice, _, conversation) = try await StreamTests.setUp(client)
            let socket = try await RawStreamSocket.webSocket(port: client.port, token: alice.token)
            let start = "{\"op\":\"send\",\"conversationId\":\"\(conversation.id)\",\"clientMessageId\":\"\(newId())\",\"type\":\"text\",\"body\":\""
            if tooLarge {
                try socket.sendFrame(opcode: 1, payload: Array(start.utf8), fin: false)
                for _ in 0..<3 { try socket.sendFrame(opcode: 0, payload: Array(repeating: UInt8(ascii: "a"), count: 400_000), fin: false) }
                try socket.sendFrame(opcode: 0, payload: Array("\",\"clientTimestamp\":1}".utf8), fin: true)
            } else {
                try socket.sendFrame(opcode: 0, payload: Array((start + "x\",\"clientTimestamp\":1}").utf8), fin: true)
            }
            #expect(await socket.readUntilClosed(timeout: .seconds(10)) == code)
            let after = try await client.sendAccepted(alice, to: conversation.id, body: "after the close")
            _ = try await client.waitForMessages(alice, conversation.id) { $0.contains { $0.serverId == after.serverId } }
            #expect(try await client.allMessages(alice, conversation.id).filter { $0.serverId != after.serverId }.isEmpty)
        }
    }

    @Test func invalidUTF8TextFrameClosesWith1007AndStoresNothing() async throws {
        try await withTestServer { client in
            let (alice, _, conversation) = try await StreamTests.setUp(client)
            let socket = try await RawStreamSocket.webSocket(port: client.port, token: alice.token)
            let operation = "{\"op\":\"send\",\"conversationId\":\"\(conversation.id)\",\"clientMessageId\":\"\(newId())\","
                + "\"type\":\"text\",\"body\":\"bad "
            try socket.sendFrame(payload: Array(operation.utf8) + [0xFF, 0xFE, 0xC3] + Array("\",\"clientTimestamp\":1}".utf8))
            #expect(await socket.readUntilClosed(timeout: .seconds(10)) == 1007)
            // Stored nothing. Not a wait: a socket's operations are handled one at a time, each accepted before the
            // next frame is read, so anything this frame had sent was accepted before the close; a message accepted
            // after the close in the same conversation is stored after it (a conversation's messages are stored in
            // the order accepted), so once that one is stored the count is final. (The store write this waits for is
            // real I/O that no clock governs.)
            let after = try await client.sendAccepted(alice, to: conversation.id, body: "after the close")
            _ = try await client.waitForMessages(alice, conversation.id) { $0.contains { $0.serverId == after.serverId } }
            #expect(try await client.allMessages(alice, conversation.id).filter { $0.serverId != after.serverId }.isEmpty)
        }
    }
}
