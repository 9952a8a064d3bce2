import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonTestSupport
import Testing

@testable import PigeonRedis

/// Against a real `redis-server` of each test's own (see RedisServerProcess).
@Suite struct RedisClientTests {
    private let logger = Logger(label: "PigeonRedisTests")

    private func makeClient(_ server: RedisServerProcess, connections: Int = 4) async throws -> RedisClient {
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url), connectionCount: connections, logger: logger)
        try await client.waitUntilConnected(timeout: .seconds(30))
        return client
    }

    @Test func pipelinesTenThousandCommandsOnOneConnectionInOrder() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let connection = try await RedisConnection.connect(configuration: try RedisConfiguration(url: server.url), logger: logger)
        // Sent without waiting, from one task: they go out, and are answered, in this order.
        var futures: [EventLoopFuture<RESPValue>] = []
        for index in 0..<10_000 {
            if index % 2 == 0 {
                futures.append(connection.send(RESPCommand("INCR", "counter")))
            } else {
                futures.append(connection.send(RESPCommand("SET", "key:\(index)", index)))
            }
        }
        let replies = try await withDeadline(.seconds(60)) { [futures] in
            var replies: [RESPValue] = []
            for future in futures { replies.append(try await future.get()) }
            return replies
        }
        for (index, reply) in replies.enumerated() {
            #expect(reply == (index % 2 == 0 ? .integer(Int64(index / 2 + 1)) : .simpleString("OK")))
        }
        #expect(try await connection.send(RESPCommand("GET", "key:9999")).int == 9999)
        await connection.close()
        await server.stop()
    }

    @Test func concurrentTasksShareOneConnection() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let connection = try await RedisConnection.connect(configuration: try RedisConfiguration(url: server.url), logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<50 {
                group.addTask {
                    for index in 0..<100 {
                        let reply = try await connection.send(RESPCommand("RPUSH", "list:\(task)", index))
                        #expect(reply == .integer(Int64(index + 1)))
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await connection.send(RESPCommand("LLEN", "list:49")) == .integer(100))
        await connection.close()
        await server.stop()
    }

    @Test func errorRepliesFailTheCommandWithTheirCode() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        _ = try await client.send(RESPCommand("SET", "text", "value"))
        await #expect {
            _ = try await client.send(RESPCommand("LPUSH", "text", "x"))
        } throws: { error in
            (error as? RedisError)?.code == "WRONGTYPE"
        }
        await #expect(throws: RedisError.self) { _ = try await client.send(RESPCommand("NOSUCHCOMMAND")) }
        // The connection goes on answering in order after an error.
        #expect(try await client.send(RESPCommand("GET", "text")).string == "value")
        await client.shutdown()
        await server.stop()
    }

    @Test func multiExecKeepsNestedErrorsAsValues() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        let key = "tx"
        let replies = try await [
            client.send(RESPCommand("MULTI"), routingKey: key),
            client.send(RESPCommand("SET", "a", "1"), routingKey: key),
            client.send(RESPCommand("LPUSH", "a", "x"), routingKey: key),
            client.send(RESPCommand("INCR", "n"), routingKey: key),
            client.send(RESPCommand("EXEC"), routingKey: key),
        ].asyncMap { try await $0.get() }
        #expect(replies[0] == .simpleString("OK"))
        #expect(replies[1...3].allSatisfy { $0 == .simpleString("QUEUED") })
        let results = try #require(replies[4].array)
        #expect(results.count == 3)
        #expect(results[0] == .simpleString("OK"))
        guard case .error(let message) = results[1] else {
            Issue.record("expected an error value, got \(results[1])")
            return
        }
        #expect(message.hasPrefix("WRONGTYPE"))
        #expect(results[2] == .integer(1))
        await client.shutdown()
        await server.stop()
    }

    @Test func evalShaFallsBackToEvalWhenTheScriptIsNotCached() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        let script = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        #expect(try await client.evalScript(script, keys: ["n"], arguments: [5]) == .integer(5))
        // EVAL cached it under the SHA-1 computed locally.
        #expect(try await client.send(RESPCommand("SCRIPT", "EXISTS", script.sha1)) == .array([.integer(1)]))
        #expect(try await client.send(RESPCommand("SCRIPT", "LOAD", script.source)).string == script.sha1)
        #expect(try await client.evalScript(script, keys: ["n"], arguments: [1]) == .integer(6))
        _ = try await client.send(RESPCommand("SCRIPT", "FLUSH"))
        #expect(try await client.evalScript(script, keys: ["n"], arguments: [Int64(-2)]) == .integer(4))
        _ = try await client.send(RESPCommand("SCRIPT", "FLUSH"))
        let viaFuture: EventLoopFuture<RESPValue> = client.evalScript(script, keys: ["n"], arguments: [10], routingKey: "device")
        #expect(try await viaFuture.get() == .integer(14))
        _ = try await client.send(RESPCommand("SCRIPT", "FLUSH"))
        let viaCallback = try await withCheckedThrowingContinuation { continuation in
            client.evalScript(script, keys: ["n"], arguments: [1], routingKey: nil) { continuation.resume(with: $0.mapError { $0 }) }
        }
        #expect(viaCallback == .integer(15))
        await client.shutdown()
        await server.stop()
    }

    @Test func loadedScriptsAreLoadedAgainOnEveryNewConnection() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        let script = RedisScript("return 'loaded'")
        try await client.loadScripts([script])
        #expect(try await client.send(RESPCommand("SCRIPT", "EXISTS", script.sha1)) == .array([.integer(1)]))
        try await server.restart()
        // Loaded before the new connections carried anything: EVALSHA works without the EVAL fallback. (Until the
        // client notices the old connections are gone, commands fail.)
        try await waitUntil("the condition holds", timeout: .seconds(30)) {
            (try? await client.send(RESPCommand("SCRIPT", "EXISTS", script.sha1))) == .array([.integer(1)])
        }
        #expect(try await client.send(RESPCommand("EVALSHA", script.sha1, 0)).string == "loaded")
        await client.shutdown()
        await server.stop()
    }

    @Test func authenticatesAndSelectsTheDatabaseFromTheURL() async throws {
        let server = try await RedisServerProcess(appendOnly: false, extraArguments: ["--requirepass", "s3cr:t@"])
        let client = RedisClient(
            configuration: try RedisConfiguration(url: "redis://default:s3cr%3At%40@127.0.0.1:\(server.port)/5"), logger: logger)
        try await client.waitUntilConnected(timeout: .seconds(30))
        _ = try await client.send(RESPCommand("SET", "where", "five"))
        let database0 = try await RedisConnection.connect(
            configuration: RedisConfiguration(host: "127.0.0.1", port: server.port, password: "s3cr:t@"), logger: logger)
        #expect(try await database0.send(RESPCommand("GET", "where")).isNull)
        _ = try await database0.send(RESPCommand("SELECT", 5))
        #expect(try await database0.send(RESPCommand("GET", "where")).string == "five")
        await database0.close()

        await #expect {
            _ = try await RedisConnection.connect(
                configuration: RedisConfiguration(host: "127.0.0.1", port: server.port, password: "wrong"), logger: logger)
        } throws: { error in
            (error as? RedisError)?.code == "WRONGPASS"
        }
        await #expect {
            let connection = try await RedisConnection.connect(
                configuration: RedisConfiguration(host: "127.0.0.1", port: server.port), logger: logger)
            defer { connection.closeInBackground() }
            _ = try await connection.send(RESPCommand("GET", "where"))
        } throws: { error in
            (error as? RedisError)?.code == "NOAUTH"
        }
        await client.shutdown()
        await server.stop()
    }

    @Test func aPipelineGoesOutWholeAndInOrderAndEachCommandAnswersForItself() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server, connections: 1)
        _ = try await client.send(RESPCommand("SET", "text", "value"))
        #expect(await client.send([RESPCommand]()).isEmpty)
        let pipeline = (0..<200).map { _ in RESPCommand("INCR", "n") } + [RESPCommand("LPUSH", "text", "x"), RESPCommand("GET", "text")]
        // Other tasks send on the same connection meanwhile: none of theirs gets between the pipeline's commands.
        let results = try await withThrowingTaskGroup(of: [Result<RESPValue, RedisError>]?.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<300 { _ = try await client.send(RESPCommand("INCR", "n")) }
                    return nil
                }
            }
            group.addTask {
                try await Task.sleep(for: .milliseconds(2))
                return await client.send(pipeline)
            }
            var results: [Result<RESPValue, RedisError>] = []
            for try await answer in group { if let answer { results = answer } }
            return results
        }
        #expect(results.count == 202)
        let counts = results.prefix(200).compactMap { try? $0.get().int }
        #expect(counts.count == 200)
        #expect(zip(counts, counts.dropFirst()).allSatisfy { $1 == $0 + 1 }, "the pipeline's INCRs ran back to back")
        guard case .failure(let error) = results[200] else {
            Issue.record("expected WRONGTYPE, got \(results[200])")
            return
        }
        #expect(error.code == "WRONGTYPE")
        #expect((try? results[201].get())?.string == "value", "an error reply fails its own command only")
        #expect(try await client.send(RESPCommand("GET", "n")).int == 1_400)

        // A closed connection fails every command of a pipeline, none is left waiting.
        let connection = try await RedisConnection.connect(configuration: try RedisConfiguration(url: server.url), logger: logger)
        await connection.close()
        let refused = await connection.send([RESPCommand("PING"), RESPCommand("PING")])
        #expect(refused.count == 2)
        #expect(refused.allSatisfy { if case .failure(.notConnected) = $0 { true } else { false } })
        await client.shutdown()
        await server.stop()
    }

    @Test func pipelinedScriptsFallBackToEvalOnlyForThoseNotCached() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        let add = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        let fail = RedisScript("return redis.error_reply('NOPE not today')")
        try await client.loadScripts([add])
        _ = try await client.send(RESPCommand("SCRIPT", "FLUSH"))
        let calls = [
            RedisScript.Call(add, keys: ["a"], arguments: [1]), RedisScript.Call(fail), RedisScript.Call(add, keys: ["b"], arguments: [2]),
        ]
        for round in 1...2 {
            // The first round finds nothing cached (EVAL follows), the second finds both scripts.
            let results = await client.evalScripts(calls, routingKey: "scripts")
            #expect((try? results[0].get()) == .integer(Int64(round)))
            #expect((try? results[2].get()) == .integer(Int64(2 * round)))
            guard case .failure(let error) = results[1] else {
                Issue.record("expected NOPE, got \(results[1])")
                return
            }
            #expect(error.code == "NOPE")
        }
        await client.shutdown()
        await server.stop()
    }

    @Test func routingKeysKeepPerKeyOrderAcrossThePool() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server, connections: 4)
        let keys = (0..<24).map { "list:\($0)" }
        var futures: [EventLoopFuture<RESPValue>] = []
        for index in 0..<400 {
            for key in keys {
                futures.append(client.send(RESPCommand("RPUSH", key, index), routingKey: key))
            }
        }
        try await withDeadline(.seconds(60)) { [futures] in for future in futures { _ = try await future.get() } }
        for key in keys {
            let items = try #require(try await client.send(RESPCommand("LRANGE", key, 0, -1)).array)
            #expect(items.compactMap(\.int) == (0..<400).map(Int64.init))
        }
        await client.shutdown()
        await server.stop()
    }

    /// A server that accepts connections and never answers (hung, or not Redis): connecting fails within the
    /// connect timeout instead of waiting forever for `AUTH`, and the client keeps trying (it hung on its first
    /// attempt before).
    @Test func aServerThatNeverAnswersFailsTheConnectAndTheClientKeepsTrying() async throws {
        let listener = try SilentListener()
        var configuration = try RedisConfiguration(url: "redis://:secret@127.0.0.1:\(listener.port)/3")
        configuration.connectTimeout = .milliseconds(300)
        let started = ContinuousClock.now
        await #expect {
            _ = try await withDeadline(.seconds(10)) { [configuration, logger] in
                try await RedisConnection.connect(configuration: configuration, logger: logger)
            }
        } throws: { error in
            (error as? RedisError) != nil
        }
        #expect(ContinuousClock.now - started < .seconds(5))
        let client = RedisClient(configuration: configuration, connectionCount: 1, logger: logger)
        try await waitUntil("the condition holds", timeout: .seconds(10)) { listener.accepted >= 3 }
        #expect(!client.isConnected)
        await client.shutdown()
    }

    @Test func commandsFailInsteadOfHangingWhenRedisDiesAndWorkAgainAfterItRestarts() async throws {
        let server = try await RedisServerProcess()
        let client = try await makeClient(server)
        _ = try await client.send(RESPCommand("SET", "before", "1"))
        // Certainly in flight: a blocking pop on a connection of its own.
        let blocking = try await client.dedicatedConnection()
        let blocked: EventLoopFuture<RESPValue> = blocking.send(RESPCommand("BLPOP", "never", 0))
        // Probably in flight: a burst on the pool.
        let burst = (0..<5_000).map { client.send(RESPCommand("INCR", "burst"), routingKey: $0) }
        await server.kill()

        await #expect(throws: RedisError.connectionClosed) { try await withDeadline(.seconds(30)) { try await blocked.get() } }
        var answered = 0
        for future in burst {
            do {
                _ = try await withDeadline(.seconds(30)) { try await future.get() }
                answered += 1
            } catch let error as RedisError {
                switch error {
                case .connectionClosed, .notConnected: break
                default: Issue.record("unexpected error \(error)")
                }
            }
        }
        await blocking.close()
        // While Redis is down, commands fail at once.
        try await waitUntil("the condition holds", timeout: .seconds(30)) { !client.isConnected }
        await #expect {
            _ = try await client.send(RESPCommand("GET", "before"))
        } throws: { error in
            if case .notConnected = error as? RedisError { return true }
            return false
        }

        try await server.restart()
        try await waitUntil("the condition holds", timeout: .seconds(30)) { (try? await client.send(RESPCommand("GET", "before")))?.string == "1" }
        try await client.waitUntilConnected(timeout: .seconds(30))
        // Every INCR that answered is in the AOF (appendfsync always); others may or may not have run.
        let burstCount = try await client.send(RESPCommand("GET", "burst")).int ?? 0
        #expect(burstCount >= Int64(answered))
        #expect(burstCount <= 5_000)
        await client.shutdown()
        await server.stop()
    }

    @Test func aClientStartedBeforeRedisConnectsWhenItComesUp() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        await server.kill()
        let client = RedisClient(configuration: try RedisConfiguration(url: server.url), connectionCount: 2, logger: logger)
        await #expect(throws: RedisError.timeout) { try await client.waitUntilConnected(timeout: .milliseconds(300)) }
        await #expect(throws: RedisError.self) { _ = try await client.send(RESPCommand("PING")) }
        try await server.restart()
        try await client.waitUntilConnected(timeout: .seconds(30))
        #expect(try await client.send(RESPCommand("PING")) == .simpleString("PONG"))
        await client.shutdown()
        await #expect(throws: RedisError.self) { _ = try await client.send(RESPCommand("PING")) }
        await server.stop()
    }

    @Test func pubSubDeliversMessagesSurvivesARestartAndStopsCleanly() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        let subscription = try await client.subscribe(to: ["events", "other"])
        let received = NIOLockedValueBox<[RedisSubscription.Event]>([])
        let consumer = Task {
            for await event in subscription { received.withLockedValue { $0.append(event) } }
        }
        func message(_ channel: String, _ text: String) -> RedisSubscription.Event {
            .message(channel: channel, payload: ByteBuffer(string: text))
        }

        #expect(try await client.publish("events", "hello") == 1)
        #expect(try await client.publish("other", ByteBuffer(string: "bytes")) == 1)
        #expect(try await client.publish("nobody-listens", "x") == 0)
        try await waitUntil("the condition holds", timeout: .seconds(30)) { received.withLockedValue { $0.count } == 2 }
        #expect(received.withLockedValue { $0 } == [message("events", "hello"), message("other", "bytes")])

        try await server.restart()
        try await waitUntil("the condition holds", timeout: .seconds(30)) { received.withLockedValue { $0.count } == 3 }
        #expect(received.withLockedValue { $0.last } == .resubscribed)
        // (Until the client notices its old connections are gone, publishing fails.)
        try await waitUntil("the condition holds", timeout: .seconds(30)) { (try? await client.publish("events", "after restart")) == 1 }
        try await waitUntil("the condition holds", timeout: .seconds(30)) { received.withLockedValue { $0.contains(message("events", "after restart")) } }
        #expect(received.withLockedValue { Array($0[3...]) }.allSatisfy { $0 == message("events", "after restart") })

        await subscription.close()
        try await withDeadline(.seconds(30)) { await consumer.value }
        try await waitUntil("the condition holds", timeout: .seconds(30)) { (try? await client.publish("events", "gone")) == 0 }
        await client.shutdown()
        await server.stop()
    }

    @Test func cancellingTheConsumingTaskEndsASubscription() async throws {
        let server = try await RedisServerProcess(appendOnly: false)
        let client = try await makeClient(server)
        let subscription = try await client.subscribe(to: ["events"])
        let consumer = Task {
            var received = 0
            for await event in subscription {
                if case .message = event { received += 1 }
            }
            return received
        }
        try await waitUntil("the condition holds", timeout: .seconds(30)) { (try? await client.publish("events", "1")) == 1 }
        consumer.cancel()
        _ = try await withDeadline(.seconds(30)) { await consumer.value }
        try await waitUntil("the condition holds", timeout: .seconds(30)) { (try? await client.publish("events", "2")) == 0 }
        await client.shutdown()
        await server.stop()
    }
}

/// Runs `body`, failing if it takes longer than `timeout` (so that a hang fails the test instead of stalling it).
func withDeadline<T: Sendable>(_ timeout: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    // Not a task group: that would wait for a body that ignores cancellation (an EventLoopFuture's `get()` does).
    try await withTimeLimit(timeout, "the Redis operation", body)
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        results.reserveCapacity(count)
        for element in self { try await results.append(transform(element)) }
        return results
    }
}

/// A TCP listener on loopback that accepts connections and never answers (keeps them open), counting them.
final class SilentListener: Sendable {
    let port: Int
    private let descriptor: Int32
    /// Accepted connections, kept open.
    private let held = NIOLockedValueBox<[Int32]>([])

    var accepted: Int { held.withLockedValue { $0.count } }

    init() throws {
        #if canImport(Glibc)
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw TestFailure("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard bound == 0, named == 0, listen(descriptor, 64) == 0 else {
            close(descriptor)
            throw TestFailure("cannot listen on loopback")
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
        let held = self.held
        let thread = Thread {
            while true {
                let connection = accept(descriptor, nil, nil)
                guard connection >= 0 else { return }
                held.withLockedValue { $0.append(connection) }
            }
        }
        thread.start()
    }

    deinit {
        shutdown(descriptor, Int32(SHUT_RDWR))
        close(descriptor)
        for connection in held.withLockedValue({ $0 }) { close(connection) }
    }
}
