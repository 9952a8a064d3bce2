import PigeonProtocol

/// Keeps the device's one event stream: opens it (WebSocket, or server-sent events), reconnects with backoff, reads
/// it (answers to the ``OutboxDispatcher``, events through ``EngineShared/apply(_:)``), and signs out for good when
/// the server refuses the token.
struct ConnectionLoop: EnginePart {
    let shared: EngineShared
    let dispatcher: OutboxDispatcher

    /// Keeps one event stream open while the network is enabled, reconnecting with backoff; on each new
    /// connection, wakes the loops that have work for it.
    func run() async {
        var backoff = ReconnectBackoff(base: settings.reconnectBaseDelay, max: settings.reconnectMaxDelay)
        while !Task.isCancelled, connectionState != .signedOut {
            guard isNetworkEnabled else {
                setState(.offline)
                await connectionWake.wait()
                continue
            }
            setState(.connecting)
            var refusedToken: PigeonClientError?
            do {
                let connection = try await openStream()
                backoff.reset()
                let stillWanted = slot.withLockedValue { slot -> Bool in
                    guard slot.networkEnabled else { return false }
                    slot.connection = connection
                    slot.connectionGeneration += 1
                    slot.lastError = nil
                    slot.receiptsSent = [:]
                    return true
                }
                guard stillWanted else {
                    connection.close()
                    continue
                }
                setState(.online)
                outboxWake.notify()
                receiptWake.notify()
                gapWake.notify()
                let (cursor, needsFullSync) = try await store.syncState()
                if cursor == nil || needsFullSync { catchUpWake.notify() }
                try await consume(connection)
            } catch is CancellationError {
                break
            } catch {
                let error = error as? PigeonClientError ?? PigeonClientError(.network, "\(error)")
                slot.withLockedValue { $0.lastError = error }
                logger.debug("event stream failed", metadata: ["error": "\(error)"])
                if error.refusesToken { refusedToken = error }
            }
            let connection = slot.withLockedValue { slot -> (any EventStreamConnection)? in
                defer { slot.connection = nil }
                return slot.connection
            }
            connection?.close()
            outbox.withLockedValue { $0.connectionLost() }
            setState(.offline)
            if let refusedToken {
                signOut(refusedToken)
                return
            }
            guard !Task.isCancelled, isNetworkEnabled else { continue }
            await connectionWake.wait(timeout: backoff.nextDelay(jitter: jitter()))
        }
    }

    /// The configured stream; `.automatic` tries a WebSocket and falls back to server-sent events when the
    /// upgrade is refused (a proxy that blocks WebSockets) but HTTP works.
    private func openStream() async throws -> any EventStreamConnection {
        let cursor = try await store.syncState().cursor
        switch settings.streamTransport {
        case .webSocket: return try await transport.openStream(kind: .webSocket, cursor: cursor)
        case .serverSentEvents: return try await transport.openStream(kind: .serverSentEvents, cursor: cursor)
        case .automatic:
            do {
                return try await transport.openStream(kind: .webSocket, cursor: cursor)
            } catch let error as PigeonClientError where error.code == .webSocketRefused {
                return try await transport.openStream(kind: .serverSentEvents, cursor: cursor)
            }
        }
    }

    /// Reads the stream until it ends: answers go to the outbox, events to the receiver (persisted, then
    /// announced), and what they reveal (gaps, a reset, receipts owed) wakes the loop that handles it.
    private func consume(_ connection: any EventStreamConnection) async throws {
        while let frames = try await connection.nextBatch() {
            var events: [Incoming] = []
            events.reserveCapacity(frames.count)
            for frame in frames {
                switch frame {
                case .ack(let ack):
                    await dispatcher.accepted(clientMessageId: ack.clientMessageId, response: SendMessageResponse(
                        serverId: ack.serverId, clientMessageId: ack.clientMessageId, status: ack.status, acceptedAt: ack.acceptedAt, seq: ack.seq,
                        bodyReplaced: ack.bodyReplaced, body: ack.body))
                case .error(let error):
                    if let clientMessageId = error.clientMessageId {
                        await dispatcher.refusedOrTransient(clientMessageId: clientMessageId, error: PigeonClientError(
                            .server, error.error.message, serverError: error.error, httpStatus: error.error.code.httpStatus))
                    } else {
                        logger.debug("server refused an operation", metadata: ["error": "\(error.error.message)"])
                    }
                case .event(let event):
                    events.append(.event(event))
                }
            }
            if !events.isEmpty { try await apply(events) }
        }
    }

    /// Typing goes out on the open connection (whichever kind), or over HTTP while there is none.
    func setTyping(conversationId: String, active: Bool) async throws {
        if let connection = onlineConnection {
            try await connection.sendTyping(active, in: conversationId)
        } else {
            try await transport.postTyping(conversationId: conversationId, active: active)
        }
    }

    /// The server refused the token: the client stops for good (no stream, so no sends, receipts or fetches; nothing
    /// is lost locally), moves to ``ConnectionState/signedOut`` and says so once.
    func signOut(_ error: PigeonClientError) {
        let (first, connection) = slot.withLockedValue { slot -> (Bool, (any EventStreamConnection)?) in
            guard slot.state != .signedOut else { return (false, nil) }
            slot.state = .signedOut
            slot.lastError = error
            defer { slot.connection = nil }
            return (true, slot.connection)
        }
        guard first else { return }
        connection?.close()
        hub.emit(.connectionStateChanged(.signedOut))
        logger.info("the server refused this device's token; signed out", metadata: ["error": "\(error)"])
        hub.emit(.signedOut(error))
    }
    /// Closes the open stream, if any, and reconnects at once (without the backoff of a failed attempt): a push
    /// means the server saw no stream from this device, so a connection the engine still holds from before is
    /// presumed dead (a suspended app's socket, which would swallow sends and receipts until its liveness check).
    /// Whether there was one to close.
    @discardableResult
    func replaceConnection() -> Bool {
        let connection = slot.withLockedValue { $0.connection }
        guard let connection else { return false }
        connectionWake.notify()
        connection.close()
        return true
    }}

extension PigeonClientError {
    /// Whether the server refused the token itself (`401 unauthorized`): revoked, or no longer valid.
    var refusesToken: Bool { httpStatus == 401 || serverError?.code == .unauthorized }
}
