import Foundation
import PigeonFaultProxy
import PigeonKit
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// Push notifications from the SDK's side, against a real in-process server that posts to a real Matrix push gateway
/// on loopback (``MatrixPushGateway``): registration, and ``PigeonClient/handlePush(_:deadline:)`` fed with what the
/// gateway received, reshaped the way Sygnal hands it to an app.
@Suite(.timeLimit(.minutes(4)))
struct PushTests {
    /// A server that pushes to `gateway`, quickly (short poll and coalescing intervals).
    func withPushServer<T>(_ gateway: MatrixPushGateway, _ body: (KitTestServer) async throws -> T) async throws -> T {
        try await withKitTestServer(configure: { configuration in
            configuration.push.gatewayURL = gateway.url
            configuration.push.pollInterval = .milliseconds(50)
            configuration.push.minInterval = .milliseconds(100)
            configuration.push.firstRetryDelay = .milliseconds(100)
        }, body)
    }

    /// What Sygnal's APNs pushkin makes of a notification with a `type` (apnspushkin.py, `_get_payload_full`): the
    /// alert and the unread count as the badge under `aps`, the ids at the top level. The `userInfo` an iOS app gets.
    static func apnsUserInfo(_ notification: MatrixPushGateway.Notification) -> [AnyHashable: Any] {
        var aps: [String: Any] = ["alert": ["loc-key": "MSG_FROM_USER", "loc-args": [notification.sender ?? " "]]]
        if let unread = notification.unread { aps["badge"] = unread }
        var payload: [AnyHashable: Any] = ["aps": aps]
        if let roomId = notification.roomId { payload["room_id"] = roomId }
        if let eventId = notification.eventId { payload["event_id"] = eventId }
        return payload
    }

    /// What Sygnal's FCM pushkin makes of it (gcmpushkin.py, `_build_data`), as Android's `RemoteMessage.data` holds
    /// it: every value a string.
    static func fcmData(_ notification: MatrixPushGateway.Notification) -> [String: String] {
        var data = ["prio": notification.prio == "low" ? "normal" : "high", "missed_calls": "None"]
        data["event_id"] = notification.eventId
        data["room_id"] = notification.roomId
        data["type"] = notification.type
        data["sender"] = notification.sender
        data["unread"] = notification.unread.map(String.init) ?? "None"
        return data
    }

    /// The notification the gateway accepted for `serverId`, once it has one.
    func pushFor(_ serverId: String, at gateway: MatrixPushGateway) async throws -> MatrixPushGateway.Notification {
        try await waitUntil("the gateway has accepted a push for \(serverId)") { gateway.accepted.contains { $0.eventId == serverId } }
        return try #require(gateway.accepted.first { $0.eventId == serverId })
    }

    /// The serverId of one of `device`'s messages, once the server accepted it.
    func serverId(of localId: Int64, on device: TestDevice) async throws -> String {
        try await device.waitForStatus(localId, atLeast: .sent)
        return try #require(try device.message(localId).serverId)
    }

    // MARK: Registration

    @Test func registerStatusAndUnregisterRoundTrip() async throws {
        try await withKitTestServer { server in
            let bob = try await TestDevice.register("bob", on: server.url)
            #expect(try await bob.client.pushRegistration() == nil, "no registration at first")

            let before = Int64(Date().timeIntervalSince1970 * 1000)
            try await bob.client.registerPush(kind: .apns, appId: "com.example.chat", pushkey: "apns-token-1", data: ["format": .string("event_id_only")])
            let registered = try #require(try await bob.client.pushRegistration())
            #expect(registered.kind == .apns && registered.appId == "com.example.chat" && registered.pushkey == "apns-token-1")
            #expect(registered.data == ["format": .string("event_id_only")])
            #expect(registered.updatedAt >= before - 1000 && registered.lastPushedAt == nil && !registered.pending)

            // Bad input: refused before it is sent, saying why, and the registration stays as it was.
            let refused: [(String, String, [String: JSONValue]?, String)] = [
                ("com example", "apns-token-2", nil, "appId must be"),
                ("", "apns-token-2", nil, "appId must be"),
                (String(repeating: "a", count: 65), "apns-token-2", nil, "appId must be"),
                ("com.example.chat", "", nil, "pushkey must be"),
                ("com.example.chat", "token with spaces", nil, "pushkey must be"),
                ("com.example.chat", String(repeating: "k", count: 513), nil, "pushkey must be"),
                ("com.example.chat", "apns-token-2", ["blob": .string(String(repeating: "x", count: 2100))], "the limit is 2048"),
            ]
            for (appId, pushkey, data, reason) in refused {
                do {
                    try await bob.client.registerPush(kind: .fcm, appId: appId, pushkey: pushkey, data: data)
                    Issue.record("registered appId \(appId.prefix(20)), pushkey \(pushkey.prefix(20))")
                } catch let error as PigeonClientError {
                    #expect(error.code == .invalidArgument && error.message.contains(reason), "\(error)")
                }
            }
            #expect(try await bob.client.pushRegistration() == registered, "nothing changed")

            // Another registration replaces it; unregistering removes it, and a second unregistration is no error.
            try await bob.client.registerPush(kind: .fcm, appId: "com.example.chat.android", pushkey: "fcm-token")
            let replaced = try #require(try await bob.client.pushRegistration())
            #expect(replaced.kind == .fcm && replaced.appId == "com.example.chat.android" && replaced.pushkey == "fcm-token" && replaced.data == nil)
            try await bob.client.unregisterPush()
            #expect(try await bob.client.pushRegistration() == nil)
            try await bob.client.unregisterPush()

            // A revoked device's token is refused: the server's 401, as for the other calls.
            let laptop = try await TestDevice.register("bob", on: server.url, existing: bob)
            try await laptop.client.revokeDevice(bob.credentials.deviceId)
            for call in [{ try await bob.client.registerPush(kind: .apns, appId: "com.example.chat", pushkey: "t") },
                { _ = try await bob.client.pushRegistration() }, { try await bob.client.unregisterPush() }] as [@Sendable () async throws -> Void]
            {
                do {
                    try await call()
                    Issue.record("a revoked device's push call succeeded")
                } catch let error as PigeonClientError {
                    #expect(error.code == .server && error.httpStatus == 401 && error.serverError?.code == .unauthorized, "\(error)")
                }
            }
        }
    }

    // MARK: Handling a push

    /// The iOS background path end to end: bob's app is suspended (client stopped) with a message in its outbox; alice
    /// writes; the gateway gets bob's push; bob's app, woken, opens a client without starting it and hands it the
    /// push: it fetches alice's message, sends the delivered receipt (alice sees ✓✓), sends the queued message, and
    /// says so, within the deadline, leaving no stream open (the server pushes the next message again).
    @Test func aPushToASuspendedDeviceIsHandledWithoutStartingTheClient() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withPushServer(gateway) { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            try await bob.client.registerPush(kind: .apns, appId: "com.example.chat", pushkey: "bob-apns-token")

            await bob.client.stop()
            let queued = try bob.client.send("written on the train", to: conversation)
            let first = try alice.client.send("are you there?", to: conversation)
            let firstId = try await serverId(of: first.localId, on: alice)
            let notification = try await pushFor(firstId, at: gateway)
            #expect(notification.roomId == conversation && notification.sender == "alice" && notification.type == "pigeon.message")
            #expect(notification.unread == 1 && notification.devices.map(\.pushkey) == ["bob-apns-token"])
            #expect(try alice.message(first.localId).status == .stored, "not delivered yet: bob is asleep")

            // The app is woken: a new process opens the database, does not start the client, and hands it the push.
            let woken = try TestDevice.open(credentials: bob.credentials, serverURL: server.url, databasePath: bob.databasePath)
            let push = try PigeonPush(payload: Self.apnsUserInfo(notification))
            #expect(push.conversationId == conversation && push.serverId == firstId && push.unreadCount == 1)
            let report = await woken.client.handlePush(push, deadline: .seconds(20))
            #expect(report.finished && report.error == nil, "\(report)")
            #expect(report.push == push && report.messagesFetched == 1 && report.pushedMessageStored == true, "\(report)")
            #expect(report.outboxSent == 1 && report.outboxFailed == 0 && report.outboxWaiting == 0, "\(report)")
            #expect(report.receiptsSent >= 1 && report.elapsed < .seconds(20), "\(report)")
            #expect(try woken.allMessages(in: conversation).filter { $0.serverId == firstId }.count == 1)
            #expect(woken.received.map(\.body) == ["are you there?"], "announced to the app's listeners too")
            #expect(try woken.message(queued.localId).status >= .stored)
            try await alice.waitForStatus(first.localId, atLeast: .delivered)
            try await waitUntil("alice has bob's queued message") { alice.received.contains { $0.body == "written on the train" } }
            #expect(woken.client.connectionState == .offline, "the stream it opened is closed")

            // No stream was left open: the server pushes the next message again. This one comes as an FCM data
            // message, delivered twice (pushes are at least once) and handled twice at the same time.
            let second = try alice.client.send("still there?", to: conversation)
            let secondId = try await serverId(of: second.localId, on: alice)
            let again = try PigeonPush(payload: Self.fcmData(try await pushFor(secondId, at: gateway)))
            #expect(again.serverId == secondId && again.unreadCount == 2 && again.senderId == "alice")
            async let one = woken.client.handlePush(again, deadline: .seconds(20))
            async let two = woken.client.handlePush(again, deadline: .seconds(20))
            let (reportOne, reportTwo) = await (one, two)
            #expect(reportOne.finished && reportTwo.finished, "\(reportOne)\n\(reportTwo)")
            #expect(reportOne.messagesFetched == 1 && reportTwo.messagesFetched == 1, "each saw it arrive: \(reportOne)\n\(reportTwo)")
            #expect(reportOne.pushedMessageStored == true && reportTwo.pushedMessageStored == true)
            #expect(try woken.allMessages(in: conversation).filter { $0.senderId == "alice" }.map(\.body) == ["are you there?", "still there?"])
            try await alice.waitForStatus(second.localId, atLeast: .delivered)
            #expect(woken.client.connectionState == .offline)
            #expect(try await woken.client.pushRegistration()?.lastPushedAt != nil)
            await alice.client.stop()
        }
    }

    /// The deadline is kept when the server does not answer (a fault proxy black-holes every connection): the call
    /// returns by it, saying it did not finish and where it stopped, and a later call does everything, once. Then the
    /// network is cut again just as the call got its stream, whatever it had done by then: still nothing twice.
    @Test func aDeadlineTooShortReturnsInTimeAndALaterCallCompletesWithoutDuplicates() async throws {
        let gateway = try await MatrixPushGateway.start()
        defer { Task { await gateway.stop() } }
        try await withPushServer(gateway) { server in
            let proxy = try await FaultProxy.start(upstreamPort: server.port)
            let proxyURL = try #require(URL(string: "http://127.0.0.1:\(proxy.port)"))
            let alice = try await TestDevice.register("alice", on: server.url)
            let bob = try await TestDevice.register("bob", on: server.url, connectingThrough: proxyURL)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            try await bob.client.registerPush(kind: .fcm, appId: "com.example.chat", pushkey: "bob-fcm-token")
            await bob.client.stop()
            let queued = try bob.client.send("queued before the push", to: conversation)
            let message = try alice.client.send("wake up", to: conversation)
            let messageId = try await serverId(of: message.localId, on: alice)
            let push = try PigeonPush(payload: Self.fcmData(try await pushFor(messageId, at: gateway)))

            let woken = try TestDevice.open(credentials: bob.credentials, serverURL: proxyURL, databasePath: bob.databasePath)
            proxy.setMode(.stall)
            let cut = await woken.client.handlePush(push, deadline: .milliseconds(1500))
            #expect(!cut.finished && cut.error?.code == .timeout, "\(cut)")
            #expect(cut.error?.message.contains("did not finish within") == true, "\(cut)")
            #expect(cut.elapsed <= .milliseconds(1500) + .milliseconds(500), "returned by the deadline: \(cut.elapsed)")
            #expect(cut.messagesFetched == 0 && cut.pushedMessageStored == false && cut.outboxSent == 0 && cut.outboxWaiting == 1, "\(cut)")
            #expect(woken.client.connectionState == .offline)

            proxy.setMode(.forward)
            let done = await woken.client.handlePush(push, deadline: .seconds(20))
            #expect(done.finished && done.messagesFetched == 1 && done.outboxSent == 1 && done.pushedMessageStored == true, "\(done)")
            try await alice.waitForStatus(message.localId, atLeast: .delivered)

            // Cut while the call is under way (its stream just opened), then the call again.
            let third = try woken.client.send("queued again", to: conversation)
            let wakeAgain = try alice.client.send("wake up again", to: conversation)
            let wakeAgainId = try await serverId(of: wakeAgain.localId, on: alice)
            let pushAgain = try PigeonPush(payload: Self.apnsUserInfo(try await pushFor(wakeAgainId, at: gateway)))
            let handling = Task { await woken.client.handlePush(pushAgain, deadline: .seconds(3)) }
            try await waitUntil("bob's call has its stream", every: .milliseconds(1)) { woken.client.connectionState == .online }
            proxy.setMode(.stall)
            let interrupted = await handling.value
            #expect(interrupted.elapsed <= .seconds(3) + .milliseconds(500), "\(interrupted)")
            #expect(interrupted.finished || interrupted.error?.code == .timeout, "\(interrupted)")
            proxy.setMode(.forward)
            let resumed = await woken.client.handlePush(pushAgain, deadline: .seconds(20))
            #expect(resumed.finished, "\(resumed)")
            #expect(interrupted.messagesFetched + resumed.messagesFetched == 1, "\(interrupted)\n\(resumed)")

            // Nothing twice: on bob's device, and on the server.
            let local = try woken.allMessages(in: conversation)
            #expect(local.compactMap(\.serverId).count == Set(local.compactMap(\.serverId)).count)
            #expect(Set(local.map(\.body)) == ["queued before the push", "wake up", "queued again", "wake up again"] && local.count == 4)
            let history = try await server.history(conversationId: conversation, token: alice.credentials.token)
            for sent in [queued, third] {
                #expect(history.filter { $0.clientMessageId == sent.clientMessageId }.count == 1, "\(sent.body) stored once")
            }
            #expect(history.count == 4)
            try await alice.waitForStatus(wakeAgain.localId, atLeast: .delivered)
            await alice.client.stop()
        }
    }

    /// An app that started the client and was suspended: its socket died without the client noticing (it still
    /// takes it for open; what it writes is lost). A push means the server sees no stream from the device, so the
    /// call replaces that stream: the outbox and the receipts go out on a new one within the deadline. The client
    /// keeps running afterwards, as the app started it.
    @Test func aStartedClientWhoseSocketDiedWhileSuspendedReconnectsForThePush() async throws {
        try await withKitTestServer { server in
            let alice = try await TestDevice.register("alice", on: server.url)
            let (bob, faulty) = try await TestDevice.registerFaulty("bob", on: server.url)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            faulty.deafenConnection()
            let queued = try bob.client.send("sent into a dead socket", to: conversation)
            let message = try alice.client.send("hello?", to: conversation)
            let messageId = try await serverId(of: message.localId, on: alice)
            #expect(bob.client.connectionState == .online, "the client does not know its socket is dead")

            let report = await bob.client.handlePush(try PigeonPush(conversationId: conversation, serverId: messageId), deadline: .seconds(8))
            #expect(report.finished && report.messagesFetched == 1 && report.outboxSent == 1 && report.receiptsSent >= 1, "\(report)")
            try await alice.waitForStatus(message.localId, atLeast: .delivered)
            try await bob.waitForStatus(queued.localId, atLeast: .stored)
            #expect(bob.client.connectionState == .online, "still running: the app started it")
            let later = try alice.client.send("and now?", to: conversation)
            try await waitUntil("bob's running client gets the next message on its new stream") { bob.received.contains { $0.body == "and now?" } }
            try await alice.waitForStatus(later.localId, atLeast: .delivered)
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    /// A signed-out device, or one whose network the user switched off, says so at once and touches nothing.
    @Test func aSignedOutOrOfflineDeviceReportsWhyAtOnce() async throws {
        try await withKitTestServer { server in
            let bob = try await TestDevice.register("bob", on: server.url)
            let push = try PigeonPush(conversationId: UUID().uuidString)
            bob.client.setNetworkEnabled(false)
            let offline = await bob.client.handlePush(push, deadline: .seconds(5))
            #expect(!offline.finished && offline.error?.code == .closed && offline.error?.message.contains("switched off") == true, "\(offline)")
            bob.client.setNetworkEnabled(true)

            let laptop = try await TestDevice.register("bob", on: server.url, existing: bob)
            try await laptop.client.revokeDevice(bob.credentials.deviceId)
            let refused = await bob.client.handlePush(push, deadline: .seconds(5))
            #expect(!refused.finished && refused.error?.httpStatus == 401, "\(refused)")
            #expect(refused.elapsed < .seconds(5), "a refused token is not retried until the deadline")
            #expect(bob.client.connectionState != .online)
        }
    }
}
