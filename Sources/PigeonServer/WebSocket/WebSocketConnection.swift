import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOWebSocket
import PigeonDomain
import PigeonProtocol

/// The event loop side of one `/v1/ws` connection: its operations are read, and its frames written, on the
/// connection's event loop, with no task in between (docs/FEATURES.md, "The WebSocket on its event loop").
///
/// In the pipeline right behind the WebSocket frame decoder, it takes the data frames (text, binary, continuation)
/// and lets the control frames (ping, pong, close) through to the WebSocket handler behind it, which answers them.
/// It collates a fragmented message (at most ``maxMessageBytes``), checks its UTF-8, and hands each text message to
/// the ``WebSocketOperations`` attached to it: an operation that can be done at once (a send whose checks need
/// nothing but memory, a receipt) is done on the loop, the others go, in order, to a task (``WebSocketOperations``'
/// lane); while the lane holds any, every later operation follows it there, so a socket's operations still act in
/// its order (invariant 5).
///
/// Writing: once the stream's backlog is written, the session is live (``StreamSession/goLive(_:)``) and its queue
/// is drained here, scheduled by ``LoopDrains`` once per burst for every connection of the loop, each connection's
/// frames written together and flushed once. The frames in flight count against the session's budget until the
/// socket took them; reading stops while the session holds more than its high-water mark, and while the lane is
/// full, and starts again below the low-water mark: a client that never reads cannot grow the server's memory.
final class WebSocketConnection: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The largest message (all its fragments), as the WebSocket endpoint has always allowed.
    static let maxMessageBytes = 1 << 20
    /// Operations waiting in (or running from) the lane before reading pauses.
    static let laneLimit = 64

    private enum Message {
        case text(String)
        case binary
    }

    /// What the connection was given once its session was registered (``attach(_:)``).
    struct Attachment: Sendable {
        let session: StreamSession
        let operations: WebSocketOperations
        let pauseReadingBytes: Int
        let resumeReadingBytes: Int
    }

    /// The live part of the stream: where the frames written so far end, and how a cursor is written.
    private struct Live {
        var last: EventPosition
        let log: any EventLog
    }

    private var context: ChannelHandlerContext?
    private var attachment: Attachment?
    /// Messages read and not acted on yet: before the attachment, or while the session's replies or the lane are over
    /// their limits (reading is paused meanwhile, so this holds at most what one read brought).
    private var held = CircularBuffer<Message>()
    /// The message being collated from fragments, and whether it is text.
    private var fragments: ByteBuffer?
    private var fragmentsAreText = true
    /// A `read()` held back while reading is paused.
    private var readPending = false
    /// Operations handed to the lane and not yet acted on.
    private var laneCount = 0
    private var live: Live?
    private var failed = false

    /// Finds the connection in `channel`'s pipeline (installed by ``WebSocketUpgradeWatcher`` at the upgrade).
    static func find(on channel: any Channel) async -> NIOLoopBound<WebSocketConnection>? {
        try? await channel.eventLoop.submit {
            NIOLoopBound(try channel.pipeline.syncOperations.handler(type: WebSocketConnection.self), eventLoop: channel.eventLoop)
        }.get()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        attachment?.operations.finishLane()
        // The attachment holds this connection (its operations answer the lane's progress here): let both go.
        attachment = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        attachment?.operations.finishLane()
        context.fireChannelInactive()
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            guard !frame.rsv1, !frame.rsv2, !frame.rsv3, fragments == nil else { return fail(.protocolError, context: context) }
            if frame.fin {
                received(frame.opcode == .text, frame.unmaskedData, context: context)
            } else {
                fragments = frame.unmaskedData
                fragmentsAreText = frame.opcode == .text
            }
        case .continuation:
            guard !frame.rsv1, !frame.rsv2, !frame.rsv3, var buffer = fragments else { return fail(.protocolError, context: context) }
            fragments = nil
            var data = frame.unmaskedData
            guard buffer.readableBytes + data.readableBytes <= Self.maxMessageBytes else { return fail(.messageTooLarge, context: context) }
            buffer.writeBuffer(&data)
            if frame.fin {
                received(fragmentsAreText, buffer, context: context)
            } else {
                fragments = buffer
            }
        default:
            // Ping, pong and close: the WebSocket handler behind answers them.
            context.fireChannelRead(data)
        }
    }

    private func received(_ isText: Bool, _ buffer: ByteBuffer, context: ChannelHandlerContext) {
        guard !failed else { return }
        let message: Message
        if isText {
            guard let text = Self.validatedString(buffer) else { return fail(.dataInconsistentWithMessage, context: context) }
            message = .text(text)
        } else {
            message = .binary
        }
        held.append(message)
        actOnHeld()
    }

    /// Acts on the held messages in order while the session's replies and the lane are under their limits; reads
    /// again once all are acted on and the replies drained below the low-water mark.
    private func actOnHeld() {
        guard let attachment else { return }
        while !held.isEmpty, !failed, !isOverLimits(attachment) {
            act(on: held.removeFirst(), attachment)
        }
        guard held.isEmpty, readPending, let context else { return }
        guard laneCount < Self.laneLimit, attachment.session.heldBytes <= attachment.resumeReadingBytes else { return }
        readPending = false
        context.read()
    }

    private func isOverLimits(_ attachment: Attachment) -> Bool {
        laneCount >= Self.laneLimit || attachment.session.heldBytes > attachment.pauseReadingBytes
    }

    private static func validatedString(_ buffer: ByteBuffer) -> String? {
        var buffer = buffer
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) {
            return try? buffer.readUTF8ValidatedString(length: buffer.readableBytes)
        }
        return buffer.readString(length: buffer.readableBytes)
    }

    private func act(on message: Message, _ attachment: Attachment) {
        switch message {
        case .binary:
            attachment.operations.refuseBinary()
        case .text(let text):
            if laneCount == 0 {
                switch attachment.operations.actNow(text) {
                case .done: break
                case .lane(let operation): toLane(operation, attachment)
                }
            } else if let operation = attachment.operations.parse(text) {
                toLane(operation, attachment)
            }
        }
    }

    private func toLane(_ operation: ClientOperation, _ attachment: Attachment) {
        laneCount += 1
        attachment.operations.enqueue(operation)
    }

    /// The lane acted on one operation (called on the loop).
    func laneFinished() {
        laneCount -= 1
        actOnHeld()
    }

    /// Reads only while nothing is held and the session's replies and the lane are under their limits (a read held
    /// back is issued once they drain: ``actOnHeld()``).
    func read(context: ChannelHandlerContext) {
        if let attachment, held.isEmpty, !isOverLimits(attachment) {
            context.read()
        } else {
            readPending = true
        }
    }

    /// Closes the connection with `code` (a protocol error of the client's: a bad fragment, a message too large,
    /// text that is not UTF-8), as the WebSocket handler does for the frames it reads.
    private func fail(_ code: WebSocketErrorCode, context: ChannelHandlerContext) {
        guard !failed else { return }
        failed = true
        fragments = nil
        held.removeAll()
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data)), promise: nil)
        context.close(promise: nil)
    }

    // MARK: Attaching and writing

    /// Starts acting on the operations (those held so far first).
    func attach(_ attachment: Attachment) {
        self.attachment = attachment
        actOnHeld()
    }

    /// The backlog up to `last` is written: the session's queue is drained here from now on.
    func goLive(after last: EventPosition, log: any EventLog, outlet: any SessionOutlet) {
        live = Live(last: last, log: log)
        attachment?.session.goLive(outlet)
    }

    /// Writes what the session queued (on the loop, scheduled by ``LoopDrains``).
    func drain() {
        guard let context, var live, let session = attachment?.session, let items = session.takeForLoop() else { return }
        var written = 0
        var skipped = 0
        var frames: [String] = []
        frames.reserveCapacity(items.count)
        for item in items {
            switch item {
            case .event(let event, let cost):
                // Read from the log while the backlog was written: already sent.
                guard live.last.precedes(event) else {
                    skipped += cost
                    continue
                }
                live.last.advance(past: event)
                frames.append(event.frame(cursor: live.log.cursor(live.last)))
                written += cost
            case .frame(_, let json, let cost):
                frames.append(json)
                written += cost
            }
        }
        self.live = live
        if skipped > 0 { session.release(cost: skipped) }
        guard !frames.isEmpty else { return }
        session.loopWriteStarted()
        let promise = context.eventLoop.makePromise(of: Void.self)
        for (index, json) in frames.enumerated() {
            let buffer = context.channel.allocator.buffer(string: json)
            let frame = WebSocketFrame(fin: true, opcode: .text, data: buffer)
            context.write(wrapOutboundOut(frame), promise: index == frames.count - 1 ? promise : nil)
        }
        context.flush()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let cost = written
        promise.futureResult.whenComplete { _ in
            session.loopWriteFinished(cost: cost)
            loopBound.value.actOnHeld()
        }
    }
}

/// Adds a ``WebSocketConnection`` behind the WebSocket frame decoder when a connection is upgraded to a WebSocket,
/// before the bytes that came with the upgrade are read: no frame of the client reaches the pipeline's end before it.
/// Inert on a connection that stays HTTP.
final class WebSocketUpgradeWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case HTTPServerUpgradeEvents.upgradeComplete = event {
            do {
                let decoder = try context.pipeline.syncOperations.handler(type: ByteToMessageHandler<WebSocketFrameDecoder>.self)
                try context.pipeline.syncOperations.addHandler(WebSocketConnection(), position: .after(decoder))
            } catch {
                // No frame decoder: not the WebSocket this server speaks; the stream's task finds no connection and ends.
            }
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}

/// Schedules the drains of live sessions on their event loops: one task per loop for every session that has
/// something to write when it runs, whatever the number of events and acks that arrived for them meanwhile.
final class LoopDrains: Sendable {
    private struct Pending: Sendable {
        var outlets: [ConnectionOutlet] = []
        var scheduled = false
    }

    let eventLoop: any EventLoop
    private let pending = NIOLockedValueBox(Pending())

    private init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    private static let all = NIOLockedValueBox<[ObjectIdentifier: LoopDrains]>([:])

    /// The drains of `eventLoop` (one for the life of the process per loop).
    static func of(_ eventLoop: any EventLoop) -> LoopDrains {
        all.withLockedValue { all in
            let key = ObjectIdentifier(eventLoop)
            if let drains = all[key] { return drains }
            let drains = LoopDrains(eventLoop: eventLoop)
            all[key] = drains
            return drains
        }
    }

    func schedule(_ outlet: ConnectionOutlet) {
        let start = pending.withLockedValue { pending -> Bool in
            pending.outlets.append(outlet)
            if pending.scheduled { return false }
            pending.scheduled = true
            return true
        }
        guard start else { return }
        eventLoop.execute { [self] in
            let outlets = pending.withLockedValue { pending -> [ConnectionOutlet] in
                pending.scheduled = false
                defer { pending.outlets.removeAll(keepingCapacity: true) }
                return pending.outlets
            }
            for outlet in outlets { outlet.connection.value.drain() }
        }
    }
}

/// A live session's outlet: its connection, drained on its loop through the loop's ``LoopDrains``.
final class ConnectionOutlet: SessionOutlet {
    let connection: NIOLoopBound<WebSocketConnection>
    private let drains: LoopDrains

    init(connection: NIOLoopBound<WebSocketConnection>) {
        self.connection = connection
        self.drains = LoopDrains.of(connection.eventLoop)
    }

    func scheduleDrain() {
        drains.schedule(self)
    }
}
