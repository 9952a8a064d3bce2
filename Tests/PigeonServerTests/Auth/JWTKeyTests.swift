import CryptoExtras
import Foundation
import JWTKit
import PigeonProtocol
import PigeonServer
import Testing
import PigeonTestSupport

/// Device tokens signed with every accepted algorithm, from a secret and PEM public key files; tokens that must be
/// refused (algorithm, key, claims, out-of-range dates) get 401 and change nothing.
@Suite struct JWTKeyTests {
    static let secret = "backend-shared-secret"

    /// A server with the HMAC secret and a PEM file of each public key.
    static func configure(_ keys: [TestSigningKey], extra: @escaping @Sendable (inout AuthConfiguration) -> Void = { _ in })
        throws -> (inout ServerConfiguration) -> Void
    {
        let files = try keys.compactMap(\.publicPEM).enumerated().map { try writeTemporaryFile($1, name: "key\($0).pem") }
        return { configuration in
            configuration.auth.jwtSecret = secret
            configuration.auth.jwtPublicKeyFiles = files
            extra(&configuration.auth)
        }
    }

    @Test func aTokenOfEveryAlgorithmIsAccepted() async throws {
        let rsa = try JWTKit.Insecure.RSA.PrivateKey(backing: .init(keySize: .bits2048))
        var keys: [TestSigningKey] = []
        for alg in ["HS256", "HS384", "HS512"] { keys.append(try await .hmac(alg, secret: Self.secret)) }
        for alg in ["RS256", "RS384", "RS512", "PS256"] { keys.append(try await .rsa(rsa, alg)) }
        keys += [try await .es256(), try await .es384(), try await .ed25519()]
        let signers = keys
        try await withTestServer(configure: try Self.configure([keys[3], keys[7], keys[8], keys[9]])) { client in
            for key in signers {
                let device = TestDevice(userId: "alice", deviceId: "d-\(key.alg)", token: try key.token("alice", "d-\(key.alg)"))
                let answer = try await client.request(.GET, "/v1/conversations", token: device.token)
                #expect(answer.status == 200, "\(key.alg): \(answer.status) \(answer.text)")
            }
            let alice = TestDevice(userId: "alice", deviceId: "phone", token: try signers[9].token("alice", "phone"))
            let conversation = try await client.createConversation(alice, members: ["bob"])
            #expect(try await client.send(alice, to: conversation.id, body: "EdDSA-signed").status == 202)
        }
    }

    @Test func algorithmKeyAndSignatureMisuseIsRefused() async throws {
        let rsa = try await TestSigningKey.rsa()
        let otherRSA = try await TestSigningKey.rsa()
        let ec = try await TestSigningKey.es256()
        try await withTestServer(configure: try Self.configure([rsa, ec])) { client in
            let claims = JWTClaimsText.valid("alice", "d")
            let valid = try rsa.token(claims: claims)
            let parts = valid.split(separator: ".").map(String.init)
            // HS256 keyed with the RSA public key's PEM bytes: the classic algorithm confusion.
            let confused = try await TestSigningKey.hmac("HS256", secret: rsa.publicPEM!).token(claims: claims)
            let confusedDER = try await TestSigningKey.hmac("HS256", secret: rsa.publicPEM!.replacingOccurrences(of: "\n", with: ""))
                .token(claims: claims)
            let noneHeader = base64URL(Data(#"{"alg":"none","typ":"JWT"}"#.utf8))
            let bad: [(String, String)] = [
                ("alg none, no signature", noneHeader + "." + parts[1] + "."),
                ("alg none, the RSA signature", noneHeader + "." + parts[1] + "." + parts[2]),
                ("alg None", base64URL(Data(#"{"alg":"None"}"#.utf8)) + "." + parts[1] + "."),
                ("HS256 keyed with the RSA public key PEM", confused),
                ("HS256 keyed with the RSA public key PEM, one line", confusedDER),
                ("RS256 signature under an ES256 header", base64URL(Data(#"{"alg":"ES256"}"#.utf8)) + "." + parts[1] + "." + parts[2]),
                ("RS256 signature under an RS512 header", base64URL(Data(#"{"alg":"RS512"}"#.utf8)) + "." + parts[1] + "." + parts[2]),
                ("alg ES512 (not accepted)", try await TestSigningKey.rsa("RS256").token(claims: claims, header: #"{"alg":"ES512"}"#)),
                ("another RSA key", try otherRSA.token(claims: claims)),
                ("another RSA key, a kid the server does not know", try TestSigningKey(alg: "RS256", kid: "nope", signer: otherRSA.signer).token(claims: claims)),
                ("tampered payload", parts[0] + "." + base64URL(Data(JWTClaimsText.valid("mallory", "d").utf8)) + "." + parts[2]),
                ("truncated signature", parts[0] + "." + parts[1] + "." + parts[2].dropLast(4)),
                ("padded base64", parts[0] + "=." + parts[1] + "." + parts[2]),
                ("crit header", try rsa.token(claims: claims, header: #"{"alg":"RS256","crit":["exp"]}"#)),
                ("four parts", valid + ".x"),
            ]
            try await Self.expectRefused(bad, client: client)
            #expect(try await client.request(.GET, "/v1/conversations", token: valid).status == 200)
        }
    }

    @Test func claimsAreChecked() async throws {
        let key = try await TestSigningKey.es256()
        let configure = try Self.configure([key]) { auth in
            auth.jwtIssuer = "https://idp.example"
            auth.jwtAudiences = ["pigeon", "pigeon-staging"]
            auth.jwtMaxLifetime = .seconds(3600)
        }
        try await withTestServer(configure: configure) { client in
            let now = JWTClaimsText.now
            func claims(_ fields: String) -> String { #"{"sub":"alice","did":"d",\#(fields)}"# }
            let good = #""iss":"https://idp.example","aud":["other","pigeon"]"#
            let bad: [(String, String)] = [
                ("expired", try key.token(claims: claims(#"\#(good),"iat":\#(now - 3600),"exp":\#(now - 60)"#))),
                ("no exp", try key.token(claims: claims(#"\#(good),"iat":\#(now)"#))),
                ("not yet valid", try key.token(claims: claims(#"\#(good),"nbf":\#(now + 600),"exp":\#(now + 1200)"#))),
                ("issued in the future", try key.token(claims: claims(#"\#(good),"iat":\#(now + 600),"exp":\#(now + 1200)"#))),
                ("lifetime over the maximum", try key.token(claims: claims(#"\#(good),"iat":\#(now - 10),"exp":\#(now + 3700)"#))),
                ("lifetime over the maximum, no iat", try key.token(claims: claims(#"\#(good),"exp":\#(now + 3700)"#))),
                ("wrong iss", try key.token(claims: claims(#""iss":"https://evil.example","aud":"pigeon","exp":\#(now + 600)"#))),
                ("no iss", try key.token(claims: claims(#""aud":"pigeon","exp":\#(now + 600)"#))),
                ("wrong aud", try key.token(claims: claims(#""iss":"https://idp.example","aud":"other","exp":\#(now + 600)"#))),
                ("wrong aud array", try key.token(claims: claims(#""iss":"https://idp.example","aud":["a","b"],"exp":\#(now + 600)"#))),
                ("no aud", try key.token(claims: claims(#""iss":"https://idp.example","exp":\#(now + 600)"#))),
                ("sub not a string", try key.token(claims: #"{"sub":42,"did":"d",\#(good),"exp":\#(now + 600)}"#)),
                ("did with a space", try key.token(claims: #"{"sub":"alice","did":"my phone",\#(good),"exp":\#(now + 600)}"#)),
            ]
            try await Self.expectRefused(bad, client: client)
            for fields in [#"\#(good),"iat":\#(now),"exp":\#(now + 3600)"#, #""iss":"https://idp.example","aud":"pigeon-staging","exp":\#(now + 600)"#] {
                let answer = try await client.request(.GET, "/v1/conversations", token: try key.token(claims: claims(fields)))
                #expect(answer.status == 200, "\(fields): \(answer.text)")
            }
        }
    }

    /// The hand-written verifier trapped (killed the process) on `exp` 1e19 and `nbf` -9.3e18.
    @Test func outOfRangeDatesAre401AndTheServerKeepsAnswering() async throws {
        let key = try await TestSigningKey.hmac("HS256", secret: Self.secret)
        try await withTestServer(configure: try Self.configure([])) { client in
            let now = JWTClaimsText.now
            let dates = [
                #""exp":1e19"#, #""exp":\#(now + 60),"nbf":-9.3e18"#, #""exp":9.3e18"#, #""exp":-9.3e18"#, #""exp":1e400"#,
                #""exp":1e308"#, #""exp":"\#(now + 60)""#, #""exp":null"#, #""exp":[\#(now + 60)]"#, #""exp":true"#,
                #""exp":\#(now + 60),"iat":1e19"#, #""exp":\#(now + 60),"iat":-1e19"#, #""exp":\#(now + 60),"nbf":1e-400"#,
                #""exp":253402300800"#, #""exp":\#(now + 60),"iat":-1"#, #""exp":1e999999999"#,
            ]
            let bad = try dates.map { ($0, try key.token(claims: #"{"sub":"alice","did":"d",\#($0)}"#)) }
            try await Self.expectRefused(bad, client: client)
            #expect(try await client.request(.GET, "/healthz").status == 200)
            #expect(try await client.request(.GET, "/v1/conversations", token: try key.token("alice", "d")).status == 200)
        }
    }

    @Test func theUserAndDeviceClaimsAreConfigurable() async throws {
        let key = try await TestSigningKey.ed25519()
        try await withTestServer(configure: try Self.configure([key]) { $0.jwtUserClaim = "uid"; $0.jwtDeviceClaim = "device" }) { client in
            let now = JWTClaimsText.now
            let custom = try key.token(claims: #"{"sub":"ignored id","uid":"alice","device":"tablet","exp":\#(now + 600)}"#)
            let alice = TestDevice(userId: "alice", deviceId: "tablet", token: custom)
            let conversation = try await client.createConversation(alice, members: ["bob"])
            #expect(conversation.members.map(\.userId).contains("alice"))
            try await Self.expectRefused([("sub and did only", try key.token("alice", "tablet"))], client: client)
        }
    }

    @Test func badKeyConfigurationStopsTheStartWithAClearError() async throws {
        let directory = makeTemporaryDirectory()
        let privatePEM = try writeTemporaryFile(ES256PrivateKey().pemRepresentation, name: "private.pem")
        let garbage = try writeTemporaryFile("{\"keys\":42}", name: "jwks.json")
        let cases: [(String, (inout AuthConfiguration) -> Void, String)] = [
            ("missing PEM", { $0.jwtPublicKeyFiles = [directory + "/missing.pem"] }, "cannot be read"),
            ("private key PEM", { $0.jwtPublicKeyFiles = [privatePEM] }, "not a PEM public key"),
            ("malformed JWKS file", { $0.jwtJWKS = garbage }, "not a JWKS"),
            ("missing JWKS file", { $0.jwtJWKS = directory + "/missing.json" }, "cannot be read"),
            ("ftp JWKS URL", { $0.jwtJWKS = "ftp://idp.example/jwks.json" }, "http(s)"),
        ]
        for (name, change, message) in cases {
            var configuration = ServerConfiguration()
            configuration.port = 0
            configuration.dataDirectory = makeTemporaryDirectory()
            change(&configuration.auth)
            #expect(configuration.auth.hasJWTKeys, "\(name)")
            do {
                _ = try await PigeonApplication.make(configuration: configuration, logger: .init(label: "test"))
                Issue.record("\(name): the server started")
            } catch {
                #expect("\(error)".contains(message), "\(name): \(error)")
            }
        }
    }

    static func expectRefused(_ tokens: [(String, String)], client: PigeonTestClient) async throws {
        for (name, token) in tokens {
            expectError(try await client.request(.GET, "/v1/conversations", token: token), 401, .unauthorized, name)
            expectError(
                try await client.request(.POST, "/v1/conversations", token: token, body: #"{"members":["bob"]}"#), 401, .unauthorized, name)
        }
    }
}
