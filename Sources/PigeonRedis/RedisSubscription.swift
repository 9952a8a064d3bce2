import Logging
import NIOCore

/// A pub/sub subscription on a connection of its own: an async sequence of the messages of its channels.
///
/// When the connection is lost it reconnects (with backoff) and subscribes again, then yields
/// ``Event/resubscribed``: messages published meanwhile were missed (pub/sub delivers at most once), so the consumer
/// should catch up from a durable source. The sequence ends when ``close()`` is called, when the client shuts down,
/// or when the task iterating it is cancelled. Iterate it from one task only. Messages wait in memory until they are
/// consumed.
public final class RedisSubscription: AsyncSequence, Sendable {
    /// What a subscription yields.
    public enum Event: Sendable, Equatable {
        /// A message published on one of the channels.
        case message(channel: String, payload: ByteBuffer)
        /// The connection was lost and the channels are subscribed again: messages may have been missed.
        case resubscribed
    }

    public typealias Element = Event

    /// The subscribed channels.
    public let channels: [String]
    private let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let connection: ReconnectingConnection
    private let onClose: @Sendable () -> Void

    init(
        channels: [String], configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, backoff: Backoff, logger: Logger,
        onClose: @escaping @Sendable () -> Void
    ) {
        let (events, continuation) = AsyncStream.makeStream(of: Event.self)
        self.channels = channels
        self.events = events
        self.continuation = continuation
        self.onClose = onClose
        self.connection = ReconnectingConnection(
            configuration: configuration, eventLoopGroup: eventLoopGroup, backoff: backoff, logger: logger,
            onMessage: { channel, payload in continuation.yield(.message(channel: channel, payload: payload)) },
            setUp: { connection, isReconnect in
                // One SUBSCRIBE per channel: each has exactly one confirmation reply.
                let confirmations = channels.map { connection.send(RESPCommand("SUBSCRIBE", $0)) }
                return EventLoopFuture.andAllSucceed(confirmations, on: connection.eventLoop).map {
                    if isReconnect {
                        logger.info("resubscribed to Redis channels", metadata: ["channels": "\(channels)"])
                        continuation.yield(.resubscribed)
                    }
                }
            })
        continuation.onTermination = { [connection] _ in
            connection.shutdownInBackground()
            onClose()
        }
    }

    func start() async throws {
        try await connection.start().get()
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: events.makeAsyncIterator())
    }

    /// Unsubscribes and closes the connection; the sequence ends.
    public func close() async {
        await connection.shutdown()
        continuation.finish()
        onClose()
    }

    /// Iterates the events; `nil` once the subscription is closed.
    public struct Iterator: AsyncIteratorProtocol {
        var base: AsyncStream<Event>.Iterator

        public mutating func next() async -> Event? {
            await base.next()
        }
    }
}
