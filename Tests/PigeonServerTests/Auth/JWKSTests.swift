import Foundation
import PigeonProtocol
import PigeonServer
import Testing
import PigeonTestSupport

/// Keys from an identity provider's JWKS (an HTTP server on loopback, or a file): rotation while clients are
/// connected, a provider that is down at start, failed refreshes keeping the last good set, and unknown kids that
/// cannot make the server hammer the provider.
@Suite struct JWKSTests {
    static func configure(_ url: String, _ change: @escaping @Sendable (inout AuthConfiguration) -> Void = { _ in })
        -> (inout ServerConfiguration) -> Void
    {
        { configuration in
            configuration.auth.jwtJWKS = url
            change(&configuration.auth)
        }
    }

    static func status(_ client: PigeonTestClient, _ token: String) async throws -> Int {
        try await client.request(.GET, "/v1/conversations", token: token).status
    }

    @Test func aRotatedKeyIsAcceptedAtOnceWhileConnectedClientsStay() async throws {
        let old = try await TestSigningKey.rsa(kid: "2026-old")
        let new = try await TestSigningKey.rsa(kid: "2026-new")
        let ec = try await TestSigningKey.es256(kid: "ec-1")
        let endpoint = JWKSEndpoint(TestSigningKey.jwks([old, ec]))
        try await endpoint.run { url in
            try await withTestServer(configure: Self.configure(url) { $0.jwtJWKSMinimumRefreshInterval = .zero }) { client in
                let alice = TestDevice(userId: "alice", deviceId: "phone", token: try old.token("alice", "phone"))
                #expect(try await Self.status(client, try ec.token("carol", "laptop")) == 200)
                let conversation = try await client.createConversation(alice, members: ["bob"])
                let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
                endpoint.serve(TestSigningKey.jwks([new, ec]))
                let fetchesBefore = endpoint.fetches
                // The first request naming the new kid refreshes the key set and is accepted.
                let bob = TestDevice(userId: "bob", deviceId: "laptop", token: try new.token("bob", "laptop"))
                #expect(try await client.send(bob, to: conversation.id, body: "after rotation").status == 202)
                #expect(endpoint.fetches == fetchesBefore + 1)
                // A token of the removed key is refused on a new request …
                expectError(try await client.request(.GET, "/v1/conversations", token: try old.token("alice", "phone")), 401, .unauthorized)
                // … while the WebSocket it opened before the rotation stays and receives.
                let frames = await socket.frames { if case .event(.messageNew) = $0 { true } else { false } }
                guard case .event(.messageNew(_, let message)) = frames.last else {
                    Issue.record("the connected client got nothing after the rotation: \(frames)")
                    return
                }
                #expect(message.senderId == "bob")
                await socket.close()
            }
        }
    }

    @Test func unknownKidsFetchAtMostOncePerMinimumInterval() async throws {
        let key = try await TestSigningKey.ed25519(kid: "ed-1")
        let rotated = try await TestSigningKey.ed25519(kid: "ed-2")
        let endpoint = JWKSEndpoint(TestSigningKey.jwks([key]))
        try await endpoint.run { url in
            try await withTestServer(configure: Self.configure(url)) { client in
                #expect(try await Self.status(client, try key.token("alice", "d")) == 200)
                let fetches = endpoint.fetches
                endpoint.serve(TestSigningKey.jwks([key, rotated]))
                for index in 0..<20 {
                    let stranger = TestSigningKey(alg: "EdDSA", kid: "unknown-\(index)", signer: key.signer)
                    expectError(try await client.request(.GET, "/v1/conversations", token: try stranger.token("alice", "d")), 401, .unauthorized)
                }
                // Within the 30 s after the last fetch, even a real new kid waits for the next refresh.
                #expect(try await Self.status(client, try rotated.token("alice", "d")) == 401)
                #expect(endpoint.fetches <= fetches + 1, "\(endpoint.fetches - fetches) fetches for 21 unknown kids")
            }
        }
    }

    @Test func failedRefreshesKeepTheLastGoodKeysAndTheIntervalPicksUpRotations() async throws {
        let old = try await TestSigningKey.es384(kid: "es-old")
        let new = try await TestSigningKey.es384(kid: "es-new")
        let endpoint = JWKSEndpoint(TestSigningKey.jwks([old]))
        try await endpoint.run { url in
            let configure = Self.configure(url) {
                $0.jwtJWKSRefreshInterval = .milliseconds(200)
                $0.jwtJWKSMinimumRefreshInterval = .seconds(3600)
            }
            try await withTestServer(configure: configure) { client in
                #expect(try await Self.status(client, try old.token("alice", "d")) == 200)
                for (body, status) in [("down", 503), (#"{"keys":42}"#, 200), (#"{"keys":[]}"#, 200), ("{", 200)] {
                    endpoint.serve(body, status: status)
                    let seen = endpoint.fetches
                    let refreshed = await eventually(within: .seconds(15)) { endpoint.fetches >= seen + 2 }
                    #expect(refreshed, "no refresh while serving \(body)")
                    #expect(try await Self.status(client, try old.token("alice", "d")) == 200, "after \(body)")
                }
                endpoint.serve(TestSigningKey.jwks([new]))
                let accepted = try await eventually(within: .seconds(15)) { try await Self.status(client, try new.token("alice", "d")) == 200 }
                #expect(accepted)
                #expect(try await Self.status(client, try old.token("alice", "d")) == 401)
            }
        }
    }

    @Test func aProviderDownAtStartDoesNotStopTheServer() async throws {
        let key = try await TestSigningKey.rsa(kid: "rsa-1")
        let endpoint = JWKSEndpoint("unavailable", status: 503)
        try await endpoint.run { url in
            let configure = Self.configure(url) {
                $0.jwtJWKSRefreshInterval = .milliseconds(300)
                $0.jwtJWKSMinimumRefreshInterval = .seconds(3600)
            }
            try await withTestServer(configure: { configure(&$0); $0.openRegistration = true }) { client in
                let opaque = try await client.register("carol")
                #expect(try await Self.status(client, opaque.token) == 200)
                let fetched = await eventually(within: .seconds(15)) { endpoint.fetches >= 1 }
                #expect(fetched)
                expectError(try await client.request(.GET, "/v1/conversations", token: try key.token("alice", "d")), 401, .unauthorized)
                endpoint.serve(TestSigningKey.jwks([key]))
                // Retried with backoff: accepted without a restart (unknown kids may not fetch: the minimum interval is an hour).
                let accepted = try await eventually(within: .seconds(15)) { try await Self.status(client, try key.token("alice", "d")) == 200 }
                #expect(accepted)
                #expect(try await Self.status(client, opaque.token) == 200)
            }
        }
    }

    /// The configured URL answering a redirect to another origin (here another port): not followed, so keys of the
    /// redirected document are never trusted (the probe: they were), and the last good key set stays in use.
    @Test func aRedirectIsNotFollowedAndItsKeysAreNeverTrusted() async throws {
        let good = try await TestSigningKey.es256(kid: "good")
        let planted = try await TestSigningKey.es256(kid: "planted")
        let elsewhere = JWKSEndpoint(TestSigningKey.jwks([planted]))
        let endpoint = JWKSEndpoint(TestSigningKey.jwks([good]))
        try await elsewhere.run { elsewhereURL in
            try await endpoint.run { url in
                let configure = Self.configure(url) {
                    $0.jwtJWKSRefreshInterval = .milliseconds(200)
                    $0.jwtJWKSMinimumRefreshInterval = .zero
                }
                try await withTestServer(configure: configure) { client in
                    #expect(try await Self.status(client, try good.token("alice", "d")) == 200)
                    endpoint.redirect(to: elsewhereURL)
                    let seen = endpoint.fetches
                    let refreshed = await eventually(within: .seconds(15)) { endpoint.fetches >= seen + 3 }
                    #expect(refreshed, "the configured URL was fetched again")
                    // An unknown kid fetches at once (no minimum interval here): still only the configured URL.
                    expectError(try await client.request(.GET, "/v1/conversations", token: try planted.token("mallory", "d")), 401, .unauthorized)
                    #expect(elsewhere.fetches == 0, "the redirect was followed \(elsewhere.fetches) times")
                    #expect(try await Self.status(client, try good.token("alice", "d")) == 200, "the last good key set stays")
                }
            }
        }
    }

    @Test func aJWKSFileIsReadAtStartAndAgainForAnUnknownKid() async throws {
        let rsa = try await TestSigningKey.rsa("PS256", kid: "ps")
        let ec = try await TestSigningKey.es256(kid: "ec")
        let ed = try await TestSigningKey.ed25519(kid: "ed")
        let added = try await TestSigningKey.es256(kid: "ec-2")
        let path = try writeTemporaryFile(TestSigningKey.jwks([rsa, ec, ed]), name: "jwks.json")
        try await withTestServer(configure: Self.configure(path) { $0.jwtJWKSMinimumRefreshInterval = .zero }) { client in
            for key in [rsa, ec, ed] {
                #expect(try await Self.status(client, try key.token("alice", "d")) == 200, "\(key.alg)")
            }
            #expect(try await Self.status(client, try added.token("alice", "d")) == 401)
            try TestSigningKey.jwks([added, ed]).write(toFile: path, atomically: true, encoding: .utf8)
            #expect(try await Self.status(client, try added.token("alice", "d")) == 200)
            #expect(try await Self.status(client, try rsa.token("alice", "d")) == 401)
        }
    }
}
