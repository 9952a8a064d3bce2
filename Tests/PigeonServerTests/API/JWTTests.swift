import Crypto
import Foundation
import PigeonProtocol
import PigeonTestSupport
import Testing

/// API.md, "Devices and auth": with a JWT key configured, a token is an HS256 JWT minted by the app's backend
/// (`sub` = userId, `did` = deviceId, `exp` honoured), and open registration is off.
@Suite struct JWTTests {
    static let secret = "backend-shared-secret"

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Mints a token the way an app backend would.
    static func token(header: String = #"{"alg":"HS256","typ":"JWT"}"#, claims: String, secret: String = secret) -> String {
        let signingInput = base64URL(Data(header.utf8)) + "." + base64URL(Data(claims.utf8))
        let signature = HMAC<SHA256>.authenticationCode(for: Data(signingInput.utf8), using: SymmetricKey(data: Data(secret.utf8)))
        return signingInput + "." + base64URL(Data(signature))
    }

    static func claims(sub: String, did: String, exp: Int64 = Int64(Date().timeIntervalSince1970) + 3600) -> String {
        #"{"sub":"\#(sub)","did":"\#(did)","exp":\#(exp)}"#
    }

    @Test func validTokensAuthenticateTheirUserAndDevice() async throws {
        try await withTestServer(configure: { $0.auth.jwtSecret = Self.secret }) { client in
            let alice = TestDevice(userId: "alice", deviceId: "alice-phone", token: Self.token(claims: Self.claims(sub: "alice", did: "alice-phone")))
            let bob = TestDevice(userId: "bob", deviceId: "bob-laptop", token: Self.token(claims: Self.claims(sub: "bob", did: "bob-laptop")))
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            #expect(try await client.send(alice, to: conversation.id, body: "signed").status == 202)
            let frames = await socket.frames { if case .event(.messageNew) = $0 { true } else { false } }
            guard case .event(.messageNew(_, let message)) = frames.last else {
                Issue.record("no message.new over a JWT-authenticated WebSocket: \(frames)")
                return
            }
            #expect(message.senderId == "alice")
            #expect(message.senderDeviceId == "alice-phone")
            await socket.close()
        }
    }

    @Test func badTokensAre401AndChangeNothing() async throws {
        try await withTestServer(configure: { $0.auth.jwtSecret = Self.secret }) { client in
            let now = Int64(Date().timeIntervalSince1970)
            let alice = TestDevice(userId: "alice", deviceId: "d", token: Self.token(claims: Self.claims(sub: "alice", did: "d")))
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let valid = Self.token(claims: Self.claims(sub: "alice", did: "d"))
            let parts = valid.split(separator: ".").map(String.init)
            let bad: [(String, String)] = [
                ("expired", Self.token(claims: Self.claims(sub: "alice", did: "d", exp: now - 3600))),
                ("other key", Self.token(claims: Self.claims(sub: "alice", did: "d"), secret: "wrong")),
                ("alg none", Self.base64URL(Data(#"{"alg":"none"}"#.utf8)) + "." + parts[1] + "."),
                ("alg HS512 header on an HS256 signature", Self.token(header: #"{"alg":"HS512"}"#, claims: Self.claims(sub: "alice", did: "d"))),
                ("tampered payload", parts[0] + "." + Self.base64URL(Data(Self.claims(sub: "mallory", did: "d").utf8)) + "." + parts[2]),
                ("no did", Self.token(claims: #"{"sub":"alice","exp":\#(now + 3600)}"#)),
                ("bad sub", Self.token(claims: Self.claims(sub: "not a user id", did: "d"))),
                ("not a JWT", "a.b"),
            ]
            for (name, token) in bad {
                let device = TestDevice(userId: "alice", deviceId: "d", token: token)
                expectError(try await client.send(device, to: conversation.id, body: "x"), 401, .unauthorized, name)
                expectError(try await client.request(.GET, "/v1/conversations", token: token), 401, .unauthorized, name)
            }
            #expect(try await client.allMessages(alice, conversation.id).isEmpty)
        }
    }

    @Test func openRegistrationIsOffWithAJWTKey() async throws {
        try await withTestServer(configure: {
            $0.auth.jwtSecret = Self.secret
            $0.openRegistration = nil  // the default (the production test backend asks for open registration)
        }) { client in
            expectError(try await client.request(.POST, "/v1/devices", body: #"{"userId":"alice"}"#), 401, .unauthorized)
        }
    }
}
