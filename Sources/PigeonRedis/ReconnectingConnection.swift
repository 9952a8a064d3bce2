import Logging
import NIOConcurrencyHelpers
import NIOCore

/// One connection kept open: whenever it is lost or cannot be opened it is tried again, with backoff, until shut
/// down. Driven by the event loop (scheduled tasks and future callbacks), so it needs no task of its own.
final class ReconnectingConnection: Sendable {
    private enum Phase {
        case idle
        case connecting(EventLoopFuture<RedisConnection>)
        case connected(RedisConnection)
        case waiting(Scheduled<Void>)
        case shutDown
    }

    private struct State {
        var phase: Phase = .idle
        var failures = 0
        var hasConnected = false
        var firstAttempt: EventLoopPromise<Void>?
    }

    private let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let backoff: Backoff
    private let logger: Logger
    private let onMessage: (@Sendable (String, ByteBuffer) -> Void)?
    /// Runs on every new connection before it is handed out (`isReconnect` is false the first time).
    private let setUp: @Sendable (_ connection: RedisConnection, _ isReconnect: Bool) -> EventLoopFuture<Void>
    private let state = NIOLockedValueBox(State())

    init(
        configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, backoff: Backoff, logger: Logger,
        onMessage: (@Sendable (String, ByteBuffer) -> Void)? = nil,
        setUp: @escaping @Sendable (_ connection: RedisConnection, _ isReconnect: Bool) -> EventLoopFuture<Void> = { connection, _ in
            connection.eventLoop.makeSucceededVoidFuture()
        }
    ) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.backoff = backoff
        self.logger = logger
        self.onMessage = onMessage
        self.setUp = setUp
    }

    /// The open connection, or `nil` while (re)connecting.
    var connection: RedisConnection? {
        state.withLockedValue { state in
            if case .connected(let connection) = state.phase, connection.isConnected { return connection }
            return nil
        }
    }

    /// Starts connecting; the future completes with the outcome of the first attempt (later attempts follow in the
    /// background either way).
    @discardableResult
    func start() -> EventLoopFuture<Void> {
        let promise = eventLoopGroup.any().makePromise(of: Void.self)
        let start = state.withLockedValue { state -> Bool in
            guard case .idle = state.phase else { return false }
            state.firstAttempt = promise
            return true
        }
        if start {
            attempt()
        } else {
            promise.fail(RedisError.notConnected("already started"))
        }
        return promise.futureResult
    }

    private func attempt() {
        let eventLoop = eventLoopGroup.next()
        let isReconnect = state.withLockedValue { $0.hasConnected }
        // An attempt that is not through within its limit (a server that accepts and never answers the set-up
        // commands) is abandoned: its connection is closed, which fails it, and the next attempt follows.
        let opened = NIOLockedValueBox<RedisConnection?>(nil)
        let connecting = RedisConnection.connect(configuration: configuration, eventLoop: eventLoop, logger: logger, onMessage: onMessage)
            .flatMap { [setUp] connection in
                opened.withLockedValue { $0 = connection }
                return setUp(connection, isReconnect).map { connection }.flatMapError { error in
                    connection.closeInBackground()
                    return eventLoop.makeFailedFuture(error)
                }
            }
        let limit = TimeAmount.nanoseconds(Int64((configuration.connectTimeout * 2) / .nanoseconds(1)))
        let watchdog = eventLoop.scheduleTask(in: limit) { [logger, configuration] in
            guard let connection = opened.withLockedValue({ $0 }) else { return }
            logger.warning("Redis did not answer a new connection's set-up in time; closing it", metadata: ["redis": "\(configuration)"])
            connection.closeInBackground()
        }
        connecting.whenComplete { _ in watchdog.cancel() }
        let proceed = state.withLockedValue { state -> Bool in
            guard case .shutDown = state.phase else {
                state.phase = .connecting(connecting)
                return true
            }
            return false
        }
        guard proceed else {
            connecting.whenSuccess { $0.closeInBackground() }
            return
        }
        connecting.whenComplete { result in
            switch result {
            case .success(let connection): self.connected(connection)
            case .failure(let error): self.failed(error)
            }
        }
    }

    private func connected(_ connection: RedisConnection) {
        let (accepted, failures, firstAttempt) = state.withLockedValue { state -> (Bool, Int, EventLoopPromise<Void>?) in
            guard case .connecting = state.phase else { return (false, 0, nil) }
            state.phase = .connected(connection)
            defer {
                state.failures = 0
                state.hasConnected = true
                state.firstAttempt = nil
            }
            return (true, state.failures, state.firstAttempt)
        }
        guard accepted else {
            connection.closeInBackground()
            return
        }
        if failures > 0 { logger.info("reconnected to Redis", metadata: ["redis": "\(configuration)", "failedAttempts": "\(failures)"]) }
        firstAttempt?.succeed()
        connection.closeFuture.whenComplete { _ in self.lost(connection) }
    }

    private func lost(_ connection: RedisConnection) {
        let reconnect = state.withLockedValue { state -> Bool in
            guard case .connected(let current) = state.phase, current === connection else { return false }
            state.phase = .idle
            return true
        }
        guard reconnect else { return }
        logger.warning("lost the Redis connection; reconnecting", metadata: ["redis": "\(configuration)"])
        schedule(after: backoff.delay(afterFailures: 0))
    }

    private func failed(_ error: any Error) {
        let (proceed, failures, firstAttempt) = state.withLockedValue { state -> (Bool, Int, EventLoopPromise<Void>?) in
            guard case .connecting = state.phase else { return (false, 0, nil) }
            state.phase = .idle
            state.failures += 1
            defer { state.firstAttempt = nil }
            return (true, state.failures, state.firstAttempt)
        }
        firstAttempt?.fail(error)
        guard proceed else { return }
        let delay = backoff.delay(afterFailures: failures)
        let metadata: Logger.Metadata = ["redis": "\(configuration)", "error": "\(error)", "retryIn": "\(delay)"]
        if failures == 1 || failures % 50 == 0 {
            logger.warning("cannot connect to Redis; retrying", metadata: metadata)
        } else {
            logger.debug("cannot connect to Redis; retrying", metadata: metadata)
        }
        schedule(after: delay)
    }

    private func schedule(after delay: Duration) {
        let eventLoop = eventLoopGroup.next()
        state.withLockedValue { state in
            guard case .idle = state.phase else { return }
            let scheduled = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay / .nanoseconds(1)))) { self.attempt() }
            state.phase = .waiting(scheduled)
        }
    }

    /// Closes the connection and stops reconnecting.
    func shutdown() async {
        switch beginShutdown() {
        case .connecting(let future):
            if let connection = try? await future.get() { await connection.close() }
        case .connected(let connection):
            await connection.close()
        case .idle, .waiting, .shutDown:
            break
        }
    }

    /// Starts ``shutdown()`` and returns at once.
    func shutdownInBackground() {
        switch beginShutdown() {
        case .connecting(let future): future.whenSuccess { $0.closeInBackground() }
        case .connected(let connection): connection.closeInBackground()
        case .idle, .waiting, .shutDown: break
        }
    }

    private func beginShutdown() -> Phase {
        let (phase, firstAttempt) = state.withLockedValue { state in
            defer {
                state.phase = .shutDown
                state.firstAttempt = nil
            }
            return (state.phase, state.firstAttempt)
        }
        firstAttempt?.fail(RedisError.notConnected("shut down"))
        if case .waiting(let scheduled) = phase { scheduled.cancel() }
        return phase
    }
}
