import Foundation
import NIOCore
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.1, "Registration and identity": nobody becomes another user, registration is open only where it is
/// safe by default, and one address cannot register without bound.
@Suite struct RegistrationTests {
    /// The default decides by the setup: only the embedded store and buffer on a loopback address without JWT keys.
    @Test func openRegistrationIsOnByDefaultOnlyForTheLoopbackEmbeddedSetup() {
        func enabled(_ change: (inout ServerConfiguration) -> Void) -> Bool {
            var configuration = ServerConfiguration()
            change(&configuration)
            return configuration.isOpenRegistrationEnabled
        }
        #expect(enabled { _ in })
        #expect(enabled { $0.host = "localhost" })
        #expect(enabled { $0.host = "::1" })
        #expect(enabled { $0.host = "127.0.0.2" })
        #expect(!enabled { $0.host = "0.0.0.0" })
        #expect(!enabled { $0.host = "::" })
        #expect(!enabled { $0.host = "192.168.1.20" })
        #expect(!enabled { $0.store = .postgres("postgres://localhost/pigeon") })
        #expect(!enabled { $0.buffer = .redis("redis://localhost") })
        #expect(!enabled { $0.auth.jwtSecret = "key" })
        #expect(enabled {
            $0.host = "0.0.0.0"
            $0.openRegistration = true
        })
        #expect(!enabled { $0.openRegistration = false })
    }

    /// The finding: `POST /v1/devices {"userId":"alice"}` from a stranger returned a token that reads alice's
    /// conversations.
    @Test func aStrangerCannotRegisterADeviceOfAnExistingUser() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            try await client.sendAccepted(alice, to: conversation.id, body: "for bob only")

            // Without a token, and with a token of another user, alice gets no new device.
            let stranger = try await client.request(.POST, "/v1/devices", body: #"{"userId":"alice"}"#)
            expectError(stranger, 401, .unauthorized, "no token")
            let asBob = try await client.request(.POST, "/v1/devices", token: bob.token, body: #"{"userId":"alice"}"#)
            expectError(asBob, 403, .forbidden, "bob's token")
            let forged = try await client.request(.POST, "/v1/devices", token: "pgn_forged", body: #"{"userId":"alice"}"#)
            expectError(forged, 401, .unauthorized, "unknown token")

            // With a token of one of alice's devices it works, and the new device reads her conversations.
            let phone = try await client.register("alice", deviceName: "phone", existing: alice)
            #expect(phone.deviceId != alice.deviceId)
            #expect(try await client.conversations(phone).map(\.id) == [conversation.id])
        }
    }

    /// Two registrations racing for a new userId: exactly one becomes its first device.
    @Test func concurrentFirstRegistrationsOfOneUserYieldOneDevice() async throws {
        try await withTestServer { client in
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await client.request(.POST, "/v1/devices", body: #"{"userId":"zoe"}"#).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.sorted() == [201] + Array(repeating: 401, count: 7), "\(statuses)")
        }
    }

    @Test func openRegistrationSwitchedOffRefusesEvenWithAToken() async throws {
        try await withTestServer(configure: { $0.openRegistration = false }) { client in
            expectError(try await client.request(.POST, "/v1/devices", body: #"{"userId":"alice"}"#), 401, .unauthorized)
        }
    }

    @Test func aUserHasAtMostTheConfiguredNumberOfDevices() async throws {
        try await withTestServer(configure: { $0.abuseLimits.maxDevicesPerUser = 3 }) { client in
            let first = try await client.register("alice")
            _ = try await client.register("alice", existing: first)
            _ = try await client.register("alice", existing: first)
            let fourth = try await client.request(.POST, "/v1/devices", token: first.token, body: #"{"userId":"alice"}"#)
            expectError(fourth, 403, .forbidden, "fourth device")
            // Others are not affected.
            _ = try await client.register("bob")
            #expect(try await client.metric(#"pigeon_limit_hits_total{limit="devices_per_user"}"#) == 1)
        }
    }

    /// Devices revoked in the last hour still count toward the cap, and a user's uploads and sends are limited per user
    /// as well as per device: registering and revoking devices buys no fresh budgets (one user once made 792 uploads
    /// in 10 s under a limit of 3 per device and minute, through 264 registered and revoked devices).
    @Test func churningDevicesBuysNoFreshBudgets() async throws {
        try await withTestServer(configure: {
            $0.abuseLimits.maxDevicesPerUser = 3
            $0.attachments.uploadsPerMinute = 2
            $0.rateLimitPerDevice = 0.01
            $0.rateLimitBurst = 2
        }) { client in
            let first = try await client.register("alice")
            let conversation = try await client.createConversation(first, members: ["bob"])
            var uploads = 0
            var sends = 0
            var refusedDevice = false
            // Register a device, use up its budgets, revoke it; again and again.
            for _ in 0..<8 {
                let answer = try await client.request(.POST, "/v1/devices", token: first.token, body: #"{"userId":"alice"}"#)
                if answer.status == 403 {
                    refusedDevice = true
                    break
                }
                #expect(answer.status == 201, "\(answer.text)")
                let registration = try answer.decode(DeviceRegistration.self)
                let device = TestDevice(userId: registration.userId, deviceId: registration.deviceId, token: registration.token)
                for _ in 0..<3 {
                    if try await AttachmentTests.upload(client, device, name: "f.bin", [1, 2, 3]).status == 201 { uploads += 1 }
                    if try await client.send(device, to: conversation.id, body: "x").status == 202 { sends += 1 }
                }
                #expect(try await DeviceRevocationTests.revoke(client, first, device.deviceId).status == 204)
            }
            #expect(refusedDevice, "the device cap counts the devices revoked in the last hour")
            // Four devices' worth per user at most, however many devices came and went (the cap of 3 with alice's
            // first device lets two come and go before the third is refused).
            #expect(uploads <= 8, "\(uploads) uploads")
            #expect(sends <= 8, "\(sends) sends")
        }
    }

    /// A burst, then a steady rate per address; over it `429` with `Retry-After`, while another address (a
    /// trusted proxy's client) still registers. Invalid attempts count too (they cost the server work).
    @Test func registrationsPerAddressAreRateLimited() async throws {
        try await withTestServer(configure: {
            $0.abuseLimits.registrationBurst = 5
            // One token per 100 s: the refill during the five registrations (seconds on a loaded CI machine with
            // PostgreSQL, where 0.1/s once left a Retry-After of 4) cannot bring Retry-After near the bound below.
            $0.abuseLimits.registrationsPerSecond = 0.01
            $0.trustedProxies = [AddressBlock("127.0.0.1")!]
        }) { client in
            for index in 0..<4 { _ = try await client.register("user\(index)") }
            expectError(try await client.request(.POST, "/v1/devices", body: #"{"userId":"bad user"}"#), 400, .invalidRequest)
            let refused = try await client.request(.POST, "/v1/devices", body: #"{"userId":"late"}"#)
            expectError(refused, 429, .rateLimited, "sixth registration")
            #expect(Int(refused.headers["retry-after"] ?? "") ?? 0 >= 50)
            // Nothing was registered by the refused call: "late" is still a new user.
            let forwarded = try await client.request(
                .POST, "/v1/devices", body: #"{"userId":"late"}"#, headers: ["X-Forwarded-For": "203.0.113.7"])
            #expect(forwarded.status == 201, "\(forwarded.text)")
            #expect(try await client.metric(#"pigeon_limit_hits_total{limit="registrations_per_address"}"#) == 1)
        }
    }

    /// Without a trusted proxy, `X-Forwarded-For` is the client's own text and changes nothing.
    @Test func forwardedForFromAnUntrustedPeerIsIgnored() async throws {
        try await withTestServer(configure: {
            $0.abuseLimits.registrationBurst = 2
            $0.abuseLimits.registrationsPerSecond = 0.01
        }) { client in
            for index in 0..<2 {
                let answer = try await client.request(
                    .POST, "/v1/devices", body: #"{"userId":"u\#(index)"}"#, headers: ["X-Forwarded-For": "198.51.100.\(index)"])
                #expect(answer.status == 201)
            }
            let spoofed = try await client.request(
                .POST, "/v1/devices", body: #"{"userId":"u9"}"#, headers: ["X-Forwarded-For": "198.51.100.99"])
            expectError(spoofed, 429, .rateLimited)
        }
    }
}

/// ``ClientAddress``: the address the per-address limits count.
@Suite struct ClientAddressTests {
    let proxy = try! SocketAddress(ipAddress: "10.0.0.5", port: 443)

    @Test func theForwardedAddressCountsOnlyBehindATrustedProxy() throws {
        let trusted = [AddressBlock("10.0.0.0/8")!]
        #expect(ClientAddress.resolve(peer: proxy, forwardedFor: "203.0.113.9", trustedProxies: trusted) == "203.0.113.9")
        #expect(ClientAddress.resolve(peer: proxy, forwardedFor: "203.0.113.9", trustedProxies: []) == "10.0.0.5")
        // The client's own (spoofed) entries sit left of what the proxy appended: only the right end counts.
        #expect(ClientAddress.resolve(peer: proxy, forwardedFor: "1.2.3.4, 203.0.113.9", trustedProxies: trusted) == "203.0.113.9")
        // Through two trusted proxies.
        #expect(ClientAddress.resolve(peer: proxy, forwardedFor: "203.0.113.9, 10.1.1.1", trustedProxies: trusted) == "203.0.113.9")
        // Garbage stops the walk at the last trusted hop.
        #expect(ClientAddress.resolve(peer: proxy, forwardedFor: "not-an-address", trustedProxies: trusted) == "10.0.0.5")
        let mapped = try SocketAddress(ipAddress: "::ffff:192.0.2.1", port: 1)
        #expect(ClientAddress.resolve(peer: mapped, forwardedFor: nil, trustedProxies: []) == "192.0.2.1")
    }

    @Test func ipv6AddressesAreLimitedPerSlash64() {
        #expect(ClientAddress.limitKey("2001:db8:1:2:aaaa::1") == ClientAddress.limitKey("2001:db8:1:2:bbbb::2"))
        #expect(ClientAddress.limitKey("2001:db8:1:3::1") != ClientAddress.limitKey("2001:db8:1:2::1"))
        #expect(ClientAddress.limitKey("192.0.2.1") == "192.0.2.1")
    }

    @Test func addressBlocksParseAndMatch() {
        #expect(AddressBlock("10.0.0.0/33") == nil)
        #expect(AddressBlock("nonsense") == nil)
        #expect(AddressBlock("::1/129") == nil)
        let block = AddressBlock("192.168.0.0/16")!
        #expect(ClientAddress.isTrusted(try! SocketAddress(ipAddress: "192.168.4.4", port: 1), [block]))
        #expect(!ClientAddress.isTrusted(try! SocketAddress(ipAddress: "192.169.0.1", port: 1), [block]))
    }
}
