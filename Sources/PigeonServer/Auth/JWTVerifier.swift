import Crypto
import Foundation
import PigeonProtocol

/// Verifies the HS256 JSON Web Tokens an app's backend mints for its devices (API.md, "Devices and auth"):
/// `sub` = userId, `did` = deviceId, `exp` honoured (and `nbf` when present).
///
/// Only HS256 is accepted; any other `alg` (`none` included) is refused, and the signature is compared in
/// constant time. (jwt-kit would need swift-crypto 4 while the project is on 3; HS256 alone is this small.)
struct JWTVerifier: Sendable {
    private let secret: [UInt8]
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    private let leeway: Int64

    init(secret: String, leeway: Int64 = 30) {
        self.secret = Array(secret.utf8)
        self.leeway = leeway
    }

    /// The device a token names, or `nil` when it is not a valid, current HS256 token of this key.
    func device(token: String, now: Int64 = Int64(Date().timeIntervalSince1970)) -> DeviceIdentity? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerData = Self.base64URLDecode(parts[0]),
            let payloadData = Self.base64URLDecode(parts[1]),
            let signature = Self.base64URLDecode(parts[2])
        else { return nil }
        struct Header: Decodable { var alg: String }
        struct Claims: Decodable {
            var sub: String
            var did: String
            var exp: Double
            var nbf: Double?
        }
        guard let header = try? JSONDecoder().decode(Header.self, from: headerData), header.alg == "HS256" else { return nil }
        let signed = Data("\(parts[0]).\(parts[1])".utf8)
        let key = SymmetricKey(data: secret)
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signed, using: key) else { return nil }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: payloadData),
            Validation.isValidUserId(claims.sub),
            Self.isValidDeviceId(claims.did),
            Int64(claims.exp) + leeway > now,
            claims.nbf.map({ Int64($0) - leeway <= now }) ?? true
        else { return nil }
        return DeviceIdentity(userId: claims.sub, deviceId: claims.did)
    }

    /// A device id from a token: 1–128 printable ASCII characters without spaces.
    static func isValidDeviceId(_ value: String) -> Bool {
        (1...128).contains(value.utf8.count) && value.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
