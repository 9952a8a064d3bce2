import Foundation
import PigeonDomain
import PigeonProtocol

/// Why a JWT was refused (logged at debug level; the client only ever sees `401 unauthorized`). Never holds the
/// token or a claim's value.
struct JWTRejection: Error, Sendable {
    var reason: String

    init(_ reason: String) { self.reason = reason }
}

/// A compact-serialised JWS, split and decoded strictly (base64url without padding, a JSON object header naming
/// its `alg`). The payload is only decoded once a key has verified the signature.
struct JWTCompactToken: Sendable {
    let alg: String
    let kid: String?
    let signingInput: ArraySlice<UInt8>
    let signature: [UInt8]
    private let payload: Data

    init(_ token: String) throws(JWTRejection) {
        let bytes = Array(token.utf8)
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, !parts[2].isEmpty,
            let headerData = Self.base64URLDecode(parts[0]),
            let payload = Self.base64URLDecode(parts[1]),
            let signature = Self.base64URLDecode(parts[2])
        else { throw JWTRejection("not a compact JWS (three base64url parts)") }
        struct Header: Decodable {
            var alg: String
            var kid: String?
            var crit: JSONValue?
        }
        guard let header = try? JSONDecoder().decode(Header.self, from: headerData) else {
            throw JWTRejection("header is not a JSON object with a string alg (and a string kid, if any)")
        }
        guard JWTKeys.supportedAlgorithms.contains(header.alg) else { throw JWTRejection("alg \(header.alg.prefix(16)) is not accepted") }
        guard header.crit == nil else { throw JWTRejection("header has crit extensions") }
        self.alg = header.alg
        self.kid = header.kid
        self.signingInput = bytes[..<(parts[0].count + 1 + parts[1].count)]
        self.signature = Array(signature)
        self.payload = payload
    }

    /// The claims (call only after the signature is verified).
    func claims() throws(JWTRejection) -> [String: JSONValue] {
        guard let claims = try? JSONDecoder().decode([String: JSONValue].self, from: payload) else {
            throw JWTRejection("payload is not a JSON object")
        }
        return claims
    }

    /// Base64url without padding (RFC 7515); anything else is `nil`.
    static func base64URLDecode(_ text: ArraySlice<UInt8>) -> Data? {
        guard text.count % 4 != 1 else { return nil }
        var base64 = [UInt8]()
        base64.reserveCapacity(text.count + 3)
        for byte in text {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                base64.append(byte)
            case UInt8(ascii: "-"): base64.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): base64.append(UInt8(ascii: "/"))
            default: return nil
            }
        }
        while base64.count % 4 != 0 { base64.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(base64))
    }
}

/// What a verified token's claims must say (configured by ``AuthConfiguration``).
struct JWTClaimRules: Sendable {
    var userClaim: String
    var deviceClaim: String
    var issuer: String?
    var audiences: Set<String>
    /// Seconds.
    var maxLifetime: Int64
    /// Seconds.
    var leeway: Int64

    /// The latest date accepted, 9999-12-31T23:59:59Z, in seconds since 1970.
    static let latestDate: Double = 253_402_300_799

    init(_ configuration: AuthConfiguration) {
        self.userClaim = configuration.jwtUserClaim
        self.deviceClaim = configuration.jwtDeviceClaim
        self.issuer = configuration.jwtIssuer
        self.audiences = Set(configuration.jwtAudiences)
        self.maxLifetime = configuration.jwtMaxLifetime.components.seconds
        self.leeway = configuration.jwtLeeway.components.seconds
    }

    /// The device the claims name, when every check passes at `now` (seconds since 1970).
    func device(claims: [String: JSONValue], now: Int64) throws(JWTRejection) -> AuthenticatedDevice {
        let issuedAt = try checkTimesAndAudience(claims: claims, now: now)
        guard case .string(let userId) = claims[userClaim], Validation.isValidUserId(userId) else {
            throw JWTRejection("claim \(userClaim) is not a valid userId")
        }
        guard case .string(let deviceId) = claims[deviceClaim], Self.isValidDeviceId(deviceId) else {
            throw JWTRejection("claim \(deviceClaim) is not a valid deviceId")
        }
        return AuthenticatedDevice(device: DeviceIdentity(userId: userId, deviceId: deviceId), issuedAt: issuedAt)
    }

    /// Whether the claims make a service credential of the server API (API.md 1.2): `"pigeon_role": "service"` and no
    /// device claim, every time, issuer and audience check passing at `now`. A token with a device claim is a device's
    /// whatever its role (``device(claims:now:)``).
    func isService(claims: [String: JSONValue], now: Int64) throws(JWTRejection) -> Bool {
        _ = try checkTimesAndAudience(claims: claims, now: now)
        return claims["pigeon_role"] == .string("service") && claims[deviceClaim] == nil
    }

    /// `exp` (required), `nbf`, `iat`, the lifetime, `iss` and `aud`; answers `iat`.
    private func checkTimesAndAudience(claims: [String: JSONValue], now: Int64) throws(JWTRejection) -> Int64? {
        guard let expiry = try date("exp", in: claims) else { throw JWTRejection("no exp") }
        let notBefore = try date("nbf", in: claims)
        let issuedAt = try date("iat", in: claims)
        guard expiry + leeway > now else { throw JWTRejection("expired") }
        if let notBefore, notBefore - leeway > now { throw JWTRejection("not valid yet (nbf)") }
        if let issuedAt, issuedAt - leeway > now { throw JWTRejection("issued in the future (iat)") }
        guard expiry - (issuedAt ?? now) <= maxLifetime else { throw JWTRejection("lifetime over the maximum of \(maxLifetime) s") }
        if let issuer, claims["iss"] != .string(issuer) { throw JWTRejection("iss is not the configured issuer") }
        if !audiences.isEmpty {
            let audience: [JSONValue] =
                switch claims["aud"] {
                case .string(let value): [.string(value)]
                case .array(let values): values
                default: []
                }
            guard audience.contains(where: { if case .string(let value) = $0 { audiences.contains(value) } else { false } }) else {
                throw JWTRejection("aud names none of the configured audiences")
            }
        }
        return issuedAt
    }

    /// A NumericDate claim in whole seconds: absent is `nil`; present, it must be a finite number from 0 to the
    /// year 9999.
    private func date(_ name: String, in claims: [String: JSONValue]) throws(JWTRejection) -> Int64? {
        guard let claim = claims[name] else { return nil }
        guard case .number(let value) = claim, value.isFinite, value >= 0, value <= Self.latestDate else {
            throw JWTRejection("\(name) is not a date from 1970 to 9999")
        }
        return Int64(value.rounded(.down))
    }

    /// A device id from a token: 1–128 printable ASCII characters without spaces.
    static func isValidDeviceId(_ value: String) -> Bool {
        (1...128).contains(value.utf8.count) && value.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }
}
