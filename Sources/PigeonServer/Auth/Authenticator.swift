import Crypto
import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol

/// Bearer tokens: opaque ones issued at registration (stored as SHA-256 hashes, looked up per request with an
/// in-memory cache), and, when the server has a JWT key, HS256 tokens minted by the app's backend.
public final class Authenticator: Sendable {
    private let store: any MessageStore
    private let jwt: JWTVerifier?
    private let cache = NIOLockedValueBox([String: DeviceIdentity]())
    private let cacheLimit = 100_000

    init(store: any MessageStore, jwtSecret: String? = nil) {
        self.store = store
        self.jwt = jwtSecret.map { JWTVerifier(secret: $0) }
    }

    /// Registers a device of `userId` and returns its token (shown once).
    func register(userId: String, deviceName: String?) async throws -> DeviceRegistration {
        var bytes = [UInt8](repeating: 0, count: 32)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = generator.next() }
        let token = "pgn_" + Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        let device = try await store.registerDevice(userId: userId, name: deviceName, tokenHash: Self.hash(token))
        return DeviceRegistration(userId: device.userId, deviceId: device.deviceId, token: token)
    }

    /// The device a token belongs to.
    func device(token: String) async throws -> DeviceIdentity {
        guard !token.isEmpty, token.utf8.count <= 4096 else { throw PigeonError.unauthorized }
        if let jwt, !token.hasPrefix("pgn_") {
            guard let device = jwt.device(token: token) else { throw PigeonError.unauthorized }
            return device
        }
        let hash = Self.hash(token)
        if let device = cache.withLockedValue({ $0[hash] }) { return device }
        guard let device = try await store.device(tokenHash: hash) else { throw PigeonError.unauthorized }
        cache.withLockedValue { cache in
            if cache.count >= cacheLimit { cache.removeAll(keepingCapacity: true) }
            cache[hash] = device
        }
        return device
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
