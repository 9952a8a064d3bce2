import Logging
import NIOCore

/// Where one command's reply goes.
enum RedisReplyTarget: Sendable {
    case promise(EventLoopPromise<RESPValue>)
    case continuation(CheckedContinuation<RESPValue, any Error>)
    case callback(@Sendable (Result<RESPValue, RedisError>) -> Void)

    func complete(_ result: Result<RESPValue, RedisError>) {
        switch self {
        case .promise(let promise): promise.completeWith(result.mapError { $0 as any Error })
        case .continuation(let continuation): continuation.resume(with: result.mapError { $0 as any Error })
        case .callback(let callback): callback(result)
        }
    }
}

/// A command waiting to be written, with where its reply goes.
struct RedisRequest: Sendable {
    var command: RESPCommand
    var target: RedisReplyTarget
}

/// Writes batches of commands and matches replies to them in order (RESP replies come in command order).
///
/// Lives on the channel's event loop; ``RedisConnection`` hands it batches there.
final class RedisChannelHandler: ChannelInboundHandler {
    typealias InboundIn = RESPValue
    typealias OutboundOut = ByteBuffer

    private var context: ChannelHandlerContext?
    private var waiting = CircularBuffer<RedisReplyTarget>(initialCapacity: 64)
    private var isClosed = false
    private let onPush: (@Sendable (_ channel: String, _ payload: ByteBuffer) -> Void)?
    private let logger: Logger

    /// - Parameter onPush: for a subscriber connection: receives pub/sub messages, which are not replies.
    init(onPush: (@Sendable (_ channel: String, _ payload: ByteBuffer) -> Void)?, logger: Logger) {
        self.onPush = onPush
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        close(error: .connectionClosed)
    }

    /// Encodes a batch into one buffer and writes it with a single flush.
    func write(_ requests: [RedisRequest]) {
        guard let context, !isClosed else {
            for request in requests { request.target.complete(.failure(.notConnected("the connection is closed"))) }
            return
        }
        var size = 0
        for request in requests { size += request.command.encodedSize }
        var buffer = context.channel.allocator.buffer(capacity: size)
        for request in requests {
            request.command.encode(into: &buffer)
            waiting.append(request.target)
        }
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let value = unwrapInboundIn(data)
        if let onPush, let (channel, payload) = Self.message(value) {
            onPush(channel, payload)
            return
        }
        guard let target = waiting.popFirst() else {
            logger.error("Redis sent a reply nobody asked for; closing the connection", metadata: ["reply": "\(value)"])
            close(error: .connectionClosed)
            context.close(promise: nil)
            return
        }
        if case .error(let message) = value {
            target.complete(.failure(.server(message)))
        } else {
            target.complete(.success(value))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        close(error: .connectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let error = error as? RedisError {
            logger.error("closing the Redis connection", metadata: ["error": "\(error)"])
        } else {
            logger.debug("Redis connection error", metadata: ["error": "\(error)"])
        }
        close(error: .connectionClosed)
        context.close(promise: nil)
    }

    /// Fails every command in flight; later writes fail at once.
    private func close(error: RedisError) {
        isClosed = true
        while let target = waiting.popFirst() {
            target.complete(.failure(error))
        }
    }

    /// A pub/sub message (`["message", channel, payload]` or `["pmessage", pattern, channel, payload]`).
    private static func message(_ value: RESPValue) -> (String, ByteBuffer)? {
        guard case .array(let elements?) = value, let kind = elements.first?.buffer else { return nil }
        if elements.count == 3, kind.readableBytesView.elementsEqual("message".utf8),
            let channel = elements[1].string, let payload = elements[2].buffer
        {
            return (channel, payload)
        }
        if elements.count == 4, kind.readableBytesView.elementsEqual("pmessage".utf8),
            let channel = elements[2].string, let payload = elements[3].buffer
        {
            return (channel, payload)
        }
        return nil
    }
}
