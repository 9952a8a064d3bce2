import Foundation
import PigeonProtocol
import PigeonServer
import PigeonTestSupport
import Testing

/// API.md "Events: one resumable stream per device" over WebSocket, SSE and `/v1/sync`, and the WebSocket
/// operations' answers.
@Suite struct StreamTests {
    /// How a resumption test opens a device's stream.
    enum Transport: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sseLastEventID, sseCursorQuery, webSocket
        var testDescription: String { rawValue }
    }

    /// One device's event stream over SSE or WebSocket: events (with the SSE `id:` or the frame's cursor) in arrival order.
    struct EventStream: Sendable {
        var next: @Sendable (Duration) async -> (id: String?, event: ServerEvent)?
        var close: @Sendable () async -> Void

        func drain(for duration: Duration) async -> [ServerEvent] {
            var events: [ServerEvent] = []
            let deadline = ContinuousClock.now + duration
            while case let remaining = deadline - ContinuousClock.now, remaining > .zero, let item = await next(remaining) {
                events.append(item.event)
            }
            return events
        }

        static func open(_ transport: Transport, port: Int, token: String, cursor: String?) async throws -> EventStream {
            switch transport {
            case .sseLastEventID, .sseCursorQuery:
                let sse: TestSSE
                if let cursor, transport == .sseLastEventID {
                    sse = try await TestSSE.open(port: port, token: token, headers: ["Last-Event-ID": cursor])
                } else {
                    sse = try await TestSSE.open(port: port, token: token, query: cursor.map { "cursor=\($0)" } ?? "")
                }
                guard sse.status.withLockedValue({ $0 }) == 200 else { throw TestFailure("SSE status \(String(describing: sse.status.withLockedValue { $0 }))") }
                return EventStream(
                    next: { timeout in
                        guard let item = await sse.events.next(timeout: timeout) else { return nil }
                        return (item.id, item.serverEvent ?? .unknown(type: "undecodable: \(item.data)", cursor: nil))
                    },
                    close: { await sse.close() })
            case .webSocket:
                let socket = try await TestWebSocket.connect(port: port, token: token, cursor: cursor)
                return EventStream(
                    next: { timeout in
                        let deadline = ContinuousClock.now + timeout
                        while case let remaining = deadline - ContinuousClock.now, remaining > .zero {
                            guard let frame = await socket.inbox.next(timeout: remaining) else { return nil }
                            if let event = frame.event { return (event.cursor, event) }
                        }
                        return nil
                    },
                    close: { await socket.close() })
            }
        }
    }

    static func setUp(_ client: PigeonTestClient) async throws -> (alice: TestDevice, bob: TestDevice, conversation: Conversation) {
        let alice = try await client.register("alice")
        let bob = try await client.register("bob")
        let conversation = try await client.createConversation(alice, members: ["bob"])
        return (alice, bob, conversation)
    }

    // MARK: WebSocket operations and events

    @Test func webSocketSendIsAckedThenStoredThenPushedToTheOtherDevices() async throws {
        try await withTestServer { client in
            let laptop = try await client.register("alice", deviceName: "laptop")
            let phone = try await client.register("alice", deviceName: "phone", existing: laptop)
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(laptop, members: ["bob"])
            let cursors = [try await client.headCursor(laptop), try await client.headCursor(phone), try await client.headCursor(bob)]
            let laptopSocket = try await TestWebSocket.connect(port: client.port, token: laptop.token)
            let phoneSocket = try await TestWebSocket.connect(port: client.port, token: phone.token)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)

            let clientMessageId = newId()
            let before = nowMillis()
            laptopSocket.sendMessage(to: conversation.id, body: "hi bob", clientMessageId: clientMessageId, clientTimestamp: 42)
            let frames = await laptopSocket.frames { $0.event?.stored != nil }
            let ack = frames.first?.ack
            #expect(frames.first?.ack != nil, "the ack comes first: \(frames)")
            #expect(ack?.clientMessageId == clientMessageId)
            #expect(ack?.status == .queued)
            #expect(ack.map { isLowercaseUUID($0.serverId) } == true)
            #expect(ack.map { $0.acceptedAt >= before - 1 && $0.acceptedAt <= nowMillis() + 1 } == true)
            #expect(ack?.seq == nil)
            let stored = frames.last?.event?.stored
            #expect(stored?.clientMessageId == clientMessageId)
            #expect(stored?.serverId == ack?.serverId)
            #expect(stored?.conversationId == conversation.id)
            #expect(stored?.seq == 1)
            #expect(stored?.recipientsOnline == 1)
            #expect(stored.map { $0.storedAt >= (ack?.acceptedAt ?? 0) } == true)
            #expect(frames.count == 2, "only the ack and message.stored: \(frames)")

            let expected = Message(
                serverId: ack?.serverId ?? "", clientMessageId: clientMessageId, conversationId: conversation.id, seq: 1, senderId: "alice",
                senderDeviceId: laptop.deviceId, type: "text", body: "hi bob", clientTimestamp: 42, acceptedAt: ack?.acceptedAt ?? 0,
                storedAt: stored?.storedAt ?? 0)
            #expect(await bobSocket.firstEvent { $0.newMessage != nil }?.newMessage == expected)
            #expect(await phoneSocket.firstEvent { $0.newMessage != nil }?.newMessage == expected)
            #expect(try await client.history(bob, conversation.id).messages == [expected])

            // The sending device gets message.stored and not message.new; the others the reverse.
            #expect(await laptopSocket.inbox.drain(for: .milliseconds(300)).isEmpty)
            #expect(try await client.sync(laptop, cursor: cursors[0]).events.map(\.type) == ["message.stored"])
            #expect(try await client.sync(phone, cursor: cursors[1]).events.map(\.type) == ["message.new"])
            #expect(try await client.sync(bob, cursor: cursors[2]).events.map(\.type) == ["message.new"])
            for socket in [laptopSocket, phoneSocket, bobSocket] { await socket.close() }
        }
    }

    @Test func recipientsOnlineCountsOtherMembersConnectedDevices() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let alicePhone = try await client.register("alice", existing: alice)
            let bobLaptop = try await client.register("bob")
            let bobPhone = try await client.register("bob", existing: bobLaptop)
            let carol = try await client.register("carol")
            let conversation = try await client.createConversation(alice, members: ["bob", "carol"])
            let socket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            func recipientsOnline() async throws -> Int? {
                let clientMessageId = newId()
                socket.sendMessage(to: conversation.id, body: "x", clientMessageId: clientMessageId)
                return await socket.firstEvent { $0.stored?.clientMessageId == clientMessageId }?.stored?.recipientsOnline
            }
            #expect(try await recipientsOnline() == 0)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bobLaptop.token)
            #expect(try await recipientsOnline() == 1)
            let bobSSE = try await TestSSE.open(port: client.port, token: bobPhone.token)
            #expect(try await recipientsOnline() == 2)
            // The sender's own other device is not another member's.
            let phoneSocket = try await TestWebSocket.connect(port: client.port, token: alicePhone.token)
            #expect(try await recipientsOnline() == 2)
            let carolSocket = try await TestWebSocket.connect(port: client.port, token: carol.token)
            #expect(try await recipientsOnline() == 3)
            for s in [socket, bobSocket, phoneSocket, carolSocket] { await s.close() }
            await bobSSE.close()
        }
    }

    @Test func conversationCreatedReachesEveryMemberDevice() async throws {
        try await withTestServer { client in
            let laptop = try await client.register("alice")
            let phone = try await client.register("alice", existing: laptop)
            let bob = try await client.register("bob")
            let carol = try await client.register("carol")
            let dave = try await client.register("dave")
            let carolCursor = try await client.headCursor(carol)
            let daveCursor = try await client.headCursor(dave)
            let laptopSocket = try await TestWebSocket.connect(port: client.port, token: laptop.token)
            let phoneSSE = try await TestSSE.open(port: client.port, token: phone.token)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)

            let created = try await client.createConversation(laptop, members: ["bob", "carol"], name: "trip")
            #expect(await laptopSocket.firstEvent { $0.createdConversation != nil }?.createdConversation == created)
            #expect(await bobSocket.firstEvent { $0.createdConversation != nil }?.createdConversation == created)
            let sse = await phoneSSE.first { $0.event == "conversation.created" }
            #expect(sse?.serverEvent?.createdConversation == created)
            #expect(try await client.sync(carol, cursor: carolCursor).events.compactMap(\.createdConversation) == [created])
            #expect(try await client.sync(dave, cursor: daveCursor).events.isEmpty)
            await laptopSocket.close()
            await bobSocket.close()
            await phoneSSE.close()
        }
    }

    @Test func typingReachesTheOtherMembersAndIsNeverStored() async throws {
        try await withTestServer(configure: { $0.typingTimeout = .milliseconds(300) }) { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let aliceCursor = try await client.headCursor(alice)
            let bobCursor = try await client.headCursor(bob)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            let bobSSE = try await TestSSE.open(port: client.port, token: bob.token)

            // Over the WebSocket operation; expires by itself after the timeout.
            aliceSocket.send(.typing(conversationId: conversation.id, active: true))
            let started = ContinuousClock.now
            let on = await bobSocket.firstEvent { $0.typing != nil }?.typing
            #expect(on == TypingEvent(conversationId: conversation.id, userId: "alice", active: true))
            let raw = await bobSocket.rawInbox.take { $0.contains("\"typing\"") }
            let object = raw.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(object?["cursor"] == nil, "typing carries no cursor: \(raw ?? "nil")")
            let sseOn = await bobSSE.first { $0.event == "typing" }
            #expect(sseOn?.serverEvent?.typing == TypingEvent(conversationId: conversation.id, userId: "alice", active: true))
            #expect(sseOn?.id == nil)
            let off = await bobSocket.firstEvent { $0.typing != nil }?.typing
            #expect(off == TypingEvent(conversationId: conversation.id, userId: "alice", active: false))
            #expect(ContinuousClock.now - started >= .milliseconds(250), "expired before the timeout")
            #expect(await aliceSocket.inbox.drain(for: .milliseconds(200)).compactMap { $0.event?.typing }.isEmpty, "not to the typer")

            // Over HTTP.
            let httpOn = try await client.typing(bob, conversation.id, active: true)
            #expect(httpOn.status == 204)
            #expect(httpOn.body.isEmpty)
            #expect(await aliceSocket.firstEvent { $0.typing != nil }?.typing == TypingEvent(conversationId: conversation.id, userId: "bob", active: true))
            let httpOff = try await client.typing(bob, conversation.id, active: false)
            #expect(httpOff.status == 204)
            #expect(await aliceSocket.firstEvent { $0.typing != nil }?.typing == TypingEvent(conversationId: conversation.id, userId: "bob", active: false))

            // Never stored, never replayed.
            #expect(try await client.sync(alice, cursor: aliceCursor).events.isEmpty)
            #expect(try await client.sync(bob, cursor: bobCursor).events.isEmpty)
            let replay = try await EventStream.open(.webSocket, port: client.port, token: bob.token, cursor: bobCursor)
            #expect(await replay.drain(for: .milliseconds(300)).isEmpty)
            await replay.close()
            for socket in [aliceSocket, bobSocket] { await socket.close() }
            await bobSSE.close()
        }
    }

    @Test func failedMessageGetsMessageFailedAndDoesNotBlockOthers() async throws {
        try await withTestServer(configure: { configuration in
            // The processor's retries and dead letters: the separate buffer's path.
            configuration.separateEmbeddedBuffer = true
            configuration.processingFaultInjector = { message in if message.body == "poison" { throw TestFailure("injected") } }
            configuration.maxAttempts = 2
            configuration.retryBaseDelay = .milliseconds(10)
        }) { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            let bobSocket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            let poisonId = newId()
            let fineId = newId()
            aliceSocket.sendMessage(to: conversation.id, body: "poison", clientMessageId: poisonId)
            aliceSocket.sendMessage(to: conversation.id, body: "fine", clientMessageId: fineId)
            let poisonAck = await aliceSocket.first { $0.ack?.clientMessageId == poisonId }?.ack
            let failed = await aliceSocket.firstEvent { $0.failed != nil }?.failed
            #expect(failed?.clientMessageId == poisonId)
            #expect(failed?.serverId == poisonAck?.serverId)
            #expect(failed?.conversationId == conversation.id)
            #expect(failed.map { !$0.error.code.rawValue.isEmpty && !$0.error.message.isEmpty } == true)
            let stored = await aliceSocket.firstEvent { $0.stored != nil }?.stored
            #expect(stored?.clientMessageId == fineId)
            #expect(stored?.seq == 1)
            #expect(await bobSocket.firstEvent { $0.newMessage != nil }?.newMessage?.body == "fine")
            #expect(try await client.allMessages(bob, conversation.id).map(\.body) == ["fine"])
            #expect(try await client.metric("pigeon_dead_letters") == 1)
            // docs/API.md: a resend of a dead-lettered message answers 200 with status "failed".
            let resend = try await client.send(alice, to: conversation.id, body: "poison", clientMessageId: poisonId)
            #expect(resend.status == 200, "\(resend.text)")
            #expect((try? resend.decode(SendMessageResponse.self))?.status == .failed)
            #expect((try? resend.decode(SendMessageResponse.self))?.serverId == poisonAck?.serverId)
            await aliceSocket.close()
            await bobSocket.close()
        }
    }

    /// "Without a cursor the stream starts live (now)": an event stored after the WebSocket upgrade answered must reach
    /// the socket. The server answers the upgrade before it has registered the connection and read the log's head, so
    /// an event committed in between is neither pushed live nor replayed. The race is narrow: this repeats the
    /// connect-then-send sequence without the harness's liveness probe. Off by default (it is a stress run); enable
    /// with `PIGEON_STRESS=1`.
    @Test(.enabled(if: ProcessInfo.processInfo.environment["PIGEON_STRESS"] != nil))
    func eventRightAfterTheWebSocketUpgradeIsDelivered() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let aliceSocket = try await TestWebSocket.connect(port: client.port, token: alice.token)
            var missed: [Int] = []
            for round in 0..<300 {
                let socket = try await TestWebSocket.connect(port: client.port, token: bob.token, waitUntilLive: false)
                aliceSocket.sendMessage(to: conversation.id, body: "r\(round)")
                if await socket.firstEvent(timeout: .seconds(3), where: { $0.newMessage?.body == "r\(round)" }) == nil { missed.append(round) }
                await socket.close()
            }
            #expect(missed.isEmpty, "message.new missed right after the upgrade in rounds \(missed)")
            await aliceSocket.close()
        }
    }

    // MARK: SSE

    @Test func sseCarriesEventsWithIdTypeAndKeepAlives() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let sse = try await TestSSE.open(port: client.port, token: bob.token)
            #expect(sse.status.withLockedValue { $0 } == 200)
            #expect(sse.headers.withLockedValue { $0["content-type"] }?.hasPrefix("text/event-stream") == true)
            let accepted = try await client.sendAccepted(alice, to: conversation.id, body: "over sse")
            let event = await sse.events.next()
            #expect(event?.event == "message.new")
            #expect(event?.serverEvent?.newMessage?.serverId == accepted.serverId)
            #expect(event?.serverEvent?.newMessage?.body == "over sse")
            #expect(event?.id != nil)
            #expect(event?.id == event?.serverEvent?.cursor)
            // A keep-alive comment within a few keep-alive intervals (1 s in the tests).
            let comments = sse.comments.withLockedValue { $0 }
            let deadline = ContinuousClock.now + .seconds(5)
            while sse.comments.withLockedValue({ $0 }) <= comments, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(sse.comments.withLockedValue { $0 } > comments, "no keep-alive comment")
            await sse.close()

            // access_token works for SSE (browsers cannot set headers).
            let byQuery = try await TestSSE.open(port: client.port, token: nil, query: "access_token=\(bob.token)")
            #expect(byQuery.status.withLockedValue { $0 } == 200)
            let second = try await client.sendAccepted(alice, to: conversation.id, body: "by query")
            #expect(await byQuery.events.next()?.serverEvent?.newMessage?.serverId == second.serverId)
            await byQuery.close()
        }
    }

    // MARK: Resumption

    @Test(arguments: Transport.allCases)
    func reconnectingWithTheLastCursorGetsTheMissedEventsOnceInOrder(_ transport: Transport) async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            var stream = try await EventStream.open(transport, port: client.port, token: bob.token, cursor: nil)
            for index in 1...3 { try await client.sendAccepted(alice, to: conversation.id, body: "a\(index)") }
            var seen: [(id: String?, event: ServerEvent)] = []
            for _ in 1...3 { if let item = await stream.next(.seconds(10)) { seen.append(item) } }
            #expect(seen.map { $0.event.newMessage?.body } == ["a1", "a2", "a3"])
            #expect(seen.allSatisfy { $0.id != nil && $0.id == $0.event.cursor })
            let lastCursor = try #require(seen.last?.id)
            await stream.close()

            // Missed while disconnected: four messages and a receipt.
            for index in 1...4 { try await client.sendAccepted(alice, to: conversation.id, body: "b\(index)") }
            _ = try await client.waitForCount(alice, conversation.id, 7)
            let receipt = try await client.receipt(alice, conversation.id, kind: .delivered, upToSeq: 7)
            #expect(receipt.status == 200)
            let pulled = try await client.sync(bob, cursor: lastCursor)

            stream = try await EventStream.open(transport, port: client.port, token: bob.token, cursor: lastCursor)
            var replayed: [(id: String?, event: ServerEvent)] = []
            for _ in 1...5 { if let item = await stream.next(.seconds(10)) { replayed.append(item) } }
            #expect(replayed.map(\.event.type) == ["message.new", "message.new", "message.new", "message.new", "receipt"])
            #expect(replayed.prefix(4).map { $0.event.newMessage?.body } == ["b1", "b2", "b3", "b4"])
            #expect(replayed.prefix(4).map { $0.event.newMessage?.seq } == [4, 5, 6, 7])
            #expect(replayed.last?.event.receipt?.userId == "alice")
            #expect(replayed.last?.event.receipt?.upToSeq == 7)
            #expect(replayed.allSatisfy { $0.id != nil && $0.id == $0.event.cursor })
            #expect(Set(replayed.compactMap(\.id)).count == 5)
            // The same events as a pull from the same cursor.
            #expect(replayed.map(\.event) == pulled.events)

            // Then the live ones, and nothing twice.
            try await client.sendAccepted(alice, to: conversation.id, body: "c1")
            let live = await stream.next(.seconds(10))
            #expect(live?.event.newMessage?.body == "c1")
            #expect(live?.event.newMessage?.seq == 8)
            #expect(await stream.drain(for: .milliseconds(300)).isEmpty)
            await stream.close()
        }
    }

    @Test(arguments: Transport.allCases)
    func withoutCursorTheStreamStartsLive(_ transport: Transport) async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            for index in 1...3 { try await client.sendAccepted(alice, to: conversation.id, body: "old\(index)") }
            _ = try await client.waitForCount(bob, conversation.id, 3)
            _ = try await client.receipt(alice, conversation.id, kind: .read, upToSeq: 3)
            let stream = try await EventStream.open(transport, port: client.port, token: bob.token, cursor: nil)
            try await client.sendAccepted(alice, to: conversation.id, body: "new")
            let first = await stream.next(.seconds(10))
            #expect(first?.event.newMessage?.body == "new")
            #expect(first?.event.newMessage?.seq == 4)
            let extra = await stream.drain(for: .milliseconds(200))
            #expect(extra.isEmpty, "\(extra)")
            await stream.close()
        }
    }

    @Test(arguments: Transport.allCases)
    func unknownCursorGetsResetFirst(_ transport: Transport) async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            try await client.sendAccepted(alice, to: conversation.id, body: "before")
            _ = try await client.waitForCount(bob, conversation.id, 1)
            let real = try await client.headCursor(bob)
            for cursor in ["abc-5", "deadbeef-999999", "12345", try TestCursor.moved(real) { $0 + 999_999_999 }, "x"] {
                let stream = try await EventStream.open(transport, port: client.port, token: bob.token, cursor: cursor)
                let first = await stream.next(.seconds(10))
                #expect(first?.event.isReset == true, "\(cursor): \(String(describing: first))")
                #expect(first?.id != nil)
                #expect(first?.id == first?.event.cursor)
                // Then live events, continuing after the reset.
                let accepted = try await client.sendAccepted(alice, to: conversation.id, body: "after \(cursor)")
                let next = await stream.next(.seconds(10))
                #expect(next?.event.newMessage?.serverId == accepted.serverId, "\(cursor)")
                await stream.close()
                // The reset's cursor is a valid one: resuming from it replays what came after, without a reset.
                let resumed = try await client.sync(bob, cursor: try #require(first?.event.cursor))
                #expect(resumed.events.map(\.type) == ["message.new"], "\(cursor)")
            }
        }
    }

    @Test func unknownCursorGetsResetFirstOnSync() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            try await client.sendAccepted(alice, to: conversation.id, body: "before")
            _ = try await client.waitForCount(bob, conversation.id, 1)
            let real = try await client.headCursor(bob)
            for cursor in ["abc-5", "deadbeef-999999", "12345", try TestCursor.moved(real) { $0 + 999_999_999 }] {
                let page = try await client.sync(bob, cursor: cursor)
                #expect(page.events.map(\.type) == ["reset"], "\(cursor)")
                let resetCursor = try #require(page.events.first?.cursor)
                #expect(page.cursor == resetCursor)
                #expect(page.hasMore == false)
                let raw = try await client.request(.GET, "/v1/sync?cursor=\(cursor)", token: bob.token)
                let first = (raw.jsonObject?["events"] as? [Any])?.first as? [String: Any]
                #expect(first?["type"] as? String == "reset")
                #expect(first?["cursor"] as? String == resetCursor)
                let again = try await client.sync(bob, cursor: resetCursor)
                #expect(again.events.isEmpty)
            }
        }
    }

    @Test func expiredCursorGetsReset() async throws {
        try await withTestServer(configure: {
            $0.eventRetention = .milliseconds(100)
            $0.pruneInterval = .milliseconds(100)
        }) { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let old = try await client.headCursor(bob)
            try await client.sendAccepted(alice, to: conversation.id, body: "one")
            _ = try await client.waitForCount(bob, conversation.id, 1)
            try await Task.sleep(for: .milliseconds(150))
            try await client.sendAccepted(alice, to: conversation.id, body: "two")
            _ = try await client.waitForCount(bob, conversation.id, 2)
            // Once "one"'s event is pruned, the old cursor has missed events: reset.
            let deadline = ContinuousClock.now + .seconds(10)
            var page = try await client.sync(bob, cursor: old)
            while page.events.first?.isReset != true, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
                page = try await client.sync(bob, cursor: old)
            }
            #expect(page.events.first?.isReset == true, "\(page.events.map(\.type))")
            #expect(!page.events.contains { $0.newMessage?.body == "one" })
        }
    }

    @Test func malformedCursorIs400() async throws {
        try await withTestServer { client in
            let (_, bob, _) = try await Self.setUp(client)
            for cursor in [String(repeating: "a", count: 513), "a%20b", "%20", "a%09b", "", "caf%C3%A9-1"] {
                expectError(try await client.request(.GET, "/v1/sync?cursor=\(cursor)", token: bob.token), 400, .invalidRequest, "sync \(cursor)")
                expectError(try await client.request(.GET, "/v1/events?cursor=\(cursor)", token: bob.token), 400, .invalidRequest, "events \(cursor)")
                await #expect(throws: (any Error).self, "ws \(cursor)") {
                    try await TestWebSocket.connect(port: client.port, token: bob.token, cursor: cursor)
                }
            }
            // The refused upgrade is answered as the HTTP call: 400 invalid_request with the error body.
            for cursor in [String(repeating: "a", count: 513), "a%20b", "caf%C3%A9-1"] {
                let refused = try await BrowserTests.upgrade(client, token: bob.token, cursor: cursor, headers: [:])
                #expect(refused.status == 400 && refused.error?.error.code == .invalidRequest, "ws \(cursor): \(refused.head)")
                #expect(refused.head.lowercased().contains("connection: close"), "\(refused.head)")
            }
            for header in [String(repeating: "a", count: 513), "a b"] {
                let answer = try await client.request(.GET, "/v1/events", token: bob.token, headers: ["Last-Event-ID": header])
                expectError(answer, 400, .invalidRequest, "Last-Event-ID \(header)")
            }
        }
    }

    /// A browser's `EventSource` opened with `?cursor=<saved>` reconnects to the same URL and adds the last id it
    /// received as `Last-Event-ID`: the header is the newer position and wins, so nothing is replayed twice.
    @Test func lastEventIDWinsOverTheCursorParameter() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let saved = try await client.headCursor(bob)
            for index in 1...3 { try await client.sendAccepted(alice, to: conversation.id, body: "m\(index)") }
            _ = try await client.waitForCount(bob, conversation.id, 3)
            let seen = try await client.sync(bob, cursor: saved).events
            #expect(seen.map { $0.newMessage?.body } == ["m1", "m2", "m3"])
            let lastEventID = try #require(seen[1].cursor)

            let sse = try await TestSSE.open(port: client.port, token: bob.token, query: "cursor=\(saved)", headers: ["Last-Event-ID": lastEventID])
            #expect(sse.status.withLockedValue { $0 } == 200)
            let replayed = await sse.events.collect(timeout: .seconds(10)) { $0.count == 1 }
            #expect(replayed.map { $0.serverEvent?.newMessage?.body } == ["m3"])
            #expect(await sse.events.drain(for: .milliseconds(300)).isEmpty, "only what came after Last-Event-ID")
            await sse.close()

            // The header is validated like the parameter: malformed is the same 400, beside a good parameter too; and a
            // malformed parameter is 400 beside a good header. (Opened as streams first: a stream that is wrongly
            // accepted never ends.)
            let malformed = [String(repeating: "a", count: 513), "a b", "caf\u{e9}-1"].map { ("cursor=\(saved)", $0) } + [("cursor=a%20b", lastEventID)]
            for (query, header) in malformed {
                let opened = try await TestSSE.open(port: client.port, token: bob.token, query: query, headers: ["Last-Event-ID": header])
                let status = opened.status.withLockedValue { $0 }
                await opened.close()
                #expect(status == 400, "\(query), Last-Event-ID \(header)")
                guard status == 400 else { continue }
                let answer = try await client.request(.GET, "/v1/events?\(query)", token: bob.token, headers: ["Last-Event-ID": header])
                expectError(answer, 400, .invalidRequest, "\(query), Last-Event-ID \(header)")
            }
        }
    }

    /// How a test's SSE client goes away.
    enum Disconnect: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// The HTTP client closes its connection.
        case clientCloses
        /// The socket is reset (closed with SO_LINGER 0).
        case reset
        /// The client closes only its sending side (a FIN), as a client that is done does; it could still read.
        case halfClose
        var testDescription: String { rawValue }
    }

    /// A closed SSE client is offline at once: the server notices the connection's close, not a failed write. The
    /// keep-alive is an hour here, so nothing is written to the closed stream before the checks.
    @Test(arguments: Disconnect.allCases)
    func aClosedEventStreamIsOfflineAtOnce(_ disconnect: Disconnect) async throws {
        try await withTestServer(configure: { $0.keepAliveInterval = .seconds(3600) }) { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let aliceCursor = try await client.headCursor(alice)
            func openStreams() async throws -> Double { try await client.metric("pigeon_open_streams{transport=\"sse\"}") ?? 0 }
            func recipientsOnline() async throws -> Int? {
                let accepted = try await client.sendAccepted(alice, to: conversation.id, body: "anyone?")
                let deadline = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < deadline {
                    let stored = try await client.sync(alice, cursor: aliceCursor, limit: 1000).events.compactMap(\.stored)
                    if let event = stored.first(where: { $0.serverId == accepted.serverId }) { return event.recipientsOnline }
                    try await Task.sleep(for: .milliseconds(20))
                }
                return nil
            }
            let before = try await openStreams()
            var sse: TestSSE?
            var socket: RawStreamSocket?
            switch disconnect {
            case .clientCloses: sse = try await TestSSE.open(port: client.port, token: bob.token)
            case .reset, .halfClose:
                socket = try await RawStreamSocket.serverSentEvents(port: client.port, token: bob.token)
            }
            #expect(try await openStreams() == before + 1)
            #expect(try await recipientsOnline() == 1)

            switch disconnect {
            case .clientCloses: await sse?.close()
            case .reset:
                socket?.resetOnClose()
                socket = nil
            case .halfClose: socket?.closeWrite()
            }
            let deadline = ContinuousClock.now + .seconds(10)
            while try await openStreams() > before, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            #expect(try await openStreams() == before, "the stream still counts 10 s after the close")
            #expect(try await recipientsOnline() == 0)
            withExtendedLifetime(socket) {}
        }
    }

    // MARK: Sync

    @Test func syncPagesWithCursorContinuation() async throws {
        try await withTestServer { client in
            let (alice, bob, conversation) = try await Self.setUp(client)
            let start = try await client.sync(bob, cursor: nil)
            #expect(start.events.isEmpty)
            #expect(start.hasMore == false)
            for index in 1...7 { try await client.sendAccepted(alice, to: conversation.id, body: "m\(index)") }
            _ = try await client.waitForCount(bob, conversation.id, 7)

            var cursor = start.cursor
            var all: [ServerEvent] = []
            var pages: [(count: Int, hasMore: Bool)] = []
            for _ in 0..<4 {
                let page = try await client.sync(bob, cursor: cursor, limit: 3)
                pages.append((page.events.count, page.hasMore))
                if let last = page.events.last { #expect(page.cursor == last.cursor) } else { #expect(page.cursor == cursor) }
                all += page.events
                cursor = page.cursor
            }
            #expect(pages.map(\.count) == [3, 3, 1, 0])
            #expect(pages.map(\.hasMore) == [true, true, false, false])
            #expect(all.map { $0.newMessage?.body } == (1...7).map { "m\($0)" })
            #expect(Set(all.compactMap(\.cursor)).count == 7)
            // The same cursor again gives the same page (a pull does not consume).
            #expect(try await client.sync(bob, cursor: start.cursor, limit: 3).events == Array(all.prefix(3)))
            // One big page equals the small pages.
            #expect(try await client.sync(bob, cursor: start.cursor, limit: 100).events == all)
            // Default limit 100.
            let raw = try await client.request(.GET, "/v1/sync?cursor=\(start.cursor)", token: bob.token)
            #expect(try raw.decode(SyncResponse.self).events == all)
            #expect(Set(raw.jsonObject.map { Array($0.keys) } ?? []) == ["events", "cursor", "hasMore"])
            for query in ["limit=0", "limit=abc", "limit=-5"] {
                expectError(try await client.request(.GET, "/v1/sync?\(query)", token: bob.token), 400, .invalidRequest, query)
            }
        }
    }
}
