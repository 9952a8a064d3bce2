import NIOCore

/// Coalesces the flushes of one connection that come within one turn of its event loop into a single flush: a
/// WebSocket whose writer hands over a batch of frames (acks, events) goes out in one `writev`, not one system call
/// per frame. The flush is put off to the end of the event loop's current queue of tasks, so it waits for no timer:
/// what is already queued for the connection (the other frames of the batch) is written first, then flushed once.
///
/// A close passes a pending flush first, so no written frame is dropped by it (NIO fails unflushed writes on close).
/// First in the pipeline (nearest the socket), so it sees every flush.
final class FlushCoalescingHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = NIOAny
    typealias OutboundOut = NIOAny

    private var flushPending = false

    func flush(context: ChannelHandlerContext) {
        guard !flushPending else { return }
        flushPending = true
        context.eventLoop.assumeIsolated().execute { [self] in
            flushNow(context: context)
        }
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        flushNow(context: context)
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        flushNow(context: context)
    }

    private func flushNow(context: ChannelHandlerContext) {
        guard flushPending else { return }
        flushPending = false
        context.flush()
    }
}
