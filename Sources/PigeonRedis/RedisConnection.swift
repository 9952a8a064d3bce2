import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// One connection to Redis, shared by many concurrent callers.
///
/// Commands are pipelined: each is written as soon as it is sent, and replies are matched to commands in order.
/// Commands sent from one thread (or one task, awaiting nothing in between) go out in the order they were sent.
/// Writes are coalesced: everything sent before the event loop gets to it goes out in one write and one flush.
///
/// A top-level error reply fails its command with ``RedisError/server(_:)``; errors nested in an array (the
/// results of `EXEC`) are ``RESPValue/error(_:)`` values. When the connection is lost, every command in flight
/// fails with ``RedisError/connectionClosed`` and later ones with ``RedisError/notConnected(_:)``; it does not
/// reconnect (``RedisClient`` does).
public final class RedisConnection: Sendable {
    private struct Submissions {
        var pending: [RedisRequest] = []
        var drainScheduled = false
        var isClosed = false
    }

    /// The event loop of the connection's channel.
    public let eventLoop: any EventLoop
    private let channel: any Channel
    private let handler: NIOLoopBound<RedisChannelHandler>
    private let submissions = NIOLockedValueBox(Submissions())
    private let logger: Logger

    private init(channel: any Channel, handler: NIOLoopBound<RedisChannelHandler>, logger: Logger) {
        self.eventLoop = channel.eventLoop
        self.channel = channel
        self.handler = handler
        self.logger = logger
        channel.closeFuture.whenComplete { [submissions] _ in
            submissions.withLockedValue { $0.isClosed = true }
        }
    }

    /// Opens a connection, authenticates (`AUTH`, when a password is configured) and selects the database (when it
    /// is not 0) before handing it out.
    ///
    /// - Parameter onMessage: for a subscriber connection: receives pub/sub messages (`channel`, `payload`).
    public static func connect(
        configuration: RedisConfiguration, eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(), logger: Logger,
        onMessage: (@Sendable (_ channel: String, _ payload: ByteBuffer) -> Void)? = nil
    ) -> EventLoopFuture<RedisConnection> {
        let connectTimeout = TimeAmount.nanoseconds(Int64(configuration.connectTimeout / .nanoseconds(1)))
        let connectionLogger = logger
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(connectTimeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(RESPDecoder()))
                    try channel.pipeline.syncOperations.addHandler(RedisChannelHandler(onPush: onMessage, logger: connectionLogger))
                }
            }
        let address = configuration.description
        return bootstrap.connect(host: configuration.host, port: configuration.port)
            .flatMapErrorThrowing { error in
                if let error = error as? ChannelError, case .connectTimeout = error { throw RedisError.timeout }
                throw RedisError.notConnected("cannot connect to \(address): \(error)")
            }
            .flatMapThrowing { channel in
                let handler = try channel.pipeline.syncOperations.handler(type: RedisChannelHandler.self)
                return RedisConnection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop), logger: logger)
            }
            .flatMap { connection in
                // A server that accepts and never answers `AUTH` or `SELECT` fails the connect within the timeout too.
                let watchdog = connection.eventLoop.scheduleTask(in: connectTimeout) { connection.closeInBackground() }
                return connection.prepare(configuration).always { _ in watchdog.cancel() }
            }
    }

    /// Async form of ``connect(configuration:eventLoop:logger:onMessage:)``.
    public static func connect(
        configuration: RedisConfiguration, eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(), logger: Logger,
        onMessage: (@Sendable (_ channel: String, _ payload: ByteBuffer) -> Void)? = nil
    ) async throws -> RedisConnection {
        try await connect(configuration: configuration, eventLoop: eventLoop, logger: logger, onMessage: onMessage).get()
    }

    /// Authenticates and selects the database; closes the connection if that fails.
    private func prepare(_ configuration: RedisConfiguration) -> EventLoopFuture<RedisConnection> {
        var steps: [EventLoopFuture<RESPValue>] = []
        if let password = configuration.password {
            steps.append(send(configuration.username.map { RESPCommand("AUTH", $0, password) } ?? RESPCommand("AUTH", password)))
        }
        if configuration.database != 0 {
            steps.append(send(RESPCommand("SELECT", configuration.database)))
        }
        return EventLoopFuture.andAllSucceed(steps, on: eventLoop).flatMapError { @Sendable error in
            self.channel.close(promise: nil)
            return self.eventLoop.makeFailedFuture(error)
        }.map { @Sendable in self }
    }

    /// Whether the connection is open.
    public var isConnected: Bool { channel.isActive }

    /// Completes when the connection has closed, for whatever reason.
    public var closeFuture: EventLoopFuture<Void> { channel.closeFuture }

    /// Sends a command; the future completes with its reply. Callable from any thread.
    public func send(_ command: RESPCommand) -> EventLoopFuture<RESPValue> {
        let promise = eventLoop.makePromise(of: RESPValue.self)
        submit(RedisRequest(command: command, target: .promise(promise)))
        return promise.futureResult
    }

    /// Sends a command and returns its reply.
    public func send(_ command: RESPCommand) async throws -> RESPValue {
        try await withCheckedThrowingContinuation { continuation in
            submit(RedisRequest(command: command, target: .continuation(continuation)))
        }
    }

    /// Sends a command; `completion` runs on the event loop with its reply (no future allocated).
    public func send(_ command: RESPCommand, completion: @escaping @Sendable (Result<RESPValue, RedisError>) -> Void) {
        submit(RedisRequest(command: command, target: .callback(completion)))
    }

    /// Sends several commands as one pipeline and returns their replies in order, once every one is in.
    ///
    /// They are written in this order with no other command between them (in one write and one flush, with whatever
    /// else was submitted meanwhile), so they cost one round trip. Each command succeeds or fails on its own: an
    /// error reply fails that command only; a lost connection fails every one not answered yet.
    public func send(_ commands: [RESPCommand]) async -> [Result<RESPValue, RedisError>] {
        guard !commands.isEmpty else { return [] }
        return await withCheckedContinuation { continuation in
            let replies = PipelineReplies(count: commands.count, continuation: continuation)
            submit(commands.enumerated().map { index, command in
                RedisRequest(command: command, target: .callback { replies.complete(index, $0) })
            })
        }
    }

    private func submit(_ request: RedisRequest) {
        submit(CollectionOfOne(request))
    }

    private enum SubmitAction { case none, schedule, reject }

    /// Queues requests for the next write, together and in order.
    private func submit(_ requests: some Collection<RedisRequest>) {
        let action = submissions.withLockedValue { state -> SubmitAction in
            guard !state.isClosed else { return .reject }
            state.pending.append(contentsOf: requests)
            guard !state.drainScheduled else { return .none }
            state.drainScheduled = true
            return .schedule
        }
        switch action {
        case .none: break
        case .schedule: eventLoop.execute { self.drain() }
        case .reject:
            for request in requests { request.target.complete(.failure(.notConnected("the connection is closed"))) }
        }
    }

    /// Writes everything submitted so far, with one flush.
    private func drain() {
        let batch = submissions.withLockedValue { state in
            state.drainScheduled = false
            defer { state.pending.removeAll(keepingCapacity: true) }
            return state.pending
        }
        handler.value.write(batch)
    }

    /// Closes the connection: commands in flight fail with ``RedisError/connectionClosed``.
    public func close() async {
        channel.close(promise: nil)
        try? await channel.closeFuture.get()
    }

    /// Starts closing the connection and returns at once.
    public func closeInBackground() {
        channel.close(promise: nil)
    }
}

/// Gathers the replies of one pipeline and hands them over once all are in.
private final class PipelineReplies: Sendable {
    private struct State {
        var results: [Result<RESPValue, RedisError>?]
        var missing: Int
        var continuation: CheckedContinuation<[Result<RESPValue, RedisError>], Never>?
    }

    private let state: NIOLockedValueBox<State>

    init(count: Int, continuation: CheckedContinuation<[Result<RESPValue, RedisError>], Never>) {
        state = NIOLockedValueBox(State(results: Array(repeating: nil, count: count), missing: count, continuation: continuation))
    }

    func complete(_ index: Int, _ result: Result<RESPValue, RedisError>) {
        let done = state.withLockedValue { state -> (CheckedContinuation<[Result<RESPValue, RedisError>], Never>, [Result<RESPValue, RedisError>])? in
            guard state.results[index] == nil else { return nil }
            state.results[index] = result
            state.missing -= 1
            guard state.missing == 0, let continuation = state.continuation else { return nil }
            state.continuation = nil
            return (continuation, state.results.map { $0! })
        }
        if let (continuation, results) = done { continuation.resume(returning: results) }
    }
}
