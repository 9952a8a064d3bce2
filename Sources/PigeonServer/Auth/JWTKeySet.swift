import Crypto
import Foundation
import JWTKit
import PigeonDomain
import PigeonProtocol

/// One key that verifies JWT signatures of exactly one algorithm (a key usable with several algorithms, an HMAC
/// secret or an RSA key, is one of these per algorithm: a token's `alg` only ever reaches keys of that algorithm).
struct JWTVerificationKey: Sendable {
    /// The `kid` tokens name it by; `nil` for the configured secret and PEM keys.
    var kid: String?
    /// The jwt-kit algorithm (its `name` is the JWT `alg` it verifies).
    var algorithm: any JWTAlgorithm

    var alg: String { algorithm.name }

    /// Whether `signature` is this key's signature of `signingInput` (never throws: a malformed signature is
    /// simply not valid).
    func verifies(_ signature: [UInt8], signs signingInput: ArraySlice<UInt8>) -> Bool {
        (try? algorithm.verify(signature, signs: signingInput)) == true
    }
}

/// Builds verification keys from the configured sources with jwt-kit.
enum JWTKeys {
    /// Every `alg` Pigeon accepts; any other (`none` included) is refused before a key is looked at.
    static let supportedAlgorithms: Set<String> = [
        "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
    ]
    private static let rsaAlgorithms = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
    /// The most keys one JWKS may hold.
    static let maxJWKSKeys = 100

    /// HS256, HS384 and HS512 keys of a shared secret.
    static func hmac(secret: String) -> [JWTVerificationKey] {
        let key = SymmetricKey(data: Array(secret.utf8))
        return [
            JWTVerificationKey(kid: nil, algorithm: HMACAlgorithm<SHA256>(name: "HS256", key: key)),
            JWTVerificationKey(kid: nil, algorithm: HMACAlgorithm<SHA384>(name: "HS384", key: key)),
            JWTVerificationKey(kid: nil, algorithm: HMACAlgorithm<SHA512>(name: "HS512", key: key)),
        ]
    }

    /// The keys of a PEM public key: RSA (RS256/384/512, PS256/384/512), EC P-256 (ES256), EC P-384 (ES384) or
    /// Ed25519 (EdDSA). `source` names the file in the error.
    static func publicKey(pem: String, source: String) async throws -> [JWTVerificationKey] {
        let collection = JWTKeyCollection()
        if let key = try? Insecure.RSA.PublicKey(pem: pem) {
            var keys: [JWTVerificationKey] = []
            for digest in [DigestAlgorithm.sha256, .sha384, .sha512] {
                for pss in [false, true] {
                    let collection = JWTKeyCollection()
                    if pss {
                        await collection.add(pss: key, digestAlgorithm: digest)
                    } else {
                        await collection.add(rsa: key, digestAlgorithm: digest)
                    }
                    keys.append(JWTVerificationKey(kid: nil, algorithm: try await collection.getKey()))
                }
            }
            return keys
        } else if let key = try? ES256PublicKey(pem: pem) {
            await collection.add(ecdsa: key)
        } else if let key = try? ES384PublicKey(pem: pem) {
            await collection.add(ecdsa: key)
        } else if let key = try? EdDSA.PublicKey(pem: pem) {
            await collection.add(eddsa: key)
        } else {
            throw PigeonError.invalid(
                "\(source) is not a PEM public key of a supported kind (\"-----BEGIN PUBLIC KEY-----\": RSA of 2048 bits or more, EC P-256, EC P-384 or Ed25519)"
            )
        }
        return [JWTVerificationKey(kid: nil, algorithm: try await collection.getKey())]
    }

    /// The keys of a JWKS document. Keys Pigeon cannot use (encryption keys, other curves or algorithms, no
    /// `kid`) are skipped and named in `skipped`; a document that is not a JWKS, or holds no usable key, is an
    /// error (so a refresh that gets one keeps the last good set).
    static func jwks(_ data: Data, source: String) async throws -> (keys: [JWTVerificationKey], skipped: [String]) {
        let document: JWKSDocument
        do {
            document = try JSONDecoder().decode(JWKSDocument.self, from: data)
        } catch {
            throw PigeonError.invalid("\(source) is not a JWKS document (a JSON object with a \"keys\" array)")
        }
        guard document.keys.count <= maxJWKSKeys else {
            throw PigeonError.invalid("\(source) holds \(document.keys.count) keys; at most \(maxJWKSKeys) are accepted")
        }
        var keys: [JWTVerificationKey] = []
        var skipped: [String] = []
        for (index, entry) in document.keys.enumerated() {
            let name = entry.kid.map { "kid \($0)" } ?? "key \(index)"
            guard var jwk = entry.jwk else {
                skipped.append("\(name): not a key of type RSA, EC or OKP")
                continue
            }
            guard let kid = jwk.keyIdentifier?.string, !kid.isEmpty else {
                skipped.append("\(name): no kid")
                continue
            }
            guard entry.use == nil || entry.use == "sig" else {
                skipped.append("\(name): use is not sig")
                continue
            }
            jwk.privateExponent = nil
            jwk.prime1 = nil
            jwk.prime2 = nil
            let algorithms: [String]
            if let declared = jwk.algorithm?.rawValue {
                algorithms = supportedAlgorithms.contains(declared) ? [declared] : []
            } else if jwk.keyType == .rsa {
                algorithms = rsaAlgorithms
            } else if jwk.keyType == .ecdsa {
                algorithms = jwk.curve?.rawValue == "P-256" ? ["ES256"] : jwk.curve?.rawValue == "P-384" ? ["ES384"] : []
            } else {
                algorithms = jwk.curve?.rawValue == "Ed25519" ? ["EdDSA"] : []
            }
            var usable = 0
            for alg in algorithms {
                guard let algorithm = JWK.Algorithm(rawValue: alg) else { continue }
                jwk.algorithm = algorithm
                let collection = JWTKeyCollection()
                guard (try? await collection.add(jwk: jwk)) != nil,
                    let key = try? await collection.getKey(for: JWKIdentifier(string: kid), alg: alg),
                    key.name == alg
                else { continue }
                keys.append(JWTVerificationKey(kid: kid, algorithm: key))
                usable += 1
            }
            if usable == 0 { skipped.append("\(name): no supported algorithm or malformed key") }
        }
        guard !keys.isEmpty else {
            throw PigeonError.invalid("\(source) holds no usable signing key (\(skipped.joined(separator: "; ")))")
        }
        return (keys, skipped)
    }
}

/// A JWKS document whose keys are decoded one by one (an unusable key is skipped, not a reason to refuse the set).
private struct JWKSDocument: Decodable {
    var keys: [Entry]

    struct Entry: Decodable {
        var jwk: JWK?
        var kid: String?
        var use: String?

        private enum CodingKeys: String, CodingKey {
            case kid, use
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.jwk = try? JWK(from: decoder)
            self.kid = try? container.decodeIfPresent(String.self, forKey: .kid)
            self.use = try? container.decodeIfPresent(String.self, forKey: .use)
        }
    }
}

/// HMAC signatures with a secret of any length (jwt-kit's HMAC signer asserts, in debug builds, on a secret shorter
/// than the hash; RFC 7518 wants it at least that long, which the server warns about at start). Compared in
/// constant time.
private struct HMACAlgorithm<H: HashFunction>: JWTAlgorithm {
    let name: String
    let key: SymmetricKey

    func sign(_ plaintext: some DataProtocol) throws -> [UInt8] {
        Array(HMAC<H>.authenticationCode(for: plaintext, using: key))
    }

    func verify(_ signature: some DataProtocol, signs plaintext: some DataProtocol) throws -> Bool {
        HMAC<H>.isValidAuthenticationCode(Array(signature), authenticating: plaintext, using: key)
    }
}
