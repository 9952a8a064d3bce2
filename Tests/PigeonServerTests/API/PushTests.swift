import Foundation
import NIOHTTP1
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.1, "Push for devices that are not connected", through the real HTTP, WebSocket and SSE stack and a real
/// HTTP push gateway on loopback (``MatrixPushGateway``, which checks every request against the Matrix Push Gateway
/// specification), on every test backend.
@Suite struct PushTests {
    /// A server that pushes to `gateway`, with the waits of a test (short timeouts and retries).
    static func pushing(to gateway: MatrixPushGateway, includeBody: Bool = false, timeout: Duration = .seconds(1)) -> @Sendable (inout ServerConfiguration) -> Void {
        { configuration in
            configuration.push.gatewayURL = gateway.url
            configuration.push.includeBody = includeBody
            configuration.push.requestTimeout = timeout
            configuration.push.firstRetryDelay = .milliseconds(200)
            configuration.push.maxRetryDelay = .milliseconds(600)
            configuration.push.pollInterval = .milliseconds(50)
        }
    }

    static func registerPush(
        _ client: PigeonTestClient, _ device: TestDevice, pushkey: String, appId: String = "com.example.chat", data: String = "{}"
    ) async throws {
        let answer = try await client.request(
            .PUT, "/v1/devices/current/push", token: device.token,
            body: #"{"kind":"apns","appId":"\#(appId)","pushkey":"\#(pushkey)","data":\#(data)}"#)
        guard answer.status == 204 else { throw TestFailure("register push: \(answer.status) \(answer.text)") }
    }

    static func registration(_ client: PigeonTestClient, _ device: TestDevice) async throws -> PushRegistrationInfo? {
        let answer = try await client.request(.GET, "/v1/devices/current/push", token: device.token)
        if answer.status == 404 { return nil }
        guard answer.status == 200 else { throw TestFailure("push registration: \(answer.status) \(answer.text)") }
        return try answer.decode(PushRegistrationInfo.self)
    }

    /// Waits `quiet` and expects the gateway to have received exactly `count` notifications then.
    static func expectStill(_ gateway: MatrixPushGateway, _ count: Int, after quiet: Duration = .milliseconds(1500), sourceLocation: SourceLocation = #_sourceLocation) async throws {
        try await Task.sleep(for: quiet)
        #expect(gateway.received.count == count, "\(gateway.received)", sourceLocation: sourceLocation)
    }

    // MARK: Registration

    /// Bad registrations are `400` and change nothing; a good one is kept and shown; a second device registering the
    /// same pushkey takes it over; unregistering is `204` (twice too); a revoked device's registration goes.
    @Test func registrationsAreCheckedKeptTakenOverAndDroppedOnRevocation() async throws {
        try await withTestServer { client in
            let phone = try await client.register("alice")
            let tablet = try await client.register("alice", existing: phone)
            let bad: [(String, String)] = [
                (#"{"kind":"pager","appId":"com.example.chat","pushkey":"k"}"#, "unknown kind"),
                (#"{"kind":"apns","appId":"","pushkey":"k"}"#, "empty appId"),
                (#"{"kind":"apns","appId":"com example","pushkey":"k"}"#, "appId with a space"),
                (#"{"kind":"apns","appId":"\#(String(repeating: "a", count: 65))","pushkey":"k"}"#, "appId too long"),
                (#"{"kind":"apns","appId":"com.example.chat","pushkey":""}"#, "empty pushkey"),
                (#"{"kind":"apns","appId":"com.example.chat","pushkey":"a b"}"#, "pushkey with a space"),
                (#"{"kind":"apns","appId":"com.example.chat","pushkey":"\#(String(repeating: "k", count: 513))"}"#, "pushkey too long"),
                (#"{"kind":"apns","appId":"com.example.chat","pushkey":"k","data":[1]}"#, "data not an object"),
                (#"{"kind":"apns","appId":"com.example.chat","pushkey":"k","data":{"x":"\#(String(repeating: "d", count: 2100))"}}"#, "data too large"),
                (#"{"kind":"apns","appId":"com.example.chat"}"#, "no pushkey"),
                (#"{"kind":"apns","appId":"com.example.chat","pushkey":"k","pushkey":"j"}"#, "a key twice"),
                ("not json", "malformed"),
            ]
            for (body, why) in bad {
                expectError(try await client.request(.PUT, "/v1/devices/current/push", token: phone.token, body: body), 400, .invalidRequest, why)
            }
            #expect(try await Self.registration(client, phone) == nil, "nothing was stored")
            expectError(try await client.request(.PUT, "/v1/devices/current/push", body: #"{"kind":"apns","appId":"a","pushkey":"k"}"#), 401, .unauthorized, "no token")

            try await Self.registerPush(client, phone, pushkey: "token-1", data: #"{"url":"https://push.example/x","n":2}"#)
            let stored = try #require(try await Self.registration(client, phone))
            #expect(stored.kind == .apns && stored.appId == "com.example.chat" && stored.pushkey == "token-1")
            #expect(stored.data == ["url": .string("https://push.example/x"), "n": .number(2)])
            #expect(stored.lastPushedAt == nil && !stored.pending && stored.updatedAt > 0)

            // The same pushkey registered by the tablet (the app reinstalled): the phone's registration goes.
            try await Self.registerPush(client, tablet, pushkey: "token-1")
            #expect(try await Self.registration(client, phone) == nil)
            #expect(try await Self.registration(client, tablet)?.pushkey == "token-1")

            let unregister = try await client.request(.DELETE, "/v1/devices/current/push", token: tablet.token)
            #expect(unregister.status == 204)
            #expect(try await client.request(.DELETE, "/v1/devices/current/push", token: tablet.token).status == 204, "again: still 204")
            #expect(try await Self.registration(client, tablet) == nil)

            // Revocation drops the registration with the device (its token is refused; the store is asked directly).
            try await Self.registerPush(client, tablet, pushkey: "token-2")
            #expect(try await client.request(.DELETE, "/v1/devices/\(tablet.deviceId)", token: phone.token).status == 204)
            try await Self.registerPush(client, phone, pushkey: "token-3")
            let other = try await client.register("alice", existing: phone)
            try await Self.registerPush(client, other, pushkey: "token-2")
            #expect(try await Self.registration(client, other)?.pushkey == "token-2", "the revoked device's pushkey is free again")
        }
    }

    /// A device of another user that knows a pushkey cannot take it over (the probe: `204`, and the victim's
    /// notifications then went to the taker's): `409 conflict`, the victim keeps its registration and its pushes. The
    /// pushkey is free again once the victim's device registers another one, or is revoked.
    @Test func anotherUsersDeviceCannotTakeOverAPushkey() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let mallory = try await client.register("mallory")
            try await Self.registerPush(client, bob, pushkey: "bob-phone")
            try await Self.registerPush(client, mallory, pushkey: "mallory-phone")
            let taking = #"{"kind":"apns","appId":"com.example.chat","pushkey":"bob-phone"}"#
            expectError(
                try await client.request(.PUT, "/v1/devices/current/push", token: mallory.token, body: taking), 409, .conflict, "another user's pushkey")
            #expect(try await Self.registration(client, bob)?.pushkey == "bob-phone", "the holder keeps it")
            #expect(try await Self.registration(client, mallory)?.pushkey == "mallory-phone", "the refusal changed nothing")
            // Another app's pushkey of the same text is another registration.
            try await Self.registerPush(client, mallory, pushkey: "bob-phone", appId: "com.example.other")
            #expect(try await Self.registration(client, bob)?.pushkey == "bob-phone")

            // bob's notifications still go to bob's registration.
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "for bob")
            try await waitUntil("bob was pushed") { gateway.received.contains { $0.eventId == sent.serverId } }
            let pushed = gateway.received.filter { $0.eventId == sent.serverId }.flatMap(\.devices)
            #expect(pushed.map(\.pushkey) == ["bob-phone"] && pushed.map(\.appId) == ["com.example.chat"], "\(pushed)")

            // Once bob's device registers another pushkey, the old one is free.
            try await Self.registerPush(client, bob, pushkey: "bob-new-phone")
            try await Self.registerPush(client, mallory, pushkey: "bob-phone")
            #expect(try await Self.registration(client, mallory)?.pushkey == "bob-phone")
            // And a revoked holder's pushkey is free too.
            let carol = try await client.register("carol")
            let revoked = #"{"kind":"apns","appId":"com.example.chat","pushkey":"bob-new-phone"}"#
            expectError(try await client.request(.PUT, "/v1/devices/current/push", token: carol.token, body: revoked), 409, .conflict, "held")
            #expect(try await client.request(.DELETE, "/v1/devices/\(bob.deviceId)", token: bob.token).status == 204)
            #expect(try await client.request(.PUT, "/v1/devices/current/push", token: carol.token, body: revoked).status == 204)
        }
    }

    /// docs/API.md and the OpenAPI document: `data` and `lastPushedAt` are always in the answer, `null` when there is
    /// none (schemathesis found them left out).
    @Test func aRegistrationWithoutDataOrPushShowsThemAsNull() async throws {
        try await withTestServer { client in
            let phone = try await client.register("alice")
            let answer = try await client.request(
                .PUT, "/v1/devices/current/push", token: phone.token, body: #"{"kind":"other","appId":"com.example.chat","pushkey":"k"}"#)
            #expect(answer.status == 204)
            let shown = try await client.request(.GET, "/v1/devices/current/push", token: phone.token)
            let object = try #require(shown.jsonObject, "\(shown.text)")
            #expect(Set(object.keys) == ["kind", "appId", "pushkey", "data", "updatedAt", "lastPushedAt", "pending"], "\(shown.text)")
            #expect(object["data"] is NSNull && object["lastPushedAt"] is NSNull, "\(shown.text)")
        }
    }

    // MARK: Notifications

    /// A message to a device with no stream open: exactly one notification, with the fields of the Matrix
    /// specification and nothing else (no body without `--push-include-body`); the sender's own devices get none.
    @Test func aMessageToAnOfflineDeviceProducesExactlyOneNotificationWithTheRightFields() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let alicesLaptop = try await client.register("alice", existing: alice)
            let bob = try await client.register("bob")
            try await Self.registerPush(client, alicesLaptop, pushkey: "alice-laptop")
            let registering = nowMillis()
            try await Self.registerPush(client, bob, pushkey: "bob-phone", data: #"{"format":"event_id_only"}"#)
            let registered = nowMillis()
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "secret words")

            try await waitUntil("a notification arrived") { gateway.received.count >= 1 }
            try await Self.expectStill(gateway, 1)
            let notification = try #require(gateway.received.first)
            #expect(notification.accepted)
            #expect(notification.eventId == sent.serverId)
            #expect(notification.roomId == conversation.id)
            #expect(notification.type == "pigeon.message")
            #expect(notification.sender == "alice")
            #expect(notification.prio == "high")
            #expect(notification.unread == 1)
            #expect(notification.content == nil, "no body without --push-include-body")
            #expect(notification.keys == ["event_id", "room_id", "type", "sender", "prio", "counts", "devices"])
            #expect(notification.devices.count == 1)
            let device = try #require(notification.devices.first)
            #expect(device.appId == "com.example.chat" && device.pushkey == "bob-phone" && device.data == ["format": "event_id_only"])
            let pushkeyTs = try #require(device.pushkeyTs)
            // The registration's time, in seconds (however long the machine took around it).
            #expect((registering / 1000...registered / 1000 + 1).contains(Int64(pushkeyTs)), "pushkey_ts \(pushkeyTs) is in seconds")
            #expect(gateway.malformedCount == 0)
            // The dispatcher counts and records the push once the gateway's answer is back, a moment after the gateway
            // saw the request (on a loaded machine, with PostgreSQL, longer than `expectStill` waits).
            try await waitUntil("the push counted as sent") { try await client.metric("pigeon_push_sent_total") == 1 }
            try await waitUntil("the registration records the push") {
                guard let info = try await Self.registration(client, bob) else { return false }
                return info.lastPushedAt != nil && !info.pending
            }
            #expect(try await client.metric("pigeon_push_sent_total") == 1)
        }
    }

    /// API.md 1.2: a reaction is not a message: an offline member gets no push for it (and a thread reply, which is
    /// one, is pushed like any message).
    @Test func aReactionSendsNoPushAndAThreadReplyDoes() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(bob, to: conversation.id, body: "mine")
            _ = try await client.waitForCount(alice, conversation.id, 1)
            try await Self.registerPush(client, bob, pushkey: "bob-phone")
            let reacted = try await ReactionsAndThreadsTests.react(client, alice, conversation.id, sent.serverId, "👍")
            #expect(reacted.status == 200, "\(reacted.text)")
            try await Self.expectStill(gateway, 0)
            let reply = try await ReactionsAndThreadsTests.sendReply(client, alice, conversation.id, body: "in thread", threadRoot: sent.serverId)
            #expect(reply.status == 202, "\(reply.text)")
            try await waitUntil("the thread reply's push") { gateway.received.count >= 1 }
            #expect(gateway.received.first?.eventId == (try reply.decode(SendMessageResponse.self)).serverId)
        }
    }

    /// With `--push-include-body` the notification carries the message's type and body in `content`.
    @Test func theBodyIsSentOnlyWhenAskedFor() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: Self.pushing(to: gateway, includeBody: true)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            try await Self.registerPush(client, bob, pushkey: "bob-phone")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            try await client.sendAccepted(alice, to: conversation.id, body: "hello bob")
            try await waitUntil("a notification arrived") { gateway.received.count >= 1 }
            #expect(gateway.received.first?.content == ["type": "text", "body": "hello bob"])
        }
    }

    /// A device with a stream open gets its messages there and no push; once its stream closes, the next messages
    /// push. Two devices of one user: only the offline one is pushed.
    @Test func anOnlineDeviceGetsNoPushAndOneThatGoesOfflineStartsGettingThem() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bobPhone = try await client.register("bob")
            let bobLaptop = try await client.register("bob", existing: bobPhone)
            try await Self.registerPush(client, bobPhone, pushkey: "bob-phone")
            try await Self.registerPush(client, bobLaptop, pushkey: "bob-laptop")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let phoneSocket = try await TestWebSocket.connect(port: client.port, token: bobPhone.token)
            let laptopEvents = try await TestSSE.open(port: client.port, token: bobLaptop.token)

            try await client.sendAccepted(alice, to: conversation.id, body: "both online")
            _ = await phoneSocket.inbox.collect(timeout: .seconds(10)) { frames in frames.contains { if case .event(.messageNew) = $0 { true } else { false } } }
            try await Self.expectStill(gateway, 0)

            await phoneSocket.close()
            // Presence follows the close: send until a push comes for the phone (and never for the laptop).
            var sent = 0
            try await waitUntil("the phone, now offline, is pushed", timeout: .seconds(15), every: .milliseconds(300)) {
                try await client.sendAccepted(alice, to: conversation.id, body: "phone offline \(sent)")
                sent += 1
                return gateway.received.contains { $0.devices.first?.pushkey == "bob-phone" }
            }
            // The last messages may still coalesce into one more push for the phone (a second later); then quiet.
            try await Task.sleep(for: .milliseconds(1500))
            let pushes = gateway.received
            #expect(pushes.allSatisfy { $0.devices.first?.pushkey == "bob-phone" }, "the laptop's SSE stream is open: \(pushes)")
            #expect(Set(pushes.compactMap(\.eventId)).count == pushes.count, "never one message twice")
            #expect(pushes.count <= 3, "\(pushes.count) pushes for \(sent) messages sent within a few seconds")
            await laptopEvents.close()
        }
    }

    /// The gateway down (5xx) for a while, then up: every owed push is sent once it is up, each device once for its
    /// newest message, and none again afterwards.
    @Test func aGatewayDownForAWhileGetsEveryOwedPushOnceWhenItIsUp() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        gateway.setMode(.status(503))
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            try await Self.registerPush(client, bob, pushkey: "bob-phone")
            try await Self.registerPush(client, carol, pushkey: "carol-phone")
            let group = try await client.createConversation(alice, members: ["bob", "carol"], name: "team")
            let last = try await client.sendAccepted(alice, to: group.id, body: "while the gateway is down")
            try await waitUntil("the gateway was tried and retried") { gateway.received.count >= 4 }
            #expect(gateway.accepted.isEmpty)
            #expect(try await Self.registration(client, bob)?.pending == true, "still owed")

            gateway.setMode(.accept)
            try await waitUntil("both devices were pushed") { Set(gateway.accepted.compactMap { $0.devices.first?.pushkey }).count == 2 }
            try await Self.expectStill(gateway, gateway.received.count)
            let accepted = gateway.accepted
            #expect(accepted.count == 2, "once each: \(accepted)")
            #expect(accepted.allSatisfy { $0.eventId == last.serverId })
            #expect(try await client.metric("pigeon_push_sent_total") == 2)
            #expect(try await Self.registration(client, bob)?.pending == false)
        }
    }

    /// Timeouts count as failures and are retried: a hanging gateway that recovers gets the push.
    @Test func aTimeoutIsRetried() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        gateway.setMode(.hang)
        try await withTestServer(configure: Self.pushing(to: gateway, timeout: .milliseconds(300))) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            try await Self.registerPush(client, bob, pushkey: "bob-phone")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let sent = try await client.sendAccepted(alice, to: conversation.id, body: "hello")
            try await waitUntil("the gateway was tried twice") { gateway.received.count >= 2 }
            gateway.setMode(.accept)
            try await waitUntil("the push went through") { gateway.accepted.count == 1 }
            #expect(gateway.accepted.first?.eventId == sent.serverId)
        }
    }

    /// A pushkey the gateway rejects: its registration is dropped (`pigeon_push_rejected_total`), nothing is pushed to
    /// it again.
    @Test func aRejectedPushkeyIsUnregistered() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        gateway.reject(pushkeys: ["expired-token"])
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            try await Self.registerPush(client, bob, pushkey: "expired-token")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            try await client.sendAccepted(alice, to: conversation.id, body: "one")
            try await waitUntil("the registration was dropped") { try await Self.registration(client, bob) == nil }
            #expect(try await client.metric("pigeon_push_rejected_total") == 1)
            try await client.sendAccepted(alice, to: conversation.id, body: "two")
            try await Self.expectStill(gateway, 1)
        }
    }

    /// 100 messages in a burst to one offline device: a handful of pushes (at most one a second), the last one
    /// carrying the newest message and the unread count of all 100.
    @Test func aBurstToOneOfflineDeviceCoalescesIntoAHandfulOfPushes() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withTestServer(configure: Self.pushing(to: gateway)) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            try await Self.registerPush(client, bob, pushkey: "bob-phone")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let started = ContinuousClock.now
            var last: SendMessageResponse?
            for index in 0..<100 { last = try await client.sendAccepted(alice, to: conversation.id, body: "burst \(index)") }
            let burst = ContinuousClock.now - started
            let newest = try #require(last)
            try await waitUntil("the newest message was pushed", timeout: .seconds(30)) { gateway.accepted.last?.eventId == newest.serverId }
            try await Self.expectStill(gateway, gateway.received.count)
            let pushes = gateway.accepted
            #expect(pushes.last?.unread == 100, "\(pushes.map { $0.unread ?? -1 })")
            // At most one a second: the burst's length in seconds, plus the first push and the last one.
            let allowed = Int(burst.components.seconds) + 3
            #expect(pushes.count <= allowed, "\(pushes.count) pushes for a burst of \(burst)")
            #expect(Set(pushes.compactMap(\.eventId)).count == pushes.count, "never the same message twice")
        }
    }

    /// A gateway that hangs delays nothing: sends are accepted, stored and delivered to an online device as quickly
    /// as without pushes (generous bounds here; the benchmark measures it).
    @Test func aHangingGatewayDelaysNeitherAcceptNorDelivery() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        gateway.setMode(.hang)
        try await withTestServer(configure: Self.pushing(to: gateway, timeout: .seconds(30))) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let carols = try await (0..<40).asyncMap { index in try await client.register("carol\(index)") }
            for (index, carol) in carols.enumerated() { try await Self.registerPush(client, carol, pushkey: "carol-\(index)") }
            let conversation = try await client.createConversation(alice, members: ["bob"] + carols.map(\.userId), name: "big")
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            var slowest = Duration.zero
            for index in 0..<40 {
                let started = ContinuousClock.now
                try await client.sendAccepted(alice, to: conversation.id, body: "m\(index)")
                slowest = max(slowest, ContinuousClock.now - started)
                try await Task.sleep(for: .milliseconds(30))
            }
            try await waitUntil("some pushes hang at the gateway") { gateway.received.count >= 10 }
            let frames = await bobSocket.inbox.collect(timeout: .seconds(10)) { frames in
                frames.filter { if case .event(.messageNew) = $0 { true } else { false } }.count >= 40
            }
            #expect(frames.filter { if case .event(.messageNew) = $0 { true } else { false } }.count == 40, "every message delivered")
            #expect(slowest < .seconds(2), "the slowest accept took \(slowest)")
            await bobSocket.close()
        }
    }
}

extension Sequence {
    /// `map` with an async transform, in order.
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
