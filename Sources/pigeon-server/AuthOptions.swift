import ArgumentParser
import Foundation
import PigeonServer

/// `pigeon-server serve` options of device tokens (JWT keys and claims).
struct AuthOptions: ParsableArguments {
    @Option(name: .customLong("jwt-secret"), help: "HMAC key (HS256/384/512) of your backend's device tokens (better: PIGEON_JWT_SECRET).")
    var jwtSecret: String?

    @Option(
        name: .customLong("jwt-public-key"),
        help: ArgumentHelp("PEM public key file (RSA, EC P-256/P-384, Ed25519) that signs device tokens; repeatable (also PIGEON_JWT_PUBLIC_KEY).", valueName: "file"))
    var jwtPublicKeys: [String] = []

    @Option(
        name: .customLong("jwt-jwks"),
        help: ArgumentHelp("JWKS of your identity provider: a file or an http(s) URL (also PIGEON_JWT_JWKS).", valueName: "file-or-url"))
    var jwtJWKS: String?

    @Option(name: .customLong("jwt-jwks-refresh"), help: "Time between JWKS fetches: seconds, or with s, m or h (default 5m).")
    var jwtJWKSRefresh: String?

    @Option(name: .customLong("jwt-jwks-min-refresh"), help: "Least time between the JWKS fetches an unknown kid triggers (default 30s).")
    var jwtJWKSMinimumRefresh: String?

    @Option(name: .customLong("jwt-user-claim"), help: "Claim holding the userId (default sub).")
    var jwtUserClaim: String?

    @Option(name: .customLong("jwt-device-claim"), help: "Claim holding the deviceId (default did).")
    var jwtDeviceClaim: String?

    @Option(name: .customLong("jwt-issuer"), help: "Required iss of device tokens (default: not checked).")
    var jwtIssuer: String?

    @Option(name: .customLong("jwt-audience"), help: "Accepted aud of device tokens; repeatable (default: not checked).")
    var jwtAudiences: [String] = []

    @Option(name: .customLong("jwt-max-lifetime"), help: "Longest accepted token lifetime, exp - iat: seconds, or with s, m or h (default 24h).")
    var jwtMaxLifetime: String?

    func apply(to configuration: inout ServerConfiguration, environment: [String: String]) throws {
        configuration.auth.jwtSecret = jwtSecret ?? environment["PIGEON_JWT_SECRET"]
        if configuration.auth.jwtSecret?.isEmpty == true { throw ValidationError("the JWT key must not be empty") }
        let publicKeys = jwtPublicKeys.isEmpty ? environment["PIGEON_JWT_PUBLIC_KEY"].map { [$0] } ?? [] : jwtPublicKeys
        for path in publicKeys where !FileManager.default.isReadableFile(atPath: path) {
            throw ValidationError("--jwt-public-key: cannot read \(path)")
        }
        configuration.auth.jwtPublicKeyFiles = publicKeys
        if let jwks = jwtJWKS ?? environment["PIGEON_JWT_JWKS"] {
            let lowercased = jwks.lowercased()
            if lowercased.hasPrefix("http://") || lowercased.hasPrefix("https://") {
                guard let url = URL(string: jwks), url.host?.isEmpty == false else { throw ValidationError("--jwt-jwks: \(jwks) is not a valid URL") }
            } else if jwks.contains("://") {
                throw ValidationError("--jwt-jwks: \(jwks) is neither an http(s) URL nor a file")
            } else if !FileManager.default.isReadableFile(atPath: jwks) {
                throw ValidationError("--jwt-jwks: cannot read \(jwks)")
            }
            configuration.auth.jwtJWKS = jwks
        }
        if let jwtJWKSRefresh {
            configuration.auth.jwtJWKSRefreshInterval = .seconds(try Self.seconds(jwtJWKSRefresh, option: "--jwt-jwks-refresh", in: 1...86_400))
        }
        if let jwtJWKSMinimumRefresh {
            configuration.auth.jwtJWKSMinimumRefreshInterval = .seconds(
                try Self.seconds(jwtJWKSMinimumRefresh, option: "--jwt-jwks-min-refresh", in: 1...86_400))
        }
        for (option, claim) in [("--jwt-user-claim", jwtUserClaim), ("--jwt-device-claim", jwtDeviceClaim)] {
            guard let claim else { continue }
            guard !claim.isEmpty, claim.count <= 64 else { throw ValidationError("\(option) must be 1-64 characters") }
        }
        if let jwtUserClaim { configuration.auth.jwtUserClaim = jwtUserClaim }
        if let jwtDeviceClaim { configuration.auth.jwtDeviceClaim = jwtDeviceClaim }
        if let jwtIssuer {
            guard !jwtIssuer.isEmpty else { throw ValidationError("--jwt-issuer must not be empty") }
            configuration.auth.jwtIssuer = jwtIssuer
        }
        if jwtAudiences.contains(where: \.isEmpty) { throw ValidationError("--jwt-audience must not be empty") }
        configuration.auth.jwtAudiences = jwtAudiences
        if let jwtMaxLifetime {
            configuration.auth.jwtMaxLifetime = .seconds(try Self.seconds(jwtMaxLifetime, option: "--jwt-max-lifetime", in: 60...365 * 86_400))
        }
    }

    /// Whole seconds from `300`, `300s`, `5m` or `24h`, within `range`.
    static func seconds(_ text: String, option: String, in range: ClosedRange<Int64>) throws -> Int64 {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600]
        let unit = text.last.flatMap { units[$0] }
        let number = unit == nil ? Substring(text) : text.dropLast()
        guard let value = Int64(number), value >= 0, value <= range.upperBound, range.contains(value * (unit ?? 1)) else {
            throw ValidationError("\(option) must be a duration from \(range.lowerBound) to \(range.upperBound) seconds (e.g. 300, 90s, 5m, 24h), not '\(text)'")
        }
        return value * (unit ?? 1)
    }
}
