import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// The client's side of RFC 6455 on an upgraded connection: text messages in (reassembled from fragments, up to a
/// size), text messages out (masked, as a client must), a ping every interval (a pong still missing at the next one
/// closes the connection), a pong for each of the server's pings, and the closing handshake.
enum WebSocketSession {
    struct Settings: Sendable {
        /// Interval of the client's pings; a ping still unanswered at the next one closes the connection.
        var pingInterval: Duration
        /// How long the closing handshake may take before the socket is closed regardless.
        var closeTimeout: Duration
        /// The largest message read, across its frames.
        var maxMessageSize: Int
    }

    /// The server left a ping unanswered for a whole interval: the connection is dead or stalled.
    struct PongMissing: Error, CustomStringConvertible {
        var description: String { "the server did not answer a ping in time" }
    }

    /// The server broke the protocol (a continuation without a start, an unknown opcode) or sent a message over
    /// the size limit; the connection was closed with the matching close code.
    struct ProtocolViolation: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs the session until the server closes it (or the connection ends), a ping goes unanswered, or `outgoing`
    /// finishes (the client closes: its close frame, then the server's within the close timeout). Each text message
    /// goes to `receive`, in order.
    static func run(
        _ webSocket: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, settings: Settings, outgoing: AsyncStream<String>,
        receive: @escaping @Sendable (String) async -> Void
    ) async throws {
        let channel = webSocket.channel
        try await webSocket.executeThenClose { inbound, outbound in
            let state = NIOLockedValueBox(State())
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await read(inbound, outbound: outbound, state: state, maxMessageSize: settings.maxMessageSize, receive: receive)
                }
                group.addTask {
                    for await text in outgoing {
                        try await outbound.write(frame(.text, ByteBuffer(string: text)))
                    }
                    guard !Task.isCancelled else { return }
                    // The client closes: its close frame, then the server's answer ends the reader (or the time does).
                    state.withLockedValue { $0.closeSent = true }
                    try await outbound.write(frame(.connectionClose, closeBody(.normalClosure)))
                    try await Task.sleep(for: settings.closeTimeout)
                }
                group.addTask {
                    while true {
                        try await Task.sleep(for: settings.pingInterval)
                        let missing = state.withLockedValue { state in
                            defer { state.pingOutstanding = true }
                            return state.pingOutstanding
                        }
                        if missing { throw PongMissing() }
                        try await outbound.write(frame(.ping, ByteBuffer(integer: UInt64.random(in: .min ... .max))))
                    }
                }
                defer {
                    // Whatever ended first ends the others: closing the connection ends a read or write in progress.
                    channel.close(promise: nil)
                    group.cancelAll()
                }
                try await group.next()
            }
        }
    }

    private struct State {
        var pingOutstanding = false
        var closeSent = false
    }

    private static func read(
        _ inbound: NIOAsyncChannelInboundStream<WebSocketFrame>, outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>,
        state: NIOLockedValueBox<State>, maxMessageSize: Int, receive: @Sendable (String) async -> Void
    ) async throws {
        /// The message being reassembled, and whether it is text.
        var message: (bytes: ByteBuffer, isText: Bool)?
        for try await frame in inbound {
            switch frame.opcode {
            case .text, .binary, .continuation:
                var data = frame.unmaskedData
                if frame.opcode == .continuation {
                    guard message != nil else { return try await fail(.protocolError, "a continuation frame without a message", outbound) }
                    message!.bytes.writeBuffer(&data)
                } else {
                    guard message == nil else { return try await fail(.protocolError, "a new message inside a fragmented one", outbound) }
                    message = (data, frame.opcode == .text)
                }
                guard message!.bytes.readableBytes <= maxMessageSize else {
                    return try await fail(.messageTooLarge, "a message over \(maxMessageSize) bytes", outbound)
                }
                if frame.fin, let complete = message {
                    message = nil
                    if complete.isText { await receive(String(buffer: complete.bytes)) }
                }
            case .ping:
                try await outbound.write(Self.frame(.pong, frame.unmaskedData))
            case .pong:
                state.withLockedValue { $0.pingOutstanding = false }
            case .connectionClose:
                // The server closes: answer with its status code (unless this side closed first), then the end.
                if !state.withLockedValue({ $0.closeSent }) {
                    var body = frame.unmaskedData
                    let code = body.readSlice(length: 2) ?? ByteBuffer()
                    try? await outbound.write(Self.frame(.connectionClose, code))
                }
                return
            default:
                return try await fail(.protocolError, "a frame of unknown opcode \(frame.opcode)", outbound)
            }
        }
    }

    /// Closes with `code` and throws ``ProtocolViolation``.
    private static func fail(
        _ code: WebSocketErrorCode, _ description: String, _ outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>
    ) async throws {
        try? await outbound.write(frame(.connectionClose, closeBody(code)))
        throw ProtocolViolation(description: "the server sent \(description)")
    }

    /// A client frame: masked with a fresh key.
    private static func frame(_ opcode: WebSocketOpcode, _ data: ByteBuffer) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: opcode, maskKey: .random(), data: data)
    }

    private static func closeBody(_ code: WebSocketErrorCode) -> ByteBuffer {
        var body = ByteBuffer()
        body.write(webSocketErrorCode: code)
        return body
    }
}
