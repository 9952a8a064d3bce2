import Foundation
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import PigeonDomain
import PigeonProtocol
import ServiceLifecycle

extension StreamController {
    /// The WebSocket router: authenticates the upgrade request and runs the connection.
    func makeWebSocketRouter() -> Router<PigeonRequestContext> {
        let router = Router(context: PigeonRequestContext.self)
        router.middlewares.add(WebSocketAuthMiddleware(authenticator: authenticator, store: store))
        router.ws("/v1/ws") { _, context in
            context.device != nil && context.streamStart != nil ? .upgrade([:]) : .dontUpgrade
        } onUpgrade: { inbound, outbound, context in
            guard let device = context.requestContext.device, let start = context.requestContext.streamStart else { return }
            try await runWebSocket(
                device: device, tokenIssuedAt: context.requestContext.tokenIssuedAt, start: start, inbound: inbound, outbound: outbound,
                channel: context.requestContext.channel)
        }
        return router
    }

    /// Runs one WebSocket. Its operations are read and acted on by its ``WebSocketConnection`` on the event loop, its
    /// receipts written as they come (``ReceiptQueue``); the tasks here are the lane (the operations that must wait: the
    /// before-send hook, a store read), the backlog's writer, which then hands the stream to the connection, and the session's watch. A stream
    /// the server ends is closed with its code (4001, 4008, 4009); the close frame gets the close timeout to reach a
    /// client that may not read, then the socket is closed regardless.
    private func runWebSocket(
        device: DeviceIdentity, tokenIssuedAt: Int64?, start: StreamStart, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter,
        channel: any Channel
    ) async throws {
        guard let connection = await WebSocketConnection.find(on: channel) else {
            // The upgrade watcher found no frame decoder to put the connection behind: Hummingbird's WebSocket
            // pipeline is not the one this server was built against. Every stream would end here, so say why, loudly.
            let pipeline = (try? await channel.eventLoop.submit { channel.pipeline.debugDescription }.get()) ?? "?"
            logger.critical(
                "the WebSocket pipeline has no frame decoder to put the stream's connection behind (Hummingbird's layout changed?): closed",
                metadata: ["pipeline": "\(pipeline)"])
            await Self.closing(within: streamLimits.closeTimeout) {
                try await outbound.close(.unexpectedServerError, reason: "server WebSocket pipeline mismatch")
            }
            return
        }
        let session = makeStreamSession(device: device, tokenIssuedAt: tokenIssuedAt, transport: "ws")
        let receipts = ReceiptQueue { [access, logger] key, upToSeq, written in
            access.recordReceipt(ReceiptRequest(kind: key.kind, upToSeq: upToSeq), conversationId: key.conversationId, device: device) { result in
                if case .failure(let error) = result {
                    session.send(type: "error", json: Self.errorFrame(nil, WireError.of(error, logger: logger, what: "a receipt")))
                }
                written()
            }
        }
        let operations = WebSocketOperations(
            controller: self, device: device, session: session, receipts: receipts, connection: connection,
            runLane: { [self] lane, operations in await runLane(lane, operations: operations) })
        let attachment = WebSocketConnection.Attachment(
            session: session, operations: operations, pauseReadingBytes: streamLimits.pauseReadingBytes,
            resumeReadingBytes: streamLimits.resumeReadingBytes)
        connection.eventLoop.execute { connection.value.attach(attachment) }
        let ended: StreamSession.EndReason?
        do {
            ended = try await withGracefulShutdownHandler {
                try await withThrowingTaskGroup(of: StreamTask.self) { group in
                    group.addTask {
                        // Data frames never get here (the connection takes them); this ends when the client closes.
                        defer { session.close() }
                        for try await _ in inbound.messages(maxSize: WebSocketConnection.maxMessageBytes) {}
                        return .ended(nil)
                    }
                    group.addTask {
                        // The backlog, written from here; then the connection writes the live stream on its loop, and
                        // this task is done (an idle stream holds no task for its writes).
                        var streamer = EventStreamer(store: self.store, session: session, start: start, idleInterval: nil)
                        while let frame = try await streamer.nextFromLog() {
                            try await session.write(cost: frame.cost) { try await outbound.write(.text(frame.json)) }
                        }
                        let handedOut = streamer.handedOut
                        let outlet = ConnectionOutlet(connection: connection)
                        connection.eventLoop.execute { connection.value.goLive(after: handedOut, log: self.store, outlet: outlet) }
                        return .wentLive
                    }
                    // Returns when the server ends the stream, or when it is closed (the client left, or graceful shutdown).
                    group.addTask { .ended(await session.watch(untilClosed: true)) }
                    // Whichever task ends first (but the backlog's writer), a stream the server ended reports why.
                    var ended: StreamSession.EndReason?
                    while let task = try await group.next() {
                        guard case .ended(let reason) = task else { continue }
                        ended = reason ?? session.endReason
                        break
                    }
                    session.close()
                    receipts.finish()
                    group.cancelAll()
                    return ended
                }
            } onGracefulShutdown: {
                session.close()
            }
        } catch {
            await operations.endLane()
            hub.unregister(session)
            throw error
        }
        await operations.endLane()
        hub.unregister(session)
        if let ended {
            let (code, reason) = ended.webSocketClose
            await Self.closing(within: streamLimits.closeTimeout) {
                try await outbound.close(.init(codeNumber: code), reason: reason)
            }
        }
    }

    /// How a task of a WebSocket's group ends: the backlog's writer once the connection writes the stream, the others
    /// when the stream ends (why, if the server ended it).
    private enum StreamTask: Sendable {
        case wentLive
        case ended(StreamSession.EndReason?)
    }

    /// Waits for `body` at most `timeout` (then cancels it and goes on without it; its errors are dropped). Not a
    /// task group, which would wait for a close that ignores cancellation (a peer that never answers the close frame).
    private static func closing(within timeout: Duration, _ body: @escaping @Sendable () async throws -> Void) async {
        _ = try? await withDeadline(timeout, body)
    }

    /// Acts on the operations the connection handed to the lane, in its order. With a before-send hook each takes a
    /// turn (``OperationTurns``, at most ``hookedOperationsInFlight`` at once) and runs in a task of its own: sends and
    /// edits wait for the hook side by side, and still append, as every other operation acts, in the socket's order.
    /// The connection hears of each one acted on (it reads inline again once the lane is empty).
    private func runLane(_ lane: AsyncStream<ClientOperation>, operations: WebSocketOperations) async {
        let turns = ingest.asksHook ? OperationTurns(limit: Self.hookedOperationsInFlight) : nil
        let (device, session, receipts) = (operations.device, operations.session, operations.receipts)
        await withDiscardingTaskGroup { group in
            for await operation in lane {
                if let turns {
                    let turn = Turn(turns: turns, ticket: await turns.take())
                    group.addTask {
                        await self.perform(operation, device: device, session: session, receipts: receipts, turn: turn) {
                            operations.laneFinished()
                        }
                    }
                } else {
                    await perform(operation, device: device, session: session, receipts: receipts, turn: nil) { operations.laneFinished() }
                }
            }
        }
    }

    /// Operations of one socket waiting for the before-send hook at once.
    static let hookedOperationsInFlight = 64

    /// An operation's place in its socket's order (``OperationTurns``).
    private struct Turn: Sendable {
        var turns: OperationTurns
        var ticket: Int
    }

    /// Runs `body` in `turn` (at once without one), then hands the turn on; `acted` runs once the operation acted
    /// (appended, or refused), before the next turn.
    private func inTurn(_ turn: Turn?, acted: @Sendable () -> Void, _ body: () async -> Void) async {
        if let turn { await turn.turns.wait(for: turn.ticket) }
        await body()
        acted()
        if let turn { turn.turns.finish(turn.ticket) }
    }

    /// The operation a text frame holds, or nil after answering it an `error` frame.
    func parseOperation(_ text: String, session: StreamSession) -> ClientOperation? {
        guard text.utf8.count <= maxBodyBytes else {
            session.send(
                type: "error",
                json: Self.errorFrame(Self.clientMessageId(in: text), PigeonError(.payloadTooLarge, "message is larger than \(maxBodyBytes) bytes")))
            return nil
        }
        do {
            let operation = try ClientOperationParser.parse(text)
            // As over HTTP: a key given twice is refused, whichever value a parser would keep.
            if let key = JSONDuplicateKeys.first(in: text.utf8) {
                throw PigeonError.invalid("the key \"\(key.prefix(80))\" appears twice in one object")
            }
            return operation
        } catch {
            session.send(type: "error", json: Self.errorFrame(Self.clientMessageId(in: text), WireError.of(error, logger: logger, what: "parsing an operation")))
            return nil
        }
    }

    /// Appends a prepared send, answered with its `ack` once accepted, or an `error` frame naming it (also when it could
    /// not be prepared): on the event loop (``WebSocketOperations/actNow(_:)``) or in the lane's turn.
    func append(_ prepared: Result<Ingest.Prepared, some Error>, clientMessageId: String, session: StreamSession) {
        switch prepared {
        case .success(let message):
            ingest.append(message) { result in
                switch result {
                case .success(let accepted):
                    session.send(type: "ack", json: Self.ackFrame(accepted.response))
                case .failure(let error):
                    session.send(type: "error", json: Self.errorFrame(clientMessageId, error))
                }
            }
        case .failure(let error):
            session.send(type: "error", json: Self.errorFrame(clientMessageId, WireError.of(error, logger: logger, what: "a send")))
        }
    }

    /// Performs one operation. A send or an edit is prepared (the hook asked) before its turn, and appended in it.
    private func perform(
        _ operation: ClientOperation, device: DeviceIdentity, session: StreamSession, receipts: ReceiptQueue, turn: Turn?,
        acted: @Sendable () -> Void
    ) async {
        switch operation {
        case .send(let conversationId, let request):
            let prepared: Result<Ingest.Prepared, any Error>
            do {
                prepared = .success(try await ingest.prepare(request, from: device, to: conversationId))
            } catch {
                prepared = .failure(error)
            }
            await inTurn(turn, acted: acted) { append(prepared, clientMessageId: request.clientMessageId, session: session) }
        case .receipt(let conversationId, let request):
            await inTurn(turn, acted: acted) { receipts.add(conversationId: conversationId, kind: request.kind, upToSeq: request.upToSeq) }
        case .typing(let conversationId, let active):
            await inTurn(turn, acted: acted) {
                do {
                    try await access.recordTyping(active: active, conversationId: conversationId, device: device)
                } catch {
                    session.send(type: "error", json: Self.errorFrame(nil, WireError.of(error, logger: logger, what: "a typing update")))
                }
            }
        case .edit(let conversationId, let serverId, let request):
            await change(
                .edit(request.body), serverId: serverId, clientMessageId: request.clientMessageId, clientTimestamp: request.clientTimestamp,
                device: device, conversationId: conversationId, session: session, turn: turn, acted: acted)
        case .delete(let conversationId, let serverId, let request):
            await change(
                .delete, serverId: serverId, clientMessageId: request.clientMessageId, clientTimestamp: request.clientTimestamp, device: device,
                conversationId: conversationId, session: session, turn: turn, acted: acted)
        case .react(let conversationId, let request):
            // Answered once durable, before the socket's next operation: the store's commit orders it.
            await inTurn(turn, acted: acted) {
                do {
                    let reacted = try await access.react(
                        conversationId: conversationId, serverId: request.serverId, key: request.key, action: request.action, device: device)
                    session.send(
                        type: "ack",
                        json: Self.ackFrame(
                            SendMessageResponse(
                                serverId: reacted.serverId, clientMessageId: request.clientMessageId, status: .stored,
                                acceptedAt: WallClock.nowMillis())))
                } catch {
                    session.send(type: "error", json: Self.errorFrame(request.clientMessageId, WireError.of(error, logger: logger, what: "a reaction")))
                }
            }
        }
    }

    /// An edit or a delete over the WebSocket: answered like a send (`ack` or `error`), appended in the socket's order.
    private func change(
        _ change: Ingest.Change, serverId: String, clientMessageId: String, clientTimestamp: Int64, device: DeviceIdentity, conversationId: String,
        session: StreamSession, turn: Turn?, acted: @Sendable () -> Void
    ) async {
        let prepared: Result<Ingest.Prepared, any Error>
        do {
            prepared = .success(
                try await ingest.prepareChange(
                    change, serverId: serverId, clientMessageId: clientMessageId, clientTimestamp: clientTimestamp, from: device, to: conversationId))
        } catch {
            prepared = .failure(error)
        }
        await inTurn(turn, acted: acted) {
            switch prepared {
            case .success(let prepared):
                ingest.append(prepared) { result in
                    switch result {
                    case .success(let accepted): session.send(type: "ack", json: Self.ackFrame(accepted.response))
                    case .failure(let error): session.send(type: "error", json: Self.errorFrame(clientMessageId, error))
                    }
                }
            case .failure(let error):
                session.send(type: "error", json: Self.errorFrame(clientMessageId, WireError.of(error, logger: logger, what: "an edit or delete")))
            }
        }
    }

    /// The `ack` frame, written by hand: one per send on the accept hot path.
    static func ackFrame(_ response: SendMessageResponse) -> String {
        var json = JSONText(capacity: 192)
        json.beginObject()
        json.member("type", "ack")
        json.member("clientMessageId", response.clientMessageId)
        json.member("serverId", response.serverId)
        json.member("status", response.status.rawValue)
        json.member("acceptedAt", response.acceptedAt)
        if let seq = response.seq { json.member("seq", seq) }
        if response.bodyReplaced == true { json.member("bodyReplaced", true) }
        if let body = response.body { json.member("body", body) }
        json.endObject()
        return json.string
    }

    static func errorFrame(_ clientMessageId: String?, _ error: PigeonError) -> String {
        let data = try? JSONEncoder().encode(ErrorFrame(clientMessageId: clientMessageId, error: error.detail))
        return data.map { String(decoding: $0, as: UTF8.self) } ?? "{\"type\":\"error\"}"
    }

    /// The `clientMessageId` of an operation that could not be decoded, so its error can name it.
    private static func clientMessageId(in text: String) -> String? {
        struct Probe: Decodable { var clientMessageId: String? }
        return (try? JSONDecoder().decode(Probe.self, from: Data(text.utf8)))?.clientMessageId
    }
}

/// Authenticates WebSocket upgrade requests (header or `access_token`) and fixes where the stream starts.
/// A request with a bad token or cursor is not upgraded: it is answered what an HTTP call would get (`401
/// unauthorized`, `400 invalid_request`, `503 overloaded`, with the error body), through the connection guard.
struct WebSocketAuthMiddleware: RouterMiddleware {
    let authenticator: Authenticator
    let store: any EventLog

    func handle(_ request: Request, context: PigeonRequestContext, next: (Request, PigeonRequestContext) async throws -> Response) async throws -> Response {
        var context = context
        // Hummingbird's WebSocket handler logs the first bytes of every frame at trace level, with this logger:
        // message bodies never reach the log.
        context.logger.logLevel = max(context.logger.logLevel, .debug)
        // Another path is not a route of this router: not upgraded, answered a bare 400 as before.
        guard request.uri.path.split(separator: "/").elementsEqual(["v1", "ws"]) else { return try await next(request, context) }
        do {
            let authenticated = try await authenticator.authenticate(request, allowQuery: true)
            context.device = authenticated.device
            context.tokenIssuedAt = authenticated.issuedAt
            context.streamStart = try await store.resolveStart(request.cursorParameter(allowHeader: false))
        } catch {
            // Not upgraded (no device or no start): answered with this error instead of a bare 400.
            let refusal = WireError.of(error, logger: context.logger, what: "resolving a WebSocket's start")
            context.device = nil
            context.streamStart = nil
            await ConnectionGuardHandler.refuseUpgrade(with: .webSocketUpgrade(refusal), on: context.channel)
        }
        return try await next(request, context)
    }
}
