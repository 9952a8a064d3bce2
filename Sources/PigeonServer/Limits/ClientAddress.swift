import NIOCore

/// A block of IP addresses in CIDR notation (`10.0.0.0/8`, `::1/128`, or a single address).
public struct AddressBlock: Sendable, Hashable, CustomStringConvertible {
    /// The address bytes (4 for IPv4, 16 for IPv6), masked to the prefix.
    let bytes: [UInt8]
    let prefixLength: Int

    /// Parses `address[/prefix]`; `nil` when it is not an IPv4 or IPv6 block.
    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let bytes = Self.addressBytes(String(parts[0])) else { return nil }
        let maxPrefix = bytes.count * 8
        var prefix = maxPrefix
        if parts.count == 2 {
            guard let value = Int(parts[1]), (0...maxPrefix).contains(value) else { return nil }
            prefix = value
        }
        self.prefixLength = prefix
        self.bytes = Self.mask(bytes, prefix)
    }

    public var description: String { "\(ClientAddress.format(bytes))/\(prefixLength)" }

    /// Whether `address` (4 or 16 bytes; an IPv4-mapped IPv6 address counts as IPv4) lies in this block.
    func contains(_ address: [UInt8]) -> Bool {
        let address = ClientAddress.unmapped(address)
        guard address.count == bytes.count else { return false }
        return Self.mask(address, prefixLength) == bytes
    }

    private static func mask(_ bytes: [UInt8], _ prefix: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let bits = max(0, min(8, prefix - index * 8))
            return bits == 8 ? byte : byte & ~(0xFF >> bits)
        }
    }

    /// The bytes of an IPv4 or IPv6 address in text.
    static func addressBytes(_ text: String) -> [UInt8]? {
        var text = text
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        guard let address = try? SocketAddress(ipAddress: text, port: 0) else { return nil }
        return ClientAddress.bytes(of: address)
    }
}

/// Who a request comes from, for the per-address limits: the TCP peer, or, when the peer is a configured
/// trusted proxy, the address that proxy put last in `X-Forwarded-For` (the hop just before it), walking back
/// through further trusted proxies. A client cannot choose its address by sending its own `X-Forwarded-For`:
/// the header is read only from trusted peers, and only from its right end.
public enum ClientAddress {
    /// The client address of a connection from `peer` that sent `forwardedFor` (every `X-Forwarded-For`
    /// value, joined by commas), with `trustedProxies` in front of the server. `"unknown"` without a peer
    /// address (a Unix socket).
    public static func resolve(peer: SocketAddress?, forwardedFor: String?, trustedProxies: [AddressBlock]) -> String {
        guard let peer, let peerBytes = bytes(of: peer) else { return "unknown" }
        var current = peerBytes
        guard !trustedProxies.isEmpty, let forwardedFor else { return format(unmapped(current)) }
        var hops = forwardedFor.split(separator: ",").map { String($0.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed()) }
        while trustedProxies.contains(where: { $0.contains(current) }), let hop = hops.popLast() {
            guard let hopBytes = AddressBlock.addressBytes(hop) else { break }
            current = hopBytes
        }
        return format(unmapped(current))
    }

    /// The key a per-address limit counts under: the address itself for IPv4, its /64 network for IPv6 (one
    /// subscriber usually holds a whole /64, so counting single IPv6 addresses would be no limit at all).
    public static func limitKey(_ address: String) -> String {
        guard address.contains(":"), let bytes = AddressBlock.addressBytes(address), bytes.count == 16 else { return address }
        return format(Array(bytes[0..<8]) + [UInt8](repeating: 0, count: 8)) + "/64"
    }

    /// Whether the TCP peer `peer` is one of `trustedProxies`.
    public static func isTrusted(_ peer: SocketAddress?, _ trustedProxies: [AddressBlock]) -> Bool {
        guard let peer, let bytes = bytes(of: peer) else { return false }
        return trustedProxies.contains { $0.contains(bytes) }
    }

    /// The address bytes of an IP socket address (4 or 16), `nil` for a Unix socket.
    static func bytes(of address: SocketAddress) -> [UInt8]? {
        switch address {
        case .v4(let v4):
            return withUnsafeBytes(of: v4.address.sin_addr) { Array($0) }
        case .v6(let v6):
            return withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
        case .unixDomainSocket:
            return nil
        }
    }

    /// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as its 4 IPv4 bytes; anything else unchanged.
    static func unmapped(_ bytes: [UInt8]) -> [UInt8] {
        if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            return Array(bytes[12..<16])
        }
        return bytes
    }

    /// Canonical text of address bytes (dotted IPv4, or IPv6 in full hex groups).
    static func format(_ bytes: [UInt8]) -> String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        return stride(from: 0, to: bytes.count, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            .joined(separator: ":")
    }
}
