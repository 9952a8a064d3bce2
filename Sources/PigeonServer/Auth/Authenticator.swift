import Crypto
import Foundation
import Logging
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

/// A device a request's token proves.
public struct AuthenticatedDevice: Sendable, Hashable {
    /// The (userId, deviceId) the token names.
    public var device: DeviceIdentity
    /// When the token was issued, in seconds since 1970: a JWT's `iat`; `nil` for an opaque token or a JWT
    /// without `iat`.
    public var issuedAt: Int64?

    public init(device: DeviceIdentity, issuedAt: Int64?) {
        self.device = device
        self.issuedAt = issuedAt
    }
}

/// Bearer tokens: opaque ones issued at registration (stored as SHA-256 hashes, looked up per request with an
/// in-memory cache), and, when JWT keys are configured (``AuthConfiguration``), JWTs minted by the app's backend
/// or an identity provider.
///
/// Revocation (API.md 1.1): an opaque token of a revoked device is unknown to the store; a JWT is refused when its
/// device's latest revocation came in or after the second of its `iat` (or it has no `iat`). Each JWT device is
/// looked up (and recorded, on first sight) once, then cached. ``forget(_:)`` drops what the caches hold of a revoked
/// device, so the next request reads the store; every authenticated request is counted by ``activity``.
///
/// As a `Service` it keeps a JWKS current (see ``JWKSKeySource``); without a JWKS it only waits for shutdown.
public final class Authenticator: Service, Sendable {
    private let store: any DeviceStore
    let jwt: JWTAuthenticator?
    private let logger: Logger
    /// Opaque tokens' hashes → their devices.
    private let tokens = RevocableCache<String, DeviceIdentity>(limit: 100_000)
    /// Devices seen through a JWT → their revocation state.
    private let jwtDevices = RevocableCache<DeviceIdentity, JWTDeviceState>(limit: 100_000)
    /// When each device was last seen.
    let activity: DeviceActivity

    /// Reads the configured key files (a missing or malformed one is an error naming it); a JWKS URL is first
    /// fetched by ``run()``.
    init(
        store: any DeviceStore, configuration: AuthConfiguration, activity: DeviceActivity, logger: Logger, clock: any Clock<Duration> = ContinuousClock()
    ) async throws {
        self.store = store
        self.logger = logger
        self.activity = activity
        self.jwt = configuration.hasJWTKeys ? try await JWTAuthenticator(configuration: configuration, logger: logger, clock: clock) : nil
    }

    public func run() async throws {
        if let jwks = jwt?.jwks {
            await cancelWhenGracefulShutdown { await jwks.run() }
        } else {
            try? await gracefulShutdown()
        }
    }

    /// Registers a device of `userId` under `rule` and returns its token (shown once; the store keeps its hash).
    func register(userId: String, deviceName: String?, rule: DeviceRegistrationRule) async throws -> DeviceRegistration {
        var bytes = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = generator.next() }
        let token = "pgn_" + Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let device = try await store.registerDevice(userId: userId, name: deviceName, tokenHash: Self.hash(token), rule: rule)
        return DeviceRegistration(userId: device.userId, deviceId: device.deviceId, token: token)
    }

    /// The device a token belongs to.
    func device(token: String) async throws -> DeviceIdentity {
        try await authenticate(token: token).device
    }

    /// The device a token belongs to, with the token's issue time (`PigeonError.unauthorized` for any bad token,
    /// a revoked device's included). Counts as a request of the device (``activity``).
    func authenticate(token: String) async throws -> AuthenticatedDevice {
        guard !token.isEmpty, token.utf8.count <= 4096 else { throw PigeonError.unauthorized }
        let authenticated: AuthenticatedDevice
        if let jwt, !token.hasPrefix("pgn_") {
            do {
                authenticated = try await jwt.authenticate(token)
            } catch {
                logger.debug("JWT refused", metadata: ["reason": "\(error.reason)"])
                throw PigeonError.unauthorized
            }
            try await admitJWTDevice(authenticated)
        } else {
            let hash = Self.hash(token)
            let (cached, generation) = tokens.lookup(hash)
            if let cached {
                authenticated = AuthenticatedDevice(device: cached, issuedAt: nil)
            } else {
                guard let device = try await store.device(tokenHash: hash) else { throw PigeonError.unauthorized }
                tokens.insert(device, for: hash, readAt: generation)
                authenticated = AuthenticatedDevice(device: device, issuedAt: nil)
            }
        }
        activity.seen(authenticated.device)
        return authenticated
    }

    /// Refuses a JWT its device's latest revocation refuses; records the device on first sight, and lists a revoked one
    /// again for a token issued after its revocation.
    private func admitJWTDevice(_ authenticated: AuthenticatedDevice) async throws {
        let device = authenticated.device
        var (state, generation) = jwtDevices.lookup(device)
        if state == nil {
            let read = try await store.recordJWTDevice(device, issuedAt: authenticated.issuedAt, at: WallClock.nowMillis())
            jwtDevices.insert(read, for: device, readAt: generation)
            state = read
        }
        guard let known = state, !known.refuses(tokenIssuedAt: authenticated.issuedAt) else {
            logger.debug("JWT refused", metadata: ["reason": "its device was revoked after the token was issued"])
            throw PigeonError.unauthorized
        }
        if !known.isListed {
            generation = jwtDevices.lookup(device).generation
            let read = try await store.recordJWTDevice(device, issuedAt: authenticated.issuedAt, at: WallClock.nowMillis())
            jwtDevices.insert(read, for: device, readAt: generation)
        }
    }

    /// Forgets what the caches hold of a revoked device (and anything being read from the store now), so its tokens
    /// are checked against the store again: called on every node for every revocation (``LocalFanout``).
    func forget(_ revocation: DeviceRevocation) {
        tokens.invalidate { $1 == revocation.device }
        jwtDevices.invalidate { key, _ in key == revocation.device }
    }

    /// The bearer token of a request: `Authorization: Bearer <token>`, or `access_token` in the query when
    /// `allowQuery` (WebSocket and SSE, where browsers cannot set headers).
    static func token(authorization: String?, queryToken: String?, allowQuery: Bool) throws -> String {
        if let authorization {
            let parts = authorization.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "bearer" else { throw PigeonError.unauthorized }
            return parts[1].trimmingCharacters(in: .whitespaces)
        }
        if allowQuery, let queryToken { return queryToken }
        throw PigeonError.unauthorized
    }

    static func hash(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
