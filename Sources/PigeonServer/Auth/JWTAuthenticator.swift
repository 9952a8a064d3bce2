import Foundation
import Logging
import PigeonDomain
import PigeonProtocol

/// Verifies JWTs against the configured keys (a secret, PEM public keys, a JWKS) and checks their claims.
///
/// A token's `alg` picks the keys (only keys of that algorithm are tried, so an HS256 token can never be checked
/// with an RSA public key's bytes as its HMAC secret). A token naming a `kid` the JWKS holds is checked against
/// that key only; a `kid` it does not hold is tried against the configured secret and PEM keys, then, after a
/// JWKS refresh (``JWKSKeySource/refreshForUnknownKid()``), against the new set. A token without `kid` is tried
/// against every key of its algorithm.
final class JWTAuthenticator: Sendable {
    private let configuredKeys: [JWTVerificationKey]
    let jwks: JWKSKeySource?
    private let rules: JWTClaimRules

    init(configuration: AuthConfiguration, logger: Logger, clock: any Clock<Duration> = ContinuousClock()) async throws {
        var keys: [JWTVerificationKey] = []
        if let secret = configuration.jwtSecret {
            guard !secret.isEmpty else { throw PigeonError.invalid("the JWT secret must not be empty") }
            if secret.utf8.count < 32 { logger.warning("the JWT secret is shorter than 32 bytes; RFC 7518 wants at least the hash's size") }
            keys += JWTKeys.hmac(secret: secret)
        }
        for path in configuration.jwtPublicKeyFiles {
            guard let data = FileManager.default.contents(atPath: path), data.count <= 1 << 20 else {
                throw PigeonError.invalid("the JWT public key file \(path) cannot be read")
            }
            keys += try await JWTKeys.publicKey(pem: String(decoding: data, as: UTF8.self), source: "the JWT public key file \(path)")
        }
        self.configuredKeys = keys
        if let text = configuration.jwtJWKS {
            let source = JWKSKeySource(location: try JWKSKeySource.Location(text), configuration: configuration, logger: logger, clock: clock)
            try await source.loadFile()
            self.jwks = source
        } else {
            self.jwks = nil
        }
        self.rules = JWTClaimRules(configuration)
    }

    /// The device a valid token names.
    func authenticate(_ text: String) async throws(JWTRejection) -> AuthenticatedDevice {
        let token = try JWTCompactToken(text)
        guard try await verify(token) else { throw JWTRejection("no key of \(token.alg) verifies the signature") }
        return try rules.device(claims: token.claims(), now: Int64(Date().timeIntervalSince1970))
    }

    /// Whether a valid token is a service credential of the server API (``JWTClaimRules/isService(claims:now:)``).
    func isService(_ text: String) async throws(JWTRejection) -> Bool {
        let token = try JWTCompactToken(text)
        guard try await verify(token) else { throw JWTRejection("no key of \(token.alg) verifies the signature") }
        return try rules.isService(claims: token.claims(), now: Int64(Date().timeIntervalSince1970))
    }

    private func verify(_ token: JWTCompactToken) async throws(JWTRejection) -> Bool {
        let ofAlgorithm = configuredKeys.filter { $0.alg == token.alg }
        guard let kid = token.kid else {
            return (ofAlgorithm + (jwks?.keys ?? []).filter { $0.alg == token.alg }).contains { $0.verifies(token.signature, signs: token.signingInput) }
        }
        if let named = jwks?.keys.filter({ $0.kid == kid }), !named.isEmpty {
            return named.contains { $0.alg == token.alg && $0.verifies(token.signature, signs: token.signingInput) }
        }
        if ofAlgorithm.contains(where: { $0.verifies(token.signature, signs: token.signingInput) }) { return true }
        guard let jwks else { return false }
        guard await jwks.refreshForUnknownKid() else { throw JWTRejection("kid unknown (JWKS not refreshed: fetched too recently or failed)") }
        let named = jwks.keys.filter { $0.kid == kid && $0.alg == token.alg }
        guard !named.isEmpty else { throw JWTRejection("kid unknown after a JWKS refresh") }
        return named.contains { $0.verifies(token.signature, signs: token.signingInput) }
    }
}
