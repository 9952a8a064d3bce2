import NIOConcurrencyHelpers
import NIOCore

/// The open connections of each client address (an IPv4 address, or an IPv6 /64: ``ClientAddress/limitKey(_:)``),
/// for ``ConnectionLimits/maxConnectionsPerAddress``. The address is the TCP peer's; peers in the trusted proxies
/// are not counted (they carry many clients).
final class ConnectionsPerAddress: Sendable {
    private let limit: Int
    private let trustedProxies: [AddressBlock]
    private let counts = NIOLockedValueBox([String: Int]())

    init(limit: Int, trustedProxies: [AddressBlock]) {
        self.limit = limit
        self.trustedProxies = trustedProxies
    }

    /// Counts `channel` in for its address until it closes; `false` (and not counted) when its address already
    /// holds the limit.
    func admit(_ channel: any Channel) -> Bool {
        guard limit > 0, !ClientAddress.isTrusted(channel.remoteAddress, trustedProxies) else { return true }
        let address = ClientAddress.resolve(peer: channel.remoteAddress, forwardedFor: nil, trustedProxies: [])
        guard address != "unknown" else { return true }
        let key = ClientAddress.limitKey(address)
        let admitted = counts.withLockedValue { counts in
            guard counts[key, default: 0] < limit else { return false }
            counts[key, default: 0] += 1
            return true
        }
        if admitted {
            channel.closeFuture.whenComplete { _ in self.release(key) }
        }
        return admitted
    }

    private func release(_ key: String) {
        counts.withLockedValue { counts in
            let count = counts[key, default: 1] - 1
            counts[key] = count > 0 ? count : nil
        }
    }
}
