import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// One keep-alive HTTP/1.1 connection. A task of its own holds the channel (`executeThenClose`) for as long as the
/// connection lives, and lends it to one request at a time (``lease()``): the request writes its parts and reads the
/// answer's through an ``HTTP1Exchange``, then gives the connection back, reusable or not (not: the task ends and the
/// connection closes).
final class HTTP1Connection: Sendable {
    let channel: any Channel
    /// Requests waiting for the connection's task to lend it (at most one: the pool lends a connection once).
    private let handovers: AsyncStream<CheckedContinuation<HTTP1Exchange, any Error>>.Continuation

    private init(channel: any Channel, handovers: AsyncStream<CheckedContinuation<HTTP1Exchange, any Error>>.Continuation) {
        self.channel = channel
        self.handovers = handovers
    }

    struct Closed: Error, CustomStringConvertible {
        var description: String { "the connection is closed" }
    }

    /// Connects to `server` (TLS for `https`) and starts the connection's task.
    static func connect(to server: ServerAddress, trust: TLSTrust, timeout: Duration) async throws -> HTTP1Connection {
        let asyncChannel = try await ClientConnector.connect(to: server, trust: trust, timeout: timeout) { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHTTPClientHandlers()
                return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                    wrappingChannelSynchronously: channel,
                    configuration: .init(backPressureStrategy: .init(lowWatermark: 16, highWatermark: 64)))
            }
        }
        let (stream, continuation) = AsyncStream.makeStream(of: CheckedContinuation<HTTP1Exchange, any Error>.self)
        let connection = HTTP1Connection(channel: asyncChannel.channel, handovers: continuation)
        asyncChannel.channel.closeFuture.whenComplete { _ in continuation.finish() }
        Task { await serve(asyncChannel, handovers: stream) }
        return connection
    }

    /// The connection's task: lends the channel to each request in turn until one gives it back unusable or the
    /// channel closes; then fails whoever still waits.
    private static func serve(
        _ asyncChannel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>,
        handovers: AsyncStream<CheckedContinuation<HTTP1Exchange, any Error>>
    ) async {
        var iterator = handovers.makeAsyncIterator()
        try? await asyncChannel.executeThenClose { inbound, outbound in
            var responses = inbound.makeAsyncIterator()
            while let waiter = await iterator.next() {
                let returned = await withCheckedContinuation { done in
                    waiter.resume(returning: HTTP1Exchange(inbound: responses, outbound: outbound, done: done))
                }
                guard let returned else { return }
                responses = returned.responses
            }
        }
        while let waiter = await iterator.next() { waiter.resume(throwing: Closed()) }
    }

    /// The connection for one request: its parts in and out, until ``HTTP1Exchange/finish(reusable:)``.
    func lease() async throws -> HTTP1Exchange {
        try await withCheckedThrowingContinuation { waiter in
            if case .terminated = handovers.yield(waiter) { waiter.resume(throwing: Closed()) }
        }
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// One request's use of an ``HTTP1Connection``: the writer of its parts and the reader of the answer's.
///
/// Unchecked `Sendable`: the reader (a non-`Sendable` iterator) is used by one task at a time. The connection's task
/// hands it over through a continuation and takes it back through another (``finish(reusable:)``), so each use
/// happens after the previous one ended.
final class HTTP1Exchange: @unchecked Sendable {
    typealias Responses = NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator

    private var inbound: Responses
    let outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>
    private let done = NIOLockedValueBox<CheckedContinuation<Returned?, Never>?>(nil)

    /// The reader, handed back to the connection's task (unchecked: see the type's comment).
    struct Returned: @unchecked Sendable {
        var responses: Responses
    }
    /// The answer's `end` was read: the connection is between requests again.
    private(set) var responseEnded = false
    /// The whole request was written (a streamed body may still be going out when the answer comes).
    var requestEnded: Bool { requestEndedBox.withLockedValue { $0 } }
    private let requestEndedBox = NIOLockedValueBox(false)
    /// Some part of the answer arrived (for the retry of a request that met a connection the server had closed).
    private(set) var receivedAnything = false

    fileprivate init(inbound: Responses, outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>, done: CheckedContinuation<Returned?, Never>) {
        self.inbound = inbound
        self.outbound = outbound
        self.done.withLockedValue { $0 = done }
    }

    /// The next part of the answer; `nil` when the connection ended.
    func next() async throws -> HTTPClientResponsePart? {
        guard let part = try await inbound.next() else { return nil }
        receivedAnything = true
        if case .end = part { responseEnded = true }
        return part
    }

    func markRequestEnded() {
        requestEndedBox.withLockedValue { $0 = true }
    }

    /// Gives the connection back: to the next request when `reusable`, else to be closed. Only the first call counts.
    func finish(reusable: Bool) {
        let returned = reusable && responseEnded ? Returned(responses: inbound) : nil
        done.withLockedValue { done in
            done?.resume(returning: returned)
            done = nil
        }
    }
}
