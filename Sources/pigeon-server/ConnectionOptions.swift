import ArgumentParser
import Foundation
import PigeonServer

/// `pigeon-server serve` options of ServerConfiguration.connectionLimits, and the trusted reverse proxies.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("max-connections-per-address"), help: "Connections one client address (IPv4, or IPv6 /64) may hold open; 0 turns the limit off (default 256).")
    var maxConnectionsPerAddress: Int?

    @Option(name: .customLong("idle-timeout-seconds"), help: "Seconds a connection may stay open without a request before it is closed (default 60).")
    var idleTimeoutSeconds: Double?

    @Option(name: .customLong("head-timeout-seconds"), help: "Seconds a request head may take from its first byte to its end; past it: 408 (default 10).")
    var headTimeoutSeconds: Double?

    @Option(name: .customLong("body-timeout-seconds"), help: "Seconds a request body may take from the end of its head; past it: 408 (default 30).")
    var bodyTimeoutSeconds: Double?

    @Option(name: .customLong("max-request-line-bytes"), help: "Largest request line (method, target, version) in bytes; past it: 414 (default 8192).")
    var maxRequestLineBytes: Int?

    @Option(name: .customLong("max-header-bytes"), help: "Largest header section of a request in bytes; past it: 431 (default 16384).")
    var maxHeaderBytes: Int?

    @Option(name: .customLong("max-header-count"), help: "Most header fields in a request; past it: 431 (default 100).")
    var maxHeaderCount: Int?

    @Option(
        name: .customLong("socket-send-buffer-bytes"),
        help: "Each connection's kernel send buffer (SO_SNDBUF); 0 leaves it to the kernel's autotuning, which lets a client that never reads pin megabytes (default 262144).")
    var socketSendBufferBytes: Int?

    @Option(
        name: .customLong("trusted-proxy"),
        help: "A reverse proxy in front of the server, as an address or CIDR block (repeatable; or PIGEON_TRUSTED_PROXIES, comma-separated): from it the client address is read from X-Forwarded-For, and it is exempt from the per-address connection limit.")
    var trustedProxies: [String] = []

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        if let maxConnectionsPerAddress {
            guard maxConnectionsPerAddress >= 0 else { throw ValidationError("--max-connections-per-address must be 0 or more") }
            configuration.connectionLimits.maxConnectionsPerAddress = maxConnectionsPerAddress
        }
        if let idleTimeoutSeconds {
            configuration.connectionLimits.idleTimeout = try Self.duration(idleTimeoutSeconds, "--idle-timeout-seconds")
        }
        if let bodyTimeoutSeconds {
            configuration.connectionLimits.bodyTimeout = try Self.duration(bodyTimeoutSeconds, "--body-timeout-seconds")
        }
        if let headTimeoutSeconds {
            configuration.connectionLimits.headTimeout = try Self.duration(headTimeoutSeconds, "--head-timeout-seconds")
        }
        if let maxRequestLineBytes {
            guard maxRequestLineBytes >= 16 else { throw ValidationError("--max-request-line-bytes must be at least 16") }
            configuration.connectionLimits.maxRequestLineBytes = maxRequestLineBytes
        }
        if let maxHeaderBytes {
            guard maxHeaderBytes >= 256 else { throw ValidationError("--max-header-bytes must be at least 256") }
            configuration.connectionLimits.maxHeaderBytes = maxHeaderBytes
        }
        if let maxHeaderCount {
            guard maxHeaderCount >= 1 else { throw ValidationError("--max-header-count must be at least 1") }
            configuration.connectionLimits.maxHeaderCount = maxHeaderCount
        }
        if let socketSendBufferBytes {
            guard socketSendBufferBytes >= 0 else { throw ValidationError("--socket-send-buffer-bytes must be 0 or more") }
            configuration.connectionLimits.socketSendBufferBytes = socketSendBufferBytes
        }
        let fromEnvironment = environment["PIGEON_TRUSTED_PROXIES"].map { $0.split(separator: ",").map(String.init) } ?? []
        let blocks = trustedProxies.isEmpty ? fromEnvironment : trustedProxies
        configuration.trustedProxies = try blocks.map { text in
            let text = text.trimmingCharacters(in: .whitespaces)
            guard let block = AddressBlock(text) else {
                throw ValidationError("--trusted-proxy: '\(text)' is not an IPv4 or IPv6 address or CIDR block (like 10.0.0.0/8 or fd00::/8)")
            }
            return block
        }
    }

    private static func duration(_ seconds: Double, _ option: String) throws -> Duration {
        guard seconds > 0, seconds.isFinite else { throw ValidationError("\(option) must be more than 0") }
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }
}
