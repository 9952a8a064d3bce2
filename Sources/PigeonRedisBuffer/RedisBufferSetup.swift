import Logging
import NIOCore
import PigeonDomain
import PigeonRedis

/// What the Redis buffer does to Redis once per node, and the upkeep of its depth: the durability check, the scripts,
/// the partition count every node must share, the consumer groups.
enum RedisBufferSetup {
    /// Everything done once per node before the first heartbeat. Throws ``RedisStreamsBuffer/SetupError`` if Redis
    /// holds a buffer with another number of partitions under this prefix.
    static func prepare(_ context: RedisBufferContext) async throws {
        let (client, keys, configuration) = (context.client, context.keys, context.configuration)
        try await client.loadScripts(RedisStreamsBuffer.Scripts.all)
        await checkDurability(client: client, logger: context.logger)
        _ = try await client.send(RESPCommand("HSETNX", keys.meta, "partitions", configuration.partitions))
        let partitions = try await client.send(RESPCommand("HGET", keys.meta, "partitions")).int
        guard partitions == Int64(configuration.partitions) else {
            throw RedisStreamsBuffer.SetupError(
                description: "Redis holds a buffer with \(partitions.map(String.init) ?? "an unreadable number of") partitions under the prefix "
                    + "\"\(configuration.keyPrefix)\", but this node is configured with \(configuration.partitions): every node must use the same number")
        }
        try await createGroups(context)
    }

    /// Creates each partition's stream and consumer group if missing.
    static func createGroups(_ context: RedisBufferContext) async throws {
        let creations: [EventLoopFuture<RESPValue>] = (0..<context.configuration.partitions).map {
            context.client.send(RESPCommand("XGROUP", "CREATE", context.keys.stream($0), RedisStreamsBuffer.group, "0", "MKSTREAM"))
        }
        for creation in creations {
            do {
                _ = try await creation.get()
            } catch let error as RedisError where error.code == "BUSYGROUP" {
                continue
            }
        }
    }

    /// Counts what the streams hold (the depth between two counts follows appends and deletions).
    static func refreshDepth(_ context: RedisBufferContext) async throws {
        let deltaAtStart = context.book.depthDelta
        let lengths: [EventLoopFuture<RESPValue>] = (0..<context.configuration.partitions).map {
            context.client.send(RESPCommand("XLEN", context.keys.stream($0)))
        }
        var total = 0
        for length in lengths { total += Int(try await length.get().int ?? 0) }
        context.book.counted(total, deltaAtStart: deltaAtStart)
    }

    /// Reads Redis's persistence settings and warns when acknowledged messages could be lost in a Redis crash.
    @discardableResult
    static func checkDurability(client: RedisClient, logger: Logger) async -> RedisStreamsBuffer.Durability {
        let durability: RedisStreamsBuffer.Durability
        do {
            let appendOnly = try await client.send(RESPCommand("CONFIG", "GET", "appendonly")).array?.last?.string
            let appendFsync = try await client.send(RESPCommand("CONFIG", "GET", "appendfsync")).array?.last?.string
            switch (appendOnly, appendFsync) {
            case ("no", _): durability = .noAppendOnlyFile
            case ("yes", "always"): durability = .everyWrite
            case ("yes", "everysec"): durability = .everySecond
            case ("yes", "no"): durability = .operatingSystem
            default: durability = .unknown("CONFIG GET answered appendonly=\(appendOnly ?? "?") appendfsync=\(appendFsync ?? "?")")
            }
        } catch {
            durability = .unknown("\(error)")
        }
        switch durability {
        case .everyWrite:
            break
        case .everySecond:
            logger.warning("Redis runs with appendfsync everysec: up to one second of acknowledged messages can be lost when Redis crashes")
        case .operatingSystem:
            logger.warning("Redis runs with appendfsync no: acknowledged messages can be lost when Redis crashes (the OS flushes when it likes)")
        case .noAppendOnlyFile:
            logger.warning("Redis runs without AOF (appendonly no): acknowledged messages can be lost when Redis crashes")
        case .unknown(let reason):
            logger.warning(
                "could not check Redis's persistence (CONFIG GET appendonly/appendfsync); make sure it runs with appendonly yes and appendfsync always",
                metadata: ["reason": "\(reason)"])
        }
        // An evicting Redis under memory pressure drops buffered messages and de-duplication keys.
        if let policy = try? await client.send(RESPCommand("CONFIG", "GET", "maxmemory-policy")).array?.last?.string, policy != "noeviction" {
            logger.warning(
                "Redis evicts keys under memory pressure (maxmemory-policy \(policy)): buffered messages can be lost; set maxmemory-policy noeviction")
        }
        return durability
    }
}
