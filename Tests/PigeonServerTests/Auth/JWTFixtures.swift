import Crypto
import CryptoExtras
import Foundation
import Hummingbird
import HummingbirdTesting
import JWTKit
import NIOConcurrencyHelpers
import NIOCore
import PigeonTestSupport

/// A key the tests sign device tokens with, as an identity provider or an app backend would hold it.
struct TestSigningKey: Sendable {
    /// The JWT `alg` it signs with.
    var alg: String
    /// The `kid` its tokens name (nil: none).
    var kid: String?
    /// Signs (a private key, or the HMAC secret).
    var signer: any JWTAlgorithm
    /// The public key as a PEM file would hold it (nil for HMAC).
    var publicPEM: String?
    /// The public key as a JWK (nil for HMAC).
    var jwk: JWK?

    static func hmac(_ alg: String, secret: String) async throws -> TestSigningKey {
        let key = SymmetricKey(data: Array(secret.utf8))
        let signer: any JWTAlgorithm =
            switch alg {
            case "HS256": TestHMAC<SHA256>(name: alg, key: key)
            case "HS384": TestHMAC<SHA384>(name: alg, key: key)
            default: TestHMAC<SHA512>(name: alg, key: key)
            }
        return TestSigningKey(alg: alg, kid: nil, signer: signer)
    }

    /// A new RSA key (2048 bits) signing with `alg` (RS256/384/512, PS256/384/512).
    static func rsa(_ alg: String = "RS256", kid: String? = nil) async throws -> TestSigningKey {
        let key = try JWTKit.Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
        return try await rsa(key, alg, kid: kid)
    }

    static func rsa(_ key: JWTKit.Insecure.RSA.PrivateKey, _ alg: String, kid: String? = nil) async throws -> TestSigningKey {
        let digest: DigestAlgorithm = alg.hasSuffix("256") ? .sha256 : alg.hasSuffix("384") ? .sha384 : .sha512
        let collection = JWTKeyCollection()
        if alg.hasPrefix("PS") {
            await collection.add(pss: key, digestAlgorithm: digest)
        } else {
            await collection.add(rsa: key, digestAlgorithm: digest)
        }
        let publicKey = key.publicKey
        let primitives = try publicKey.getKeyPrimitives()
        let jwk = JWK.rsa(
            JWK.Algorithm(rawValue: alg), identifier: kid.map { JWKIdentifier(string: $0) },
            modulus: base64URL(primitives.modulus), exponent: base64URL(primitives.publicExponent))
        return TestSigningKey(alg: alg, kid: kid, signer: try await collection.getKey(), publicPEM: publicKey.pemRepresentation, jwk: jwk)
    }

    static func es256(kid: String? = nil) async throws -> TestSigningKey {
        let key = ES256PrivateKey()
        let collection = JWTKeyCollection()
        await collection.add(ecdsa: key)
        let jwk = JWK.ecdsa(
            .es256, identifier: kid.map { JWKIdentifier(string: $0) }, x: key.parameters?.x, y: key.parameters?.y, curve: .p256)
        return TestSigningKey(alg: "ES256", kid: kid, signer: try await collection.getKey(), publicPEM: key.publicKey.pemRepresentation, jwk: jwk)
    }

    static func es384(kid: String? = nil) async throws -> TestSigningKey {
        let key = ES384PrivateKey()
        let collection = JWTKeyCollection()
        await collection.add(ecdsa: key)
        let jwk = JWK.ecdsa(
            .es384, identifier: kid.map { JWKIdentifier(string: $0) }, x: key.parameters?.x, y: key.parameters?.y, curve: .p384)
        return TestSigningKey(alg: "ES384", kid: kid, signer: try await collection.getKey(), publicPEM: key.publicKey.pemRepresentation, jwk: jwk)
    }

    static func ed25519(kid: String? = nil) async throws -> TestSigningKey {
        let key = try EdDSA.PrivateKey(curve: .ed25519)
        let collection = JWTKeyCollection()
        await collection.add(eddsa: key)
        let jwk = JWK.octetKeyPair(
            .eddsa, identifier: kid.map { JWKIdentifier(string: $0) }, x: base64URL(key.publicKey.rawRepresentation), y: nil,
            curve: .ed25519)
        return TestSigningKey(alg: "EdDSA", kid: kid, signer: try await collection.getKey(), publicPEM: key.publicKey.pemRepresentation, jwk: jwk)
    }

    /// A token of `claims` (JSON text, sent as is) signed by this key, its header naming `alg` and `kid`.
    func token(claims: String, header: String? = nil) throws -> String {
        let kidField = kid.map { #","kid":"\#($0)""# } ?? ""
        let header = header ?? #"{"alg":"\#(alg)","typ":"JWT"\#(kidField)}"#
        let signingInput = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        return signingInput + "." + base64URL(Data(try signer.sign(Array(signingInput.utf8))))
    }

    /// A token of `sub` = `userId`, `did` = `deviceId`, valid for an hour.
    func token(_ userId: String, _ deviceId: String) throws -> String {
        try token(claims: JWTClaimsText.valid(userId, deviceId))
    }

    /// A JWKS document of `keys`.
    static func jwks(_ keys: [TestSigningKey]) -> String {
        String(decoding: try! JSONEncoder().encode(JWKS(keys: keys.compactMap(\.jwk))), as: UTF8.self)
    }
}

/// Claims as JSON text.
enum JWTClaimsText {
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    static func valid(_ userId: String, _ deviceId: String, extra: String = "") -> String {
        #"{"sub":"\#(userId)","did":"\#(deviceId)","iat":\#(now),"exp":\#(now + 3600)\#(extra)}"#
    }
}

func base64URL(_ data: Data) -> String {
    data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// A file holding `text` in a new temporary directory.
func writeTemporaryFile(_ text: String, name: String) throws -> String {
    let path = makeTemporaryDirectory() + "/" + name
    try text.write(toFile: path, atomically: true, encoding: .utf8)
    return path
}

/// What the identity provider's JWKS endpoint serves, and how often it was asked.
final class JWKSEndpoint: Sendable {
    private struct State {
        var status = 200
        var body = ""
        var location: String?
        var fetches = 0
    }
    private let state = NIOLockedValueBox(State())

    init(_ body: String, status: Int = 200) {
        serve(body, status: status)
    }

    func serve(_ body: String, status: Int = 200) {
        state.withLockedValue {
            $0.body = body
            $0.status = status
            $0.location = nil
        }
    }

    /// Answers every fetch with a `302` to `url`.
    func redirect(to url: String) {
        state.withLockedValue {
            $0.body = ""
            $0.status = 302
            $0.location = url
        }
    }

    var fetches: Int { state.withLockedValue { $0.fetches } }

    fileprivate func answer() -> Response {
        let (status, body, location) = state.withLockedValue { state in
            state.fetches += 1
            return (state.status, state.body, state.location)
        }
        var headers: HTTPFields = [.contentType: "application/json"]
        if let location { headers[.location] = location }
        return Response(status: .init(code: status), headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    /// Runs the endpoint on a loopback HTTP server for `body`, which gets its URL.
    func run<T: Sendable>(_ body: @escaping @Sendable (String) async throws -> T) async throws -> T {
        let router = Router()
        router.get("jwks.json") { [self] _, _ in self.answer() }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        return try await app.test(.live) { client in
            try await body("http://127.0.0.1:\(client.port!)/jwks.json")
        }
    }
}

/// HMAC with a secret of any length (jwt-kit's signer asserts on short ones in debug builds).
struct TestHMAC<H: HashFunction>: JWTAlgorithm {
    let name: String
    let key: SymmetricKey

    func sign(_ plaintext: some DataProtocol) throws -> [UInt8] { Array(HMAC<H>.authenticationCode(for: plaintext, using: key)) }

    func verify(_ signature: some DataProtocol, signs plaintext: some DataProtocol) throws -> Bool {
        HMAC<H>.isValidAuthenticationCode(Array(signature), authenticating: plaintext, using: key)
    }
}
