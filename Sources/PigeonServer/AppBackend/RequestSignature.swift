import Crypto
import Foundation

/// The signature of every request the server makes to the app's backend (webhook events and the before-send hook,
/// API.md 1.2): `Pigeon-Signature: t=<ms>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`. The timestamp is inside
/// the signed text, so a receiver that refuses old timestamps also refuses replays.
public enum RequestSignature {
    public static let headerName = "Pigeon-Signature"

    /// The header's value for `body` sent at `timestamp` (milliseconds since the epoch).
    public static func header(secret: String, timestamp: Int64, body: some DataProtocol) -> String {
        "t=\(timestamp),v1=\(hex(secret: secret, timestamp: timestamp, body: body))"
    }

    /// Whether `header` is a valid signature of `body` under `secret` (constant-time comparison of the digest).
    public static func verify(header: String, secret: String, body: some DataProtocol) -> Bool {
        var timestamp: Int64?
        var signatures: [String] = []
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { continue }
            if pair[0] == "t" { timestamp = Int64(pair[1]) } else if pair[0] == "v1" { signatures.append(pair[1]) }
        }
        guard let timestamp else { return false }
        let expected = Array(hex(secret: secret, timestamp: timestamp, body: body).utf8)
        return signatures.contains { candidate in
            let bytes = Array(candidate.utf8)
            guard bytes.count == expected.count else { return false }
            return zip(bytes, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }

    private static func hex(secret: String, timestamp: Int64, body: some DataProtocol) -> String {
        var hmac = HMAC<SHA256>(key: SymmetricKey(data: Data(secret.utf8)))
        hmac.update(data: Data("\(timestamp).".utf8))
        hmac.update(data: body)
        return hmac.finalize().map { String(format: "%02x", $0) }.joined()
    }
}
