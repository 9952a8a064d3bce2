import Foundation
import NIOCore
import NIOPosix
import PigeonTestSupport
import Testing

@Suite struct FaultProxyTests {
    @Test func bytesRoundTripBothWays() async throws {
        try await withEchoBehindProxy { proxy, echo in
            let client = try await TestClient.connect(port: proxy.port)
            try await client.send(Array("hello".utf8))
            #expect(try await client.receive(count: 5) == Array("hello".utf8))

            let payload = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
            try await client.send(payload)
            let echoed = try await client.receive(count: payload.count)
            #expect(echoed.count == payload.count)
            #expect(echoed == payload)
            #expect(echo.receivedBytes == 5 + payload.count)
            #expect(proxy.acceptedConnections == 1)
            #expect(proxy.openConnections == 1)
            await client.close()
        }
    }

    @Test func halfCloseIsPassedOnAndClosedConnectionsAreForgotten() async throws {
        try await withEchoBehindProxy { proxy, _ in
            // The client sends, closes its output, and still gets the answer before the server's EOF.
            let halfClosing = try await TestClient.connect(port: proxy.port)
            try await halfClosing.send(Array("bye".utf8))
            try await halfClosing.closeOutput()
            #expect(try await halfClosing.receive(count: 3) == Array("bye".utf8))
            #expect(try await halfClosing.waitUntilClosed())

            // Clients that close their connections leave none open in the proxy.
            var clients: [TestClient] = []
            for index in 0..<10 {
                let client = try await TestClient.connect(port: proxy.port)
                try await client.send([UInt8(index)])
                #expect(try await client.receive(count: 1) == [UInt8(index)])
                clients.append(client)
            }
            #expect(proxy.openConnections == 10)
            for client in clients { await client.close() }
            #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.openConnections == 0 })
            #expect(proxy.acceptedConnections == 11)
        }
    }

    @Test func cutConnectionsClosesOpenConnectionsAndKeepsTheMode() async throws {
        try await withEchoBehindProxy { proxy, echo in
            let first = try await TestClient.connect(port: proxy.port)
            try await first.send([1])
            #expect(try await first.receive(count: 1) == [1])

            proxy.cutConnections()
            // Nothing sent after the cut reaches the server, even if the socket is not closed yet.
            try? await first.send([2])
            #expect(try await first.waitUntilClosed())
            #expect(echo.receivedBytes == 1)
            #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.openConnections == 0 })
            #expect(proxy.mode == .forward)

            let second = try await TestClient.connect(port: proxy.port)
            try await second.send([2])
            #expect(try await second.receive(count: 1) == [2])
            #expect(proxy.acceptedConnections == 2)
            await second.close()
        }
    }

    @Test func refuseClosesConnectionsUntilForwardRestores() async throws {
        try await withEchoBehindProxy { proxy, echo in
            let open = try await TestClient.connect(port: proxy.port)
            try await open.send([1])
            #expect(try await open.receive(count: 1) == [1])

            proxy.setMode(.refuse)
            #expect(proxy.mode == .refuse)
            try? await open.send([2])
            #expect(try await open.waitUntilClosed())
            #expect(echo.receivedBytes == 1)

            // The kernel accepts the connection, the proxy closes it at once (a refused connect is as good).
            if let refused = try? await TestClient.connect(port: proxy.port) {
                #expect(try await refused.waitUntilClosed(within: .seconds(2)))
                #expect(refused.received.isEmpty)
            }
            #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.acceptedConnections == 2 })
            #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.openConnections == 0 })

            proxy.setMode(.forward)
            let restored = try await TestClient.connect(port: proxy.port)
            try await restored.send([3])
            #expect(try await restored.receive(count: 1) == [3])
            #expect(echo.receivedBytes == 2)
            await restored.close()
        }
    }

    @Test func stallPassesNoBytesUntilForwardRestores() async throws {
        try await withEchoBehindProxy { proxy, echo in
            let early = try await TestClient.connect(port: proxy.port)
            try await early.send([1])
            #expect(try await early.receive(count: 1) == [1])

            proxy.setMode(.stall)
            #expect(proxy.mode == .stall)
            try await early.send([2])
            let late = try await TestClient.connect(port: proxy.port)
            try await late.send([3])
            // Both bytes reached the proxy and were swallowed there: had they been passed on, it would be by now.
            try await waitUntil("the proxy read the two bytes sent into the stall") { proxy.discardedBytes == 2 }
            #expect(early.received.isEmpty)
            #expect(late.received.isEmpty)
            #expect(echo.receivedBytes == 1)
            #expect(early.isOpen)
            #expect(late.isOpen)
            #expect(proxy.openConnections == 2)

            // Leaving the stall closes the stalled connections; new ones go through.
            proxy.setMode(.forward)
            #expect(try await early.waitUntilClosed())
            #expect(try await late.waitUntilClosed())
            #expect(early.received.isEmpty)
            let fresh = try await TestClient.connect(port: proxy.port)
            try await fresh.send([4])
            #expect(try await fresh.receive(count: 1) == [4])
            #expect(echo.receivedBytes == 2)
            await fresh.close()
        }
    }

    @Test func rapidCutCyclesLeaveNoConnectionOpen() async throws {
        try await withEchoBehindProxy { proxy, _ in
            for cycle in 0..<50 {
                let client = try await TestClient.connect(port: proxy.port)
                if cycle.isMultiple(of: 2) {
                    try await client.send([UInt8(cycle)])
                    #expect(try await client.receive(count: 1) == [UInt8(cycle)])
                } else {
                    // Cut as soon as the proxy has the connection, possibly before its upstream connection is up.
                    #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.acceptedConnections == cycle + 1 })
                }
                proxy.cutConnections()
                let closed = try await client.waitUntilClosed()
                #expect(closed, "cycle \(cycle)")
                if !closed { break }
            }
            #expect(proxy.acceptedConnections == 50)
            #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.openConnections == 0 })

            let last = try await TestClient.connect(port: proxy.port)
            try await last.send([9])
            #expect(try await last.receive(count: 1) == [9])
            await proxy.stop()
            #expect(proxy.openConnections == 0)
            #expect(try await last.waitUntilClosed())
        }
    }

    @Test func stopClosesTheListenerAndEveryConnection() async throws {
        try await withEchoBehindProxy { proxy, _ in
            var clients: [TestClient] = []
            for index in 0..<3 {
                let client = try await TestClient.connect(port: proxy.port)
                try await client.send([UInt8(index)])
                #expect(try await client.receive(count: 1) == [UInt8(index)])
                clients.append(client)
            }
            await proxy.stop()
            #expect(proxy.openConnections == 0)
            for client in clients { #expect(try await client.waitUntilClosed()) }
            await #expect(throws: (any Error).self) { try await TestClient.connect(port: proxy.port) }
        }
    }

    @Test func unreachableUpstreamClosesTheClient() async throws {
        let proxy = try await FaultProxy.start(upstreamPort: try freePort())
        let client = try await TestClient.connect(port: proxy.port)
        #expect(try await client.waitUntilClosed())
        #expect(await eventually(within: .seconds(5), every: .milliseconds(5)) { proxy.openConnections == 0 })
        #expect(proxy.acceptedConnections == 1)
        await proxy.stop()
    }
}

// MARK: - Helpers

/// Runs `body` with an echo server and a proxy in front of it, and stops both afterwards.
private func withEchoBehindProxy(_ body: (FaultProxy, EchoServer) async throws -> Void) async throws {
    let echo = try await EchoServer.start()
    let proxy: FaultProxy
    do {
        proxy = try await FaultProxy.start(upstreamPort: echo.port)
    } catch {
        await echo.stop()
        throw error
    }
    do {
        try await body(proxy, echo)
    } catch {
        await proxy.stop()
        await echo.stop()
        throw error
    }
    await proxy.stop()
    await echo.stop()
}

/// A value behind a lock.
private final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.withLock { body(&value) }
    }
}

/// A TCP server on loopback that sends back every byte it receives, and closes its output after its client's.
private final class EchoServer: Sendable {
    let port: Int
    private let channel: any Channel
    private let received: Locked<Int>

    private init(port: Int, channel: any Channel, received: Locked<Int>) {
        self.port = port
        self.channel = channel
        self.received = received
    }

    static func start() async throws -> EchoServer {
        let received = Locked(0)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(EchoHandler(received: received))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        guard let port = channel.localAddress?.port else { throw TestFailure("echo server has no port") }
        return EchoServer(port: port, channel: channel, received: received)
    }

    /// How many bytes the server has received, over all connections.
    var receivedBytes: Int { received.withLock { $0 } }

    func stop() async {
        try? await channel.close()
    }
}

private final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let received: Locked<Int>

    init(received: Locked<Int>) { self.received = received }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = Self.unwrapInboundIn(data)
        received.withLock { $0 += buffer.readableBytes }
        context.write(Self.wrapOutboundOut(buffer), promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(mode: .output, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// A TCP client that collects what it receives.
private final class TestClient: Sendable {
    private let channel: any Channel
    private let buffer: Locked<[UInt8]>

    private init(channel: any Channel, buffer: Locked<[UInt8]>) {
        self.channel = channel
        self.buffer = buffer
    }

    static func connect(port: Int) async throws -> TestClient {
        let buffer = Locked<[UInt8]>([])
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ReceivedBytesCollector(buffer: buffer))
                }
            }
            .connect(host: "127.0.0.1", port: port)
            .get()
        return TestClient(channel: channel, buffer: buffer)
    }

    /// The bytes received and not taken by ``receive(count:within:)`` yet.
    var received: [UInt8] { buffer.withLock { $0 } }

    var isOpen: Bool { channel.isActive }

    func send(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    /// Waits until `count` bytes have arrived and takes them; after `timeout`, takes what there is.
    func receive(count: Int, within timeout: Duration = .seconds(5)) async throws -> [UInt8] {
        _ = await eventually(within: timeout, every: .milliseconds(5)) { buffer.withLock { $0.count >= count } }
        return buffer.withLock { bytes in
            let taken = Array(bytes.prefix(count))
            bytes.removeFirst(taken.count)
            return taken
        }
    }

    /// Whether the connection closes (the peer's EOF or reset closes it) within `timeout`.
    func waitUntilClosed(within timeout: Duration = .seconds(5)) async throws -> Bool {
        await eventually(within: timeout, every: .milliseconds(5)) { !channel.isActive }
    }

    func closeOutput() async throws {
        try await channel.close(mode: .output)
    }

    func close() async {
        try? await channel.close()
    }
}

private final class ReceivedBytesCollector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let buffer: Locked<[UInt8]>

    init(buffer: Locked<[UInt8]>) { self.buffer = buffer }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = Self.unwrapInboundIn(data).readableBytesView
        buffer.withLock { $0.append(contentsOf: bytes) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
