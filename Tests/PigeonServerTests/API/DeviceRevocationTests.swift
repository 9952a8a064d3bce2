import Foundation
import NIOHTTP1
import PigeonDomain
import PigeonProtocol
import PigeonSQLite
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.1, "Devices: list and revoke", through the real HTTP, WebSocket and SSE stack (on every test backend).
@Suite struct DeviceRevocationTests {
    /// `GET /v1/devices` as the client sees it.
    static func devices(_ client: PigeonTestClient, _ device: TestDevice) async throws -> [DeviceInfo] {
        let answer = try await client.request(.GET, "/v1/devices", token: device.token)
        guard answer.status == 200 else { throw TestFailure("list devices: \(answer.status) \(answer.text)") }
        return try answer.decode(DeviceList.self).devices
    }

    static func revoke(_ client: PigeonTestClient, _ caller: TestDevice, _ deviceId: String) async throws -> HTTPAnswer {
        try await client.request(.DELETE, "/v1/devices/\(deviceId)", token: caller.token)
    }

    /// Every route a device token opens, each answering `401` for `device` (the WebSocket upgrade is refused too).
    static func expectRefusedEverywhere(
        _ client: PigeonTestClient, _ device: TestDevice, conversationId: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let requests: [(HTTPMethod, String, String?)] = [
            (.GET, "/v1/devices", nil),
            (.DELETE, "/v1/devices/\(device.deviceId)", nil),
            (.POST, "/v1/devices", #"{"userId":"\#(device.userId)"}"#),
            (.GET, "/v1/conversations", nil),
            (.POST, "/v1/conversations", #"{"members":["bob"]}"#),
            (.GET, "/v1/conversations/\(conversationId)", nil),
            (.GET, "/v1/conversations/\(conversationId)/messages?after=0", nil),
            (.POST, "/v1/conversations/\(conversationId)/messages", client.json(SendMessageRequest(clientMessageId: newId(), type: "text", body: "late", clientTimestamp: 1))),
            (.POST, "/v1/conversations/\(conversationId)/receipts", #"{"kind":"read","upToSeq":1}"#),
            (.POST, "/v1/conversations/\(conversationId)/typing", #"{"active":true}"#),
            (.GET, "/v1/sync", nil),
            (.GET, "/v1/events", nil),
            (.GET, "/v1/ws", nil),
        ]
        for (method, path, body) in requests {
            expectError(
                try await client.request(method, path, token: device.token, body: body), 401, .unauthorized, "\(method) \(path)",
                sourceLocation: sourceLocation)
        }
        expectError(
            try await client.request(.GET, "/v1/events?access_token=\(device.token)"), 401, .unauthorized, "SSE, token in the query",
            sourceLocation: sourceLocation)
        await #expect(throws: (any Error).self, "WebSocket upgrade", sourceLocation: sourceLocation) {
            let socket = try await TestWebSocket.connect(port: client.port, token: device.token, waitUntilLive: false)
            await socket.close()
        }
    }

    /// The list: the caller's user's devices only, oldest first, `deviceName` always present (null when none), the
    /// caller marked `current`.
    @Test func listsTheUsersDevicesOldestFirstWithTheCurrentOneMarked() async throws {
        try await withTestServer { client in
            let laptop = try await client.register("alice", deviceName: "laptop")
            try await Task.sleep(for: .milliseconds(5))  // two creation times, so the order is theirs, not the ids'
            let phone = try await client.register("alice", existing: laptop)
            let bob = try await client.register("bob", deviceName: "bob's")

            let asPhone = try await Self.devices(client, phone)
            #expect(asPhone.map(\.deviceId) == [laptop.deviceId, phone.deviceId])
            #expect(asPhone.map(\.deviceName) == ["laptop", nil])
            #expect(asPhone.map(\.current) == [false, true])
            #expect(asPhone.allSatisfy { $0.createdAt > 0 && $0.lastSeenAt >= $0.createdAt })
            #expect(try await Self.devices(client, laptop).map(\.current) == [true, false])
            #expect(try await Self.devices(client, bob).map(\.deviceId) == [bob.deviceId])

            let raw = try await client.request(.GET, "/v1/devices", token: phone.token)
            let entries = try #require((raw.jsonObject?["devices"] as? [[String: Any]]))
            #expect(entries.allSatisfy { Set($0.keys) == ["deviceId", "deviceName", "createdAt", "lastSeenAt", "current"] }, "\(raw.text)")
            #expect(entries.last?["deviceName"] is NSNull, "deviceName is present and null: \(raw.text)")
            expectError(try await client.request(.GET, "/v1/devices"), 401, .unauthorized, "no token")
        }
    }

    /// Revoking another of the user's devices: `204`, then at once its token answers `401` on every route (the
    /// WebSocket upgrade and SSE included), its open WebSocket closes with 4001 and its SSE stream ends; what it sent
    /// stays, and the other devices go on.
    @Test func revokingAnotherOwnDeviceEndsItsAccessAtOnce() async throws {
        try await withTestServer { client in
            let laptop = try await client.register("alice", deviceName: "laptop")
            let phone = try await client.register("alice", deviceName: "phone", existing: laptop)
            _ = try await client.register("bob")
            let conversation = try await client.createConversation(phone, members: ["bob"])
            try await client.sendAccepted(phone, to: conversation.id, body: "sent before")
            _ = try await client.waitForCount(laptop, conversation.id, 1)
            let socket = try await TestWebSocket.connect(port: client.port, token: phone.token)
            let sse = try await TestSSE.open(port: client.port, token: phone.token)
            #expect(sse.status.withLockedValue { $0 } == 200)
            let laptopSocket = try await TestWebSocket.connect(port: client.port, token: laptop.token)

            let answer = try await Self.revoke(client, laptop, phone.deviceId)
            #expect(answer.status == 204, "\(answer.text)")
            #expect(answer.body.isEmpty)
            try await Self.expectRefusedEverywhere(client, phone, conversationId: conversation.id)

            try await waitUntil("the revoked device's WebSocket is closed", timeout: .seconds(10)) { socket.closeFrame.withLockedValue { $0 } != nil }
            let close = socket.closeFrame.withLockedValue { $0 }
            #expect(close?.code == 4001, "close \(String(describing: close))")
            #expect(close?.reason?.contains("revoked") == true)
            try await waitUntil("the revoked device's SSE stream has ended", timeout: .seconds(10)) { sse.events.isClosed }

            #expect(try await Self.devices(client, laptop).map(\.deviceId) == [laptop.deviceId])
            #expect(try await client.allMessages(laptop, conversation.id).map(\.body) == ["sent before"], "what it sent stays")
            try await laptopSocket.waitUntilLive()
            #expect(laptopSocket.closeFrame.withLockedValue { $0 } == nil, "the other device's stream is untouched")
            try await client.sendAccepted(laptop, to: conversation.id, body: "after")
            await laptopSocket.close()
            await socket.close()
            await sse.close()
        }
    }

    /// A device revokes itself (logout): `204`, and its token is refused from then on.
    /// A WebSocket upgrade with a token that is missing, unknown or revoked is answered `401 unauthorized` with the
    /// error body, as every HTTP call with it (it was a bare `400` from the WebSocket library); a good one is upgraded.
    @Test func aRefusedWebSocketUpgradeIsAnswered401WithTheErrorBody() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let phone = try await client.register("alice", deviceName: "phone", existing: alice)
            #expect(try await BrowserTests.upgrade(client, token: phone.token, headers: [:]).status == 101)
            #expect(try await client.request(.DELETE, "/v1/devices/\(phone.deviceId)", token: alice.token).status == 204)
            for token in ["", "pgn_unknown", "not-a-token", phone.token] {
                let refused = try await BrowserTests.upgrade(client, token: token, headers: [:])
                #expect(refused.status == 401, "token \(token.prefix(12)): \(refused.head)")
                #expect(refused.error?.error.code == .unauthorized, "token \(token.prefix(12)): \(refused.head)")
                #expect(refused.head.lowercased().contains("content-type: application/json"), "\(refused.head)")
            }
            #expect(try await BrowserTests.upgrade(client, token: alice.token, headers: [:]).status == 101)
        }
    }

    @Test func aDeviceRevokesItself() async throws {
        try await withTestServer { client in
            let laptop = try await client.register("alice")
            let phone = try await client.register("alice", existing: laptop)
            let conversation = try await client.createConversation(laptop, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: phone.token)
            #expect(try await Self.revoke(client, phone, phone.deviceId).status == 204)
            try await Self.expectRefusedEverywhere(client, phone, conversationId: conversation.id)
            try await waitUntil("its WebSocket is closed", timeout: .seconds(10)) { socket.closeFrame.withLockedValue { $0 } != nil }
            #expect(socket.closeFrame.withLockedValue { $0 }?.code == 4001)
            #expect(try await Self.devices(client, laptop).map(\.deviceId) == [laptop.deviceId])
            await socket.close()
        }
    }

    /// Another user's device id, an unknown one, a malformed one and a device revoked already: `404` each (this server
    /// never answers 400 here), and nothing changes.
    @Test func anotherUsersUnknownMalformedOrRevokedDeviceIs404AndChangesNothing() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let gone = try await client.register("alice", existing: alice)
            let bob = try await client.register("bob")
            #expect(try await Self.revoke(client, alice, gone.deviceId).status == 204)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)

            let tooLong = String(repeating: "a", count: 129)
            for (name, id) in [
                ("another user's device", bob.deviceId), ("unknown", newId()), ("revoked already", gone.deviceId), ("too long", tooLong),
                ("a space", "a%20b"), ("not ASCII", "%C3%A9"),
            ] {
                expectError(try await Self.revoke(client, alice, id), 404, .notFound, name)
            }
            #expect(try await Self.devices(client, bob).map(\.deviceId) == [bob.deviceId])
            #expect(try await client.conversations(bob).isEmpty)
            try await bobSocket.waitUntilLive()
            #expect(bobSocket.closeFrame.withLockedValue { $0 } == nil)
            #expect(try await Self.devices(client, alice).map(\.deviceId) == [alice.deviceId])
            await bobSocket.close()
        }
    }

    /// Revoking a user's only device does not free its userId: open registration still refuses a stranger.
    @Test func aUserWhoseOnlyDeviceWasRevokedCannotBeRegisteredByAStranger() async throws {
        try await withTestServer { client in
            let carol = try await client.register("carol")
            #expect(try await Self.revoke(client, carol, carol.deviceId).status == 204)
            expectError(try await client.request(.POST, "/v1/devices", body: #"{"userId":"carol"}"#), 401, .unauthorized, "stranger")
            expectError(try await client.request(.POST, "/v1/devices", token: carol.token, body: #"{"userId":"carol"}"#), 401, .unauthorized)
        }
    }

    /// lastSeenAt moves with the device's requests (written off the request path; every 200 ms here).
    @Test func lastSeenAtMovesWithRequests() async throws {
        try await withTestServer(configure: { $0.deviceLastSeenInterval = .milliseconds(200) }) { client in
            let laptop = try await client.register("alice")
            let phone = try await client.register("alice", existing: laptop)
            let before = try #require(try await Self.devices(client, laptop).first { $0.deviceId == phone.deviceId })
            let started = nowMillis()
            try await waitUntil("the phone's lastSeenAt moves", timeout: .seconds(10)) {
                _ = try await client.conversations(phone)
                let now = try #require(try await Self.devices(client, laptop).first { $0.deviceId == phone.deviceId })
                return now.lastSeenAt >= started
            }
            let after = try #require(try await Self.devices(client, laptop).first { $0.deviceId == phone.deviceId })
            #expect(after.lastSeenAt > before.lastSeenAt && after.lastSeenAt <= nowMillis())
            #expect(after.createdAt == before.createdAt)
        }
    }

    /// JWT devices: listed from their first request (no name); a revoked `did` is refused for every token issued up to
    /// the revocation's second (and without `iat`), its streams close; a token issued after it is accepted again and the
    /// device is listed again.
    @Test func jwtDevicesAreListedAndRevokedByIssueTime() async throws {
        try await withTestServer(configure: { $0.auth.jwtSecret = JWTTests.secret }) { client in
            let now = Int64(Date().timeIntervalSince1970)
            func token(_ did: String, iat: Int64?) -> TestDevice {
                let iatClaim = iat.map { #","iat":\#($0)"# } ?? ""
                let claims = #"{"sub":"alice","did":"\#(did)","exp":\#(now + 3600)\#(iatClaim)}"#
                return TestDevice(userId: "alice", deviceId: did, token: JWTTests.token(claims: claims))
            }
            let laptop = token("alice-laptop", iat: now - 60)
            let phone = token("alice-phone", iat: now - 60)
            let phoneWithoutIat = token("alice-phone", iat: nil)
            _ = try await client.conversations(phone)
            try await Task.sleep(for: .milliseconds(5))  // two creation times, so the order is theirs, not the ids'
            let listed = try await Self.devices(client, laptop)
            #expect(listed.map(\.deviceId) == ["alice-phone", "alice-laptop"])
            #expect(listed.map(\.deviceName) == [nil, nil] && listed.map(\.current) == [false, true])

            let conversation = try await client.createConversation(laptop, members: ["bob"])
            let socket = try await TestWebSocket.connect(port: client.port, token: phone.token)
            let laterSocket = try await TestWebSocket.connect(port: client.port, token: laptop.token)
            #expect(try await Self.revoke(client, laptop, "alice-phone").status == 204)
            try await Self.expectRefusedEverywhere(client, phone, conversationId: conversation.id)
            expectError(try await client.request(.GET, "/v1/conversations", token: phoneWithoutIat.token), 401, .unauthorized, "no iat")
            expectError(
                try await client.request(.GET, "/v1/conversations", token: token("alice-phone", iat: now).token), 401, .unauthorized,
                "issued in the second of the revocation, or before")
            try await waitUntil("the phone's WebSocket is closed", timeout: .seconds(10)) { socket.closeFrame.withLockedValue { $0 } != nil }
            #expect(socket.closeFrame.withLockedValue { $0 }?.code == 4001)
            #expect(try await Self.devices(client, laptop).map(\.deviceId) == ["alice-laptop"])

            // A token minted after the revocation (the backend signed the device in again).
            let renewed = token("alice-phone", iat: Int64(Date().timeIntervalSince1970) + 2)
            #expect(try await client.request(.GET, "/v1/conversations", token: renewed.token).status == 200)
            #expect(try await Self.devices(client, renewed).map(\.deviceId).sorted() == ["alice-laptop", "alice-phone"])
            expectError(try await client.request(.GET, "/v1/conversations", token: phone.token), 401, .unauthorized, "the old token stays refused")
            let renewedSocket = try await TestWebSocket.connect(port: client.port, token: renewed.token)
            try await renewedSocket.waitUntilLive()
            #expect(renewedSocket.closeFrame.withLockedValue { $0 } == nil)
            #expect(laterSocket.closeFrame.withLockedValue { $0 } == nil)
            await renewedSocket.close()
            await laterSocket.close()
            await socket.close()
        }
    }
}

/// ``DeviceActivity`` on its own: requests are counted in memory, and a device's `lastSeenAt` is written at most once
/// per interval, with its latest request.
@Suite struct DeviceActivityTests {
    @Test func aDeviceIsWrittenAtMostOncePerIntervalWithItsLatestRequest() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try SQLiteMessageStore(path: directory + "/store.sqlite", durable: false, fanout: LocalFanout(sink: StoreContractTests.RecordingSink()))
        let device = try await store.registerDevice(userId: "alice", name: nil, tokenHash: "h", rule: StoreContractTests.openRule)
        let other = try await store.registerDevice(userId: "bob", name: nil, tokenHash: "h2", rule: StoreContractTests.openRule)
        let activity = DeviceActivity(store: store, interval: .seconds(60), logger: .init(label: "test"))
        // After both devices' creation (which their lastSeenAt starts at), however slow the registrations were.
        let start = try #require(try await store.devices(of: "bob").first).createdAt + 1_000
        func lastSeen(_ user: String) async throws -> Int64 { try #require(try await store.devices(of: user).first).lastSeenAt }

        // A thousand requests in the first 50 s: the first is written at once, the rest wait for the interval.
        activity.seen(device, at: start)
        await activity.flush(now: start)
        #expect(try await lastSeen("alice") == start)
        for offset in stride(from: Int64(50), through: 50_000, by: 50) { activity.seen(device, at: start + offset) }
        activity.seen(other, at: start + 10)
        await activity.flush(now: start + 50_000)
        #expect(try await lastSeen("alice") == start, "not written again within the interval")
        #expect(try await lastSeen("bob") == start + 10, "another device is written at its first request")

        // The sweep after the interval writes the latest request, once.
        await activity.flush(now: start + 60_000)
        #expect(try await lastSeen("alice") == start + 50_000)
    }
}
