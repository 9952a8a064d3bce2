import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PigeonTestSupport

/// A TCP server on loopback that answers a WebSocket upgrade request (or plain HTTP requests) the way a failing server
/// or network would, byte for byte: fault injection below what a real server can be made to do on cue.
final class ScriptedUpgradeServer: Sendable {
    /// What the server does once it has read an upgrade request.
    enum Script: Sendable {
        /// Closes the connection without answering.
        case closeBeforeAnswering
        /// Answers `101 Switching Protocols` (a valid handshake) and closes the connection.
        case closeAfterSwitching
        /// Never answers, and keeps the connection open: a black hole.
        case neverAnswer
        /// Answers every request `204 No Content` and keeps the connection alive.
        case answerEveryRequest
        /// Answers a connection's first request `204` (keep-alive), then closes the connection on its second request
        /// without answering: a server that closed an idle connection just as the client reused it.
        case closeOnSecondRequest
    }

    /// How many requests (heads with their bodies) it read, over every connection.
    var requests: Int { requestCount.withLockedValue { $0 } }

    /// The port it listens on, on 127.0.0.1.
    let port: Int
    private let channel: any Channel
    private let connections: NIOLockedValueBox<(accepted: Int, open: Int)>
    private let requestCount: NIOLockedValueBox<Int>

    private init(port: Int, channel: any Channel, connections: NIOLockedValueBox<(accepted: Int, open: Int)>, requestCount: NIOLockedValueBox<Int>) {
        self.port = port
        self.channel = channel
        self.connections = connections
        self.requestCount = requestCount
    }

    static func start(_ script: Script) async throws -> ScriptedUpgradeServer {
        let connections = NIOLockedValueBox((accepted: 0, open: 0))
        let requestCount = NIOLockedValueBox(0)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                connections.withLockedValue {
                    $0.accepted += 1
                    $0.open += 1
                }
                child.closeFuture.whenComplete { _ in connections.withLockedValue { $0.open -= 1 } }
                return child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(ScriptHandler(script: script, requestCount: requestCount))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        guard let port = channel.localAddress?.port else { throw TestFailure("the scripted server has no port") }
        return ScriptedUpgradeServer(port: port, channel: channel, connections: connections, requestCount: requestCount)
    }

    /// How many connections it accepted.
    var acceptedConnections: Int { connections.withLockedValue { $0.accepted } }

    /// How many of them are still open: a client that gave up on one must close it.
    var openConnections: Int { connections.withLockedValue { $0.open } }

    func stop() async throws {
        try await channel.close()
    }
}

/// Reads the request head and plays the script.
private final class ScriptHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let script: ScriptedUpgradeServer.Script
    private let requestCount: NIOLockedValueBox<Int>
    private var request = ""
    private var answered = false
    /// Requests read on this connection.
    private var requestsHere = 0

    init(script: ScriptedUpgradeServer.Script, requestCount: NIOLockedValueBox<Int>) {
        self.script = script
        self.requestCount = requestCount
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        request += String(buffer: Self.unwrapInboundIn(data))
        guard let end = request.range(of: "\r\n\r\n") else { return }
        if case .answerEveryRequest = script { return answerRequests(context: context) }
        if case .closeOnSecondRequest = script { return answerRequests(context: context) }
        answered = true
        switch script {
        case .closeBeforeAnswering:
            context.close(promise: nil)
        case .closeAfterSwitching:
            let key = request[..<end.lowerBound].split(separator: "\r\n")
                .first { $0.lowercased().hasPrefix("sec-websocket-key:") }
                .map { $0.dropFirst("sec-websocket-key:".count).trimmingCharacters(in: .whitespaces) } ?? ""
            // RFC 6455: the accept value proves the server read the key.
            let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
            let response = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: \(accept)\r\n\r\n"
            context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: response))).assumeIsolated().whenComplete { _ in
                context.close(promise: nil)
            }
        case .neverAnswer, .answerEveryRequest, .closeOnSecondRequest:
            break
        }
    }

    /// Plain HTTP/1.1: each complete request (its head and `Content-Length` body) in turn.
    private func answerRequests(context: ChannelHandlerContext) {
        while let end = request.range(of: "\r\n\r\n") {
            let length = request[..<end.lowerBound].split(separator: "\r\n")
                .first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            let body = request[end.upperBound...]
            guard body.utf8.count >= length else { return }
            request = String(body.utf8.dropFirst(length)) ?? ""
            requestsHere += 1
            requestCount.withLockedValue { $0 += 1 }
            if case .closeOnSecondRequest = script, requestsHere >= 2 {
                answered = true
                context.close(promise: nil)
                return
            }
            context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: "HTTP/1.1 204 No Content\r\n\r\n")), promise: nil)
        }
    }
}
