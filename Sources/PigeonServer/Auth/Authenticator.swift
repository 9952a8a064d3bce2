import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
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
/// As a `Service` it keeps a JWKS current (see ``JWKSKeySource``); without a JWKS it only waits for shutdown.
public final class Authenticator: Service, Sendable {
    private let store: any MessageStore
    private let jwt: JWTAuthenticator?
    private let logger: Logger
    private let cache = NIOLockedValueBox([String: DeviceIdentity]())
    private let cacheLimit = 100_000

    /// Reads the configured key files (a missing or malformed one is an error naming it); a JWKS URL is first
    /// fetched by ``run()``.
    init(store: any MessageStore, configuration: AuthConfiguration, logger: Logger) async throws {
        self.store = store
        self.logger = logger
        self.jwt = configuration.hasJWTKeys ? try await JWTAuthenticator(configuration: configuration, logger: logger) : nil
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

    /// The device a token belongs to, with the token's issue time (`PigeonError.unauthorized` for any bad token).
    func authenticate(token: String) async throws -> AuthenticatedDevice {
        guard !token.isEmpty, token.utf8.count <= 4096 else { throw PigeonError.unauthorized }
        if let jwt, !token.hasPrefix("pgn_") {
            do {
                return try await jwt.authenticate(token)
            } catch {
                logger.debug("JWT refused", metadata: ["reason": "\(error.reason)"])
                throw PigeonError.unauthorized
            }
        }
        let hash = Self.hash(token)
        if let device = cache.withLockedValue({ $0[hash] }) { return AuthenticatedDevice(device: device, issuedAt: nil) }
        guard let device = try await store.device(tokenHash: hash) else { throw PigeonError.unauthorized }
        cache.withLockedValue { cache in
            if cache.count >= cacheLimit { cache.removeAll(keepingCapacity: true) }
            cache[hash] = device
        }
        return AuthenticatedDevice(device: device, issuedAt: nil)
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
