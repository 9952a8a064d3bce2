import Logging
import PigeonDomain
import PigeonProtocol
import PigeonRedis
import ServiceLifecycle

extension RedisStreamsBuffer.Configuration {
    /// The Redis buffer's options from its URL's query: `prefix`, `partitions`, `lease_ms`, `dedupe_hours`.
    package init(url: String, nodeId: String) throws {
        let query = try RedisConfiguration(url: url).queryItems
        func integer(_ name: String, _ range: ClosedRange<Int>) throws -> Int? {
            guard let text = query[name] else { return nil }
            guard let value = Int(text), range.contains(value) else {
                throw PigeonError.invalid("the Redis URL's \(name) must be an integer from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
            }
            return value
        }
        if let unknown = query.keys.sorted().first(where: { !["prefix", "partitions", "lease_ms", "dedupe_hours"].contains($0) }) {
            throw PigeonError.invalid("the Redis URL has an unknown option '\(unknown)' (known: prefix, partitions, lease_ms, dedupe_hours)")
        }
        var configuration = Self(nodeId: nodeId)
        if let prefix = query["prefix"] {
            guard !prefix.isEmpty, prefix.count <= 64, !prefix.contains(where: { $0 == "{" || $0 == "}" || $0.isWhitespace }) else {
                throw PigeonError.invalid("the Redis URL's prefix must be 1-64 characters without braces or spaces")
            }
            configuration.keyPrefix = prefix
        }
        if let partitions = try integer("partitions", 1...1024) { configuration.partitions = partitions }
        if let lease = try integer("lease_ms", 500...600_000) {
            configuration.leaseTTL = .milliseconds(lease)
            configuration.heartbeatInterval = min(configuration.heartbeatInterval, .milliseconds(lease / 4))
        }
        if let hours = try integer("dedupe_hours", 1...24 * 365) { configuration.dedupeTTL = .seconds(hours * 3600) }
        self = configuration
    }
}

/// The production ingest buffer as the composition root takes it: the Redis client for `url`, the buffer configured
/// from the URL's options (its entries sealed by `cipher`), and the service that runs its leases and closes the client.
package struct RedisIngest: Sendable {
    package let buffer: RedisStreamsBuffer
    package let service: RedisBufferService

    /// Connects and sets the buffer up (``RedisStreamsBuffer/init(client:configuration:logger:clock:)``); closes the
    /// client again when that throws.
    package static func open(url: String, nodeId: String, cipher: AtRestCipher, logger: Logger) async throws -> RedisIngest {
        let client = RedisClient(configuration: try RedisConfiguration(url: url), logger: logger)
        do {
            var configuration = try RedisStreamsBuffer.Configuration(url: url, nodeId: nodeId)
            configuration.cipher = cipher
            let buffer = try await RedisStreamsBuffer(client: client, configuration: configuration, logger: logger)
            return RedisIngest(buffer: buffer, service: RedisBufferService(buffer: buffer, client: client))
        } catch {
            await client.shutdown()
            throw error
        }
    }
}

/// Runs the Redis buffer's heartbeats and leases; when they end (graceful shutdown releases the leases), closes
/// the Redis connections. Listed before the processor, so it stops after the processor drained.
package struct RedisBufferService: Service {
    package let buffer: RedisStreamsBuffer
    package let client: RedisClient

    package init(buffer: RedisStreamsBuffer, client: RedisClient) {
        self.buffer = buffer
        self.client = client
    }

    package func run() async throws {
        do {
            try await buffer.run()
        } catch {
            await client.shutdown()
            throw error
        }
        await client.shutdown()
    }
}
