import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import PigeonRedis
import ServiceLifecycle

/// A node's claim on its id in Redis, held for as long as the process runs.
///
/// Everything the buffer's partition leases guarantee (one processor per partition, so ordering and exactly-once)
/// rests on each id naming one live process: a lease names its holder by node id, so two processes with one id would
/// each renew "their" leases and both process every partition. The claim is the key `<prefix>:node:<id>`, set with
/// `SET NX PX` to a value naming this process (a random token, its host and pid), renewed well inside its TTL, and
/// deleted on graceful stop. It lives in Redis because the partition leases it protects live there: one service's
/// clock and failure decide both.
///
/// A claim found gone while the node runs (Redis lost the key: a restart without AOF, `FLUSHALL`) is taken again, with a
/// warning: the partition leases went with it, and nobody else holds the id. A claim found held by another process
/// ends this node: ``run()`` throws ``Lost``, which stops the server (it must not go on renewing partition leases in a
/// name that is no longer its own).
package final class NodeIdentityLease: Service, Sendable {
    /// Another live process holds the id.
    package struct Held: Error, CustomStringConvertible {
        package let nodeId: String
        /// Who holds it, as its claim says (`host pid`).
        package let holder: String
        /// How long its claim has left unless it renews it.
        package let remaining: Duration

        package var description: String {
            let seconds = Double(remaining / .milliseconds(1)) / 1000
            let endsAt = Date(timeIntervalSinceNow: seconds).formatted(.iso8601)
            return "the node id '\(nodeId)' is in use by another live process (\(holder)); its lease ends in "
                + "\(String(format: "%.1f", seconds)) s (\(endsAt)) unless that process renews it: stop it, or give this node another --node-id"
        }
    }

    /// The id was taken by another process while this node ran.
    package struct Lost: Error, CustomStringConvertible {
        package let nodeId: String
        package let holder: String

        package var description: String {
            "the node id '\(nodeId)' is now held by another process (\(holder)); this node stops rather than act under it"
        }
    }

    package let nodeId: String
    let key: String
    /// This process's claim: `<token> <host> pid <pid>`, unique per process.
    let value: String
    let ttl: Duration
    let interval: Duration
    let client: RedisClient
    let logger: Logger

    /// KEYS: claim. ARGV: value, TTL in ms. `{1}` when claimed, else `{0, holder's value, its remaining ms}`.
    static let claimScript = RedisScript(
        """
        if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1} end
        return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])}
        """)

    /// KEYS: claim. ARGV: value, TTL in ms. Renews this process's claim (`{1}`), takes it again if it is gone (`{2}`),
    /// or answers `{0, holder's value}` when another process holds it.
    static let renewScript = RedisScript(
        """
        local holder = redis.call('GET', KEYS[1])
        if holder == ARGV[1] then
            redis.call('PEXPIRE', KEYS[1], ARGV[2])
            return {1}
        end
        if not holder then
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return {2}
        end
        return {0, holder}
        """)

    /// Claims `nodeId` under `keyPrefix`, or throws ``Held`` naming who has it and when its lease ends. `client` is
    /// this lease's own (it releases the claim after every other Redis user of the node stopped, then shuts it down).
    ///
    /// When Redis is not reachable within 3 s the node starts unclaimed, as the buffer starts unready: ``run()``'s first
    /// renewal then claims the id, or ends the node if another process took it meanwhile.
    package static func claim(
        nodeId: String, keyPrefix: String, ttl: Duration, interval: Duration, client: RedisClient, logger: Logger
    ) async throws -> NodeIdentityLease {
        let lease = NodeIdentityLease(nodeId: nodeId, keyPrefix: keyPrefix, ttl: ttl, interval: interval, client: client, logger: logger)
        let reply: RESPValue
        do {
            try await client.waitUntilConnected(timeout: .seconds(3))
            reply = try await client.evalScript(Self.claimScript, keys: [lease.key], arguments: [lease.value, lease.ttlMilliseconds])
        } catch {
            logger.warning("Redis is not reachable: this node's id is claimed once it is", metadata: ["error": "\(error)"])
            return lease
        }
        let fields = reply.array ?? []
        if fields.first?.int == 1 { return lease }
        let holder = fields.count > 1 ? Self.holderDescription(fields[1].string ?? "") : "unknown"
        let remaining = fields.count > 2 ? max(0, fields[2].int ?? 0) : 0
        throw Held(nodeId: nodeId, holder: holder, remaining: .milliseconds(remaining))
    }

    private init(nodeId: String, keyPrefix: String, ttl: Duration, interval: Duration, client: RedisClient, logger: Logger) {
        self.nodeId = nodeId
        self.key = "\(keyPrefix):node:\(nodeId)"
        let host = ProcessInfo.processInfo.hostName
        self.value = "\(Identifiers.randomHex(bytes: 8)) \(host) pid \(ProcessInfo.processInfo.processIdentifier)"
        self.ttl = ttl
        self.interval = interval
        self.client = client
        var logger = logger
        logger[metadataKey: "node"] = "\(nodeId)"
        self.logger = logger
    }

    var ttlMilliseconds: Int64 { Int64(ttl / .milliseconds(1)) }

    /// A claim's value without its token: `host pid N`.
    static func holderDescription(_ value: String) -> String {
        guard let space = value.firstIndex(of: " ") else { return value.isEmpty ? "unknown" : value }
        return String(value[value.index(after: space)...])
    }

    /// Renews the claim every `interval` until graceful shutdown, then releases it; shuts the client down when it
    /// ends. Throws ``Lost`` when another process holds the id.
    package func run() async throws {
        while true {
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }
            if Task.isShuttingDownGracefully || Task.isCancelled { break }
            do {
                try await renew()
            } catch let lost as Lost {
                logger.critical("\(lost.description)")
                await client.shutdown()
                throw lost
            } catch {
                logger.warning("could not renew this node's id claim; retrying", metadata: ["error": "\(error)"])
            }
        }
        await release()
        await client.shutdown()
    }

    /// One renewal: extends the claim, takes it again if it is gone, or throws ``Lost``.
    func renew() async throws {
        let reply = try await client.evalScript(Self.renewScript, keys: [key], arguments: [value, ttlMilliseconds])
        switch reply.array?.first?.int {
        case 1: return
        case 2: logger.warning("this node's id claim was not in Redis (Redis lost the key, or was not reachable at start); claimed it")
        default:
            let holder = reply.array.flatMap { $0.count > 1 ? $0[1].string : nil }.map(Self.holderDescription) ?? "unknown"
            throw Lost(nodeId: nodeId, holder: holder)
        }
    }

    /// Deletes the claim if it still is this process's, so that a restart with the same id need not wait for it.
    package func release() async {
        _ = try? await client.evalScript(RedisStreamsBuffer.Scripts.releaseLease, keys: [key], arguments: [value])
    }
}
