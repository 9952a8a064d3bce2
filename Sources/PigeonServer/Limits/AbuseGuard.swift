import PigeonDomain
import PigeonProtocol

/// Applies ``AbuseLimits``: registrations per client address, conversations and stored bytes per user. Every
/// refusal is `429 rate_limited` with `Retry-After`, counted in `pigeon_limit_hits_total`.
final class AbuseGuard: Sendable {
    private let limits: AbuseLimits
    private let metrics: PigeonMetrics
    private let registrations: RateLimiter?
    private let conversations: RateLimiter?
    private let storedBytes: RateLimiter?
    private let reactions: RateLimiter?

    init(limits: AbuseLimits, metrics: PigeonMetrics) {
        self.limits = limits
        self.metrics = metrics
        self.registrations =
            limits.registrationsPerSecond > 0 ? RateLimiter(rate: limits.registrationsPerSecond, burst: limits.registrationBurst) : nil
        self.conversations =
            limits.conversationsPerMinute > 0 ? RateLimiter(rate: limits.conversationsPerMinute / 60, burst: limits.conversationsPerMinute) : nil
        self.storedBytes =
            limits.storedBytesPerMinute > 0
            ? RateLimiter(rate: Double(limits.storedBytesPerMinute) / 60, burst: Double(limits.storedBytesPerMinute)) : nil
        self.reactions = limits.reactionsPerSecond > 0 ? RateLimiter(rate: limits.reactionsPerSecond, burst: limits.reactionBurst) : nil
    }

    /// Takes one reaction (an add or a remove) of `device`.
    func admitReaction(by device: DeviceIdentity) throws {
        if let wait = reactions?.take(device.userId + "\u{0}" + device.deviceId) {
            throw refusal("reactions_per_device", "too many reactions from this device; retry in \(wait) s", wait)
        }
    }

    /// The rule a registration is written under: the caller proved to be the user (`authenticated`) or not.
    func registrationRule(authenticated: Bool) -> DeviceRegistrationRule {
        DeviceRegistrationRule(
            onlyFirstDevice: !authenticated, maxDevices: limits.maxDevicesPerUser,
            revokedSince: WallClock.nowMillis() - DeviceRegistrationRule.revocationWindow)
    }

    /// Takes one registration of `address` (``ClientAddress/limitKey(_:)``).
    func admitRegistration(from address: String) throws {
        if let wait = registrations?.take(address) {
            throw refusal("registrations_per_address", "too many registrations from this address; retry in \(wait) s", wait)
        }
    }

    /// Takes one conversation creation of `userId`.
    func admitConversation(by userId: String) throws {
        if let wait = conversations?.take(userId) {
            throw refusal("conversations_per_user", "too many conversations created; retry in \(wait) s", wait)
        }
    }

    /// Refuses when `userId` has used up its stored-bytes budget (checked before the work, charged after).
    func checkStorage(of userId: String) throws {
        if let wait = storedBytes?.check(userId) {
            throw refusal("stored_bytes_per_user", "this user has stored too much in the last minute; retry in \(wait) s", wait)
        }
    }

    /// Charges `userId` for what a request made the server store.
    func chargeStorage(of userId: String, bytes: Int) {
        storedBytes?.charge(userId, cost: Double(bytes))
    }

    /// What the stored-bytes budget counts for `bytes` of content written once plus one row per member.
    func storageCost(bytes: Int, members: Int) -> Int {
        bytes + members * limits.storedRowBytes
    }

    private func refusal(_ limit: String, _ message: String, _ wait: Int) -> PigeonError {
        metrics.limitHit(limit)
        return PigeonError(.rateLimited, message, retryAfter: wait)
    }
}
