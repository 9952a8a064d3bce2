import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A Redis client: a small fixed set of pipelined connections that reconnect by themselves.
///
/// - Commands with the same routing key always go over the same connection, so they run in the order they were
///   sent; commands without one are spread round-robin over the connections that are up.
/// - A lost connection is re-opened in the background with exponential backoff (50 ms doubling to 2 s, with
///   jitter). Meanwhile commands routed to it fail at once with ``RedisError/notConnected(_:)``; they are not
///   queued, so the caller decides whether to retry. Commands in flight when it was lost fail with
///   ``RedisError/connectionClosed``: they may or may not have run.
/// - Blocking commands (`XREADGROUP ... BLOCK`, `BLPOP`) belong on a ``dedicatedConnection()``, not here, where they
///   would hold up every command pipelined behind them.
public final class RedisClient: Sendable {
    private struct State {
        var nextConnection = 0
        var isShutDown = false
        var subscriptions: [Int: RedisSubscription] = [:]
        var nextSubscriptionId = 0
    }

    /// Where the client connects.
    public let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let connections: [ReconnectingConnection]
    private let backoff = Backoff()
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    /// Scripts loaded on every new connection before it is used (see ``loadScripts(_:)``).
    private let preloadedScripts: NIOLockedValueBox<[RedisScript]>

    /// Creates the client and starts connecting in the background (see ``waitUntilConnected(timeout:)``).
    ///
    /// - Parameter connectionCount: how many multiplexed connections to keep open (at least 1).
    public init(
        configuration: RedisConfiguration, connectionCount: Int = 4,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger
    ) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        let preloadedScripts = NIOLockedValueBox<[RedisScript]>([])
        self.preloadedScripts = preloadedScripts
        self.connections = (0..<max(1, connectionCount)).map { _ in
            ReconnectingConnection(
                configuration: configuration, eventLoopGroup: eventLoopGroup, backoff: Backoff(), logger: logger,
                setUp: { connection, _ in
                    let loads = preloadedScripts.withLockedValue { $0 }.map { connection.send(RESPCommand("SCRIPT", "LOAD", $0.source)) }
                    return EventLoopFuture.andAllSucceed(loads, on: connection.eventLoop)
                })
        }
        for connection in connections { connection.start() }
    }

    /// Whether every connection is up right now.
    public var isConnected: Bool { connections.allSatisfy { $0.connection != nil } }

    /// Waits until every connection is up; throws ``RedisError/timeout`` if that takes longer than `timeout`.
    public func waitUntilConnected(timeout: Duration = .seconds(10)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var pause = Duration.milliseconds(2)
        while !isConnected {
            if state.withLockedValue({ $0.isShutDown }) { throw RedisError.notConnected("the client was shut down") }
            guard clock.now < deadline else { throw RedisError.timeout }
            try await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(50))
        }
    }

    // MARK: Commands

    /// Sends a command over the connection for `routingKey` (round-robin without one).
    ///
    /// Commands with equal routing keys share a connection, so they run in the order they were sent.
    public func send(_ command: RESPCommand, routingKey: AnyHashable? = nil) -> EventLoopFuture<RESPValue> {
        send(command, routingHash: routingKey?.hashValue)
    }

    private func send(_ command: RESPCommand, routingHash: Int?) -> EventLoopFuture<RESPValue> {
        switch connection(routingHash: routingHash) {
        case .success(let connection): connection.send(command)
        case .failure(let error): eventLoopGroup.any().makeFailedFuture(error)
        }
    }

    /// Sends a command over the connection for `routingKey` (round-robin without one) and returns its reply.
    public func send(_ command: RESPCommand, routingKey: AnyHashable? = nil) async throws -> RESPValue {
        try await connection(routingHash: routingKey?.hashValue).get().send(command)
    }

    /// Sends a command; `completion` runs on an event loop with its reply (no future allocated).
    public func send(
        _ command: RESPCommand, routingKey: AnyHashable?, completion: @escaping @Sendable (Result<RESPValue, RedisError>) -> Void
    ) {
        send(command, routingHash: routingKey?.hashValue, completion: completion)
    }

    private func send(_ command: RESPCommand, routingHash: Int?, completion: @escaping @Sendable (Result<RESPValue, RedisError>) -> Void) {
        switch connection(routingHash: routingHash) {
        case .success(let connection): connection.send(command, completion: completion)
        case .failure(let error): completion(.failure(error))
        }
    }

    /// Sends several commands as one pipeline over the connection for `routingKey` (round-robin without one): one
    /// round trip for all. Returns each command's reply or error, in order (as ``RedisConnection`` does for a list of commands).
    public func send(_ commands: [RESPCommand], routingKey: AnyHashable? = nil) async -> [Result<RESPValue, RedisError>] {
        switch connection(routingHash: routingKey?.hashValue) {
        case .success(let connection): await connection.send(commands)
        case .failure(let error): commands.map { _ in .failure(error) }
        }
    }

    private func connection(routingHash: Int?) -> Result<RedisConnection, RedisError> {
        let count = connections.count
        let (start, isShutDown) = state.withLockedValue { state -> (Int, Bool) in
            if routingHash != nil { return (0, state.isShutDown) }
            defer { state.nextConnection = (state.nextConnection + 1) % count }
            return (state.nextConnection, state.isShutDown)
        }
        if isShutDown { return .failure(.notConnected("the client was shut down")) }
        if let routingHash {
            let index = Int(UInt(bitPattern: routingHash) % UInt(count))
            guard let connection = connections[index].connection else {
                return .failure(.notConnected("connection \(index) to \(configuration) is down; reconnecting"))
            }
            return .success(connection)
        }
        for offset in 0..<count {
            if let connection = connections[(start + offset) % count].connection { return .success(connection) }
        }
        return .failure(.notConnected("no connection to \(configuration) is up; reconnecting"))
    }

    // MARK: Scripts

    /// Runs a Lua script by its SHA-1 (`EVALSHA`), sending its source (`EVAL`) only if Redis does not have it cached
    /// (first use, `SCRIPT FLUSH`, a restarted Redis).
    public func evalScript(
        _ script: RedisScript, keys: [String] = [], arguments: [any RESPArgument] = [], routingKey: AnyHashable? = nil
    ) -> EventLoopFuture<RESPValue> {
        let routingHash = routingKey?.hashValue
        return send(script.evalSHACommand(keys: keys, arguments: arguments), routingHash: routingHash).flatMapError { error in
            guard let error = error as? RedisError, error.code == "NOSCRIPT" else {
                return self.eventLoopGroup.any().makeFailedFuture(error)
            }
            return self.send(script.evalCommand(keys: keys, arguments: arguments), routingHash: routingHash)
        }
    }

    /// Runs a Lua script (see ``evalScript(_:keys:arguments:routingKey:)``) and returns its reply.
    public func evalScript(
        _ script: RedisScript, keys: [String] = [], arguments: [any RESPArgument] = [], routingKey: AnyHashable? = nil
    ) async throws -> RESPValue {
        let routingHash = routingKey?.hashValue
        do {
            return try await connection(routingHash: routingHash).get().send(script.evalSHACommand(keys: keys, arguments: arguments))
        } catch let error as RedisError where error.code == "NOSCRIPT" {
            return try await connection(routingHash: routingHash).get().send(script.evalCommand(keys: keys, arguments: arguments))
        }
    }

    /// Runs a Lua script over the connection for `routingKey`; `completion` runs on an event loop with its reply.
    public func evalScript(
        _ script: RedisScript, keys: [String], arguments: [any RESPArgument], routingKey: AnyHashable?,
        completion: @escaping @Sendable (Result<RESPValue, RedisError>) -> Void
    ) {
        // The source goes along only if the first attempt says NOSCRIPT.
        let evalCommand = { @Sendable in script.evalCommand(keys: keys, arguments: arguments) }
        let routingHash = routingKey?.hashValue
        send(script.evalSHACommand(keys: keys, arguments: arguments), routingHash: routingHash) { result in
            if case .failure(let error) = result, error.code == "NOSCRIPT" {
                self.send(evalCommand(), routingHash: routingHash, completion: completion)
            } else {
                completion(result)
            }
        }
    }

    /// Runs several scripts as one pipeline over one connection (like sending a list of commands) and
    /// returns each reply or error, in order. Those Redis does not have cached run again with their source, in a
    /// second pipeline: only then can one run after a later one of the list.
    public func evalScripts(_ calls: [RedisScript.Call], routingKey: AnyHashable? = nil) async -> [Result<RESPValue, RedisError>] {
        var results = await send(calls.map { $0.script.evalSHACommand(keys: $0.keys, arguments: $0.arguments) }, routingKey: routingKey)
        let uncached = results.indices.filter { index in
            if case .failure(let error) = results[index], error.code == "NOSCRIPT" { true } else { false }
        }
        guard !uncached.isEmpty else { return results }
        let retried = await send(
            uncached.map { calls[$0].script.evalCommand(keys: calls[$0].keys, arguments: calls[$0].arguments) }, routingKey: routingKey)
        for (index, result) in zip(uncached, retried) { results[index] = result }
        return results
    }

    /// Loads scripts into Redis now, and again on every new connection before it carries commands.
    ///
    /// Then `EVALSHA` finds them also after Redis restarted, and ``evalScript(_:keys:arguments:routingKey:)`` does not
    /// need its `EVAL` fallback, which would run a command after others sent behind it on the same connection
    /// (those that found the script loaded by the fallback). Only a `SCRIPT FLUSH` on a live connection still
    /// needs the fallback.
    public func loadScripts(_ scripts: [RedisScript]) async throws {
        preloadedScripts.withLockedValue { loaded in
            for script in scripts where !loaded.contains(script) { loaded.append(script) }
        }
        for script in scripts {
            let sha1 = try await send(RESPCommand("SCRIPT", "LOAD", script.source))
            guard sha1.string == script.sha1 else { throw RedisError.protocolError("SCRIPT LOAD answered \(sha1), expected \(script.sha1)") }
        }
    }

    // MARK: Pub/sub

    /// Publishes a message; returns how many subscribers received it (on every node of the Redis server).
    @discardableResult
    public func publish(_ channel: String, _ payload: some RESPArgument) async throws -> Int {
        let reply = try await send(RESPCommand("PUBLISH", channel, payload))
        guard let receivers = reply.int else { throw RedisError.protocolError("PUBLISH answered \(reply)") }
        return Int(receivers)
    }

    /// Subscribes to channels on a connection of its own; returns once the subscription is active.
    ///
    /// Throws if Redis cannot be reached now; afterwards the subscription reconnects by itself (see
    /// ``RedisSubscription``).
    public func subscribe(to channels: [String]) async throws -> RedisSubscription {
        let id = try state.withLockedValue { state -> Int in
            guard !state.isShutDown else { throw RedisError.notConnected("the client was shut down") }
            defer { state.nextSubscriptionId += 1 }
            return state.nextSubscriptionId
        }
        let subscription = RedisSubscription(
            channels: channels, configuration: configuration, eventLoopGroup: eventLoopGroup, backoff: backoff, logger: logger,
            onClose: { [state] in _ = state.withLockedValue { $0.subscriptions.removeValue(forKey: id) } })
        state.withLockedValue { $0.subscriptions[id] = subscription }
        do {
            try await subscription.start()
        } catch {
            await subscription.close()
            throw error
        }
        return subscription
    }

    // MARK: Lifecycle

    /// Opens a connection of its own, for blocking commands; the caller owns it and closes it.
    public func dedicatedConnection() async throws -> RedisConnection {
        guard !state.withLockedValue({ $0.isShutDown }) else { throw RedisError.notConnected("the client was shut down") }
        return try await RedisConnection.connect(configuration: configuration, eventLoop: eventLoopGroup.next(), logger: logger)
    }

    /// Closes every connection and subscription and stops reconnecting; commands in flight fail.
    public func shutdown() async {
        let subscriptions = state.withLockedValue { state in
            state.isShutDown = true
            defer { state.subscriptions = [:] }
            return Array(state.subscriptions.values)
        }
        for subscription in subscriptions { await subscription.close() }
        for connection in connections { await connection.shutdown() }
    }
}
