import Foundation
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// Typing indicators: pushed to the other members' connected devices, never stored, and turned off by the
/// server when not refreshed within the timeout (checked every 500 ms; both on the injected clock).
final class TypingTracker: Service {
    private struct Key: Hashable {
        var conversationId: String
        var userId: String
    }

    private struct Indicator {
        var expires: ElapsedClock.Instant
        var members: [String]
        var deviceId: String
    }

    /// Where frames go: this node's devices and, with several nodes, the other nodes'.
    private let fanout: any EventFanout
    private let timeout: Duration
    private let clock: ElapsedClock
    /// How often expired indicators are looked for.
    static let sweepInterval = Duration.milliseconds(500)
    private let active = NIOLockedValueBox([Key: Indicator]())
    /// Typing operations per device, made at the first ``admit(_:rate:burst:)``.
    private let rateLimiter = NIOLockedValueBox<RateLimiter?>(nil)
    init(fanout: any EventFanout, timeout: Duration, clock: any Clock<Duration> = ContinuousClock()) {
        self.fanout = fanout
        self.timeout = timeout
        self.clock = ElapsedClock(clock)
    }

    /// Takes one typing operation of `device` from its token bucket (`rate` a second in bursts of up to `burst`,
    /// the configuration's values, fixed by the first call; a rate of 0 admits everything): `nil` if admitted,
    /// else the whole seconds to wait.
    func admit(_ device: DeviceIdentity, rate: Double, burst: Double) -> Int? {
        guard rate > 0 else { return nil }
        let limiter = rateLimiter.withLockedValue { limiter -> RateLimiter in
            if let limiter { return limiter }
            let made = RateLimiter(rate: rate, burst: burst)
            limiter = made
            return made
        }
        return limiter.take(device.userId + "\u{0}" + device.deviceId)
    }

    /// Records and pushes a typing change of `device` in a conversation with `members`.
    func update(conversationId: String, device: DeviceIdentity, active isActive: Bool, members: [String]) {
        let key = Key(conversationId: conversationId, userId: device.userId)
        let expires = clock.now + timeout
        let wasActive = active.withLockedValue { active -> Bool in
            let was = active[key] != nil
            if isActive {
                active[key] = Indicator(expires: expires, members: members, deviceId: device.deviceId)
            } else {
                active[key] = nil
            }
            return was
        }
        if isActive || wasActive {
            push(conversationId: conversationId, userId: device.userId, active: isActive, members: members)
        }
    }

    private func push(conversationId: String, userId: String, active: Bool, members: [String]) {
        let event = TypingEvent(conversationId: conversationId, userId: userId, active: active)
        guard let data = try? JSONEncoder().encode(ServerEvent.typing(event)) else { return }
        let json = String(decoding: data, as: UTF8.self)
        let recipients = members.filter { $0 != userId }
        fanout.broadcast(type: "typing", json: json, to: recipients)
    }

    func run() async throws {
        // Cancellation ends it too (an embedding app may cancel the server's task instead of shutting it down):
        // `try?` makes the sleep return at once when cancelled, which without this check would spin forever.
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            try? await clock.sleep(for: Self.sweepInterval)
            let now = clock.now
            let expired = active.withLockedValue { active -> [(Key, Indicator)] in
                let expired = active.filter { $0.value.expires <= now }
                for (key, _) in expired { active[key] = nil }
                return expired.map { ($0.key, $0.value) }
            }
            for (key, indicator) in expired {
                push(conversationId: key.conversationId, userId: key.userId, active: false, members: indicator.members)
            }
        }
    }
}
