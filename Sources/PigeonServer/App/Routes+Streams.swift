import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import PigeonProtocol
import ServiceLifecycle

extension PigeonCore {
    /// `GET /v1/events`: the device's stream as server-sent events, and the plain-HTTP answer to `GET /v1/ws`
    /// when it cannot be upgraded (bad token or cursor, or not a WebSocket request).
    func addStreamRoutes(to router: Router<PigeonRequestContext>) {
        router.get("/v1/events") { request, _ -> Response in
            let device = try await self.authenticate(request, allowQuery: true)
            let cursor = try self.cursorParameter(request, allowHeader: true)
            let session = self.hub.makeSession(device: device, transport: "sse")
            self.hub.register(session)
            let start: StreamStart
            do {
                start = try await self.store.resolveStart(cursor)
            } catch {
                self.hub.unregister(session)
                throw error
            }
            let headers: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-cache", HTTPField.Name("X-Accel-Buffering")!: "no"]
            return Response(
                status: .ok, headers: headers,
                body: ResponseBody { writer in
                    defer { self.hub.unregister(session) }
                    var streamer = EventStreamer(store: self.store, session: session, start: start, idleInterval: self.configuration.keepAliveInterval)
                    try await withGracefulShutdownHandler {
                        try await writer.write(ByteBuffer(string: "retry: 1000\n: connected\n\n"))
                        while let output = try await streamer.next() {
                            switch output {
                            case .idle:
                                try await writer.write(ByteBuffer(string: ": keep-alive\n\n"))
                            case .frame(let frame):
                                var text = ""
                                if let cursor = frame.cursor { text += "id: \(cursor)\n" }
                                text += "event: \(frame.type)\ndata: \(frame.json)\n\n"
                                try await writer.write(ByteBuffer(string: text))
                            }
                        }
                    } onGracefulShutdown: {
                        session.close()
                    }
                    try await writer.finish(nil)
                })
        }

        router.get("/v1/ws") { request, _ -> Response in
            _ = try await self.authenticate(request, allowQuery: true)
            _ = try self.cursorParameter(request, allowHeader: false)
            throw PigeonError.invalid("this endpoint needs a WebSocket upgrade request")
        }
    }

    /// The WebSocket router: authenticates the upgrade request and runs the connection.
    func makeWebSocketRouter() -> Router<PigeonRequestContext> {
        let router = Router(context: PigeonRequestContext.self)
        router.middlewares.add(WebSocketAuthMiddleware(core: self))
        router.ws("/v1/ws") { _, context in
            context.device != nil && context.streamStart != nil ? .upgrade([:]) : .dontUpgrade
        } onUpgrade: { inbound, outbound, context in
            guard let device = context.requestContext.device, let start = context.requestContext.streamStart else { return }
            try await self.runWebSocket(device: device, start: start, inbound: inbound, outbound: outbound)
        }
        return router
    }

    private func runWebSocket(
        device: DeviceIdentity, start: StreamStart, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter
    ) async throws {
        let session = hub.makeSession(device: device, transport: "ws")
        hub.register(session)
        defer { hub.unregister(session) }
        let receipts = ReceiptQueue()
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    defer { session.close() }
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message else {
                            session.send(type: "error", json: Self.errorFrame(nil, PigeonError.invalid("send JSON text messages, not binary")))
                            continue
                        }
                        await self.handleOperation(text, device: device, session: session, receipts: receipts)
                        while session.queuedCount > 8_192, !session.isClosed {
                            try await Task.sleep(for: .milliseconds(1))
                        }
                    }
                }
                group.addTask {
                    while let batch = await receipts.next() {
                        for (key, upToSeq) in batch {
                            do {
                                _ = try await self.recordReceipt(
                                    ReceiptRequest(kind: key.kind, upToSeq: upToSeq), conversationId: key.conversationId, device: device)
                            } catch {
                                session.send(type: "error", json: Self.errorFrame(nil, error as? PigeonError ?? PigeonError(.internalError, "receipt failed")))
                            }
                        }
                    }
                }
                group.addTask {
                    var streamer = EventStreamer(store: self.store, session: session, start: start, idleInterval: nil)
                    while let output = try await streamer.next() {
                        if case .frame(let frame) = output { try await outbound.write(.text(frame.json)) }
                    }
                }
                _ = try await group.next()
                session.close()
                receipts.finish()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            session.close()
        }
    }

    private func handleOperation(_ text: String, device: DeviceIdentity, session: StreamSession, receipts: ReceiptQueue) async {
        guard text.utf8.count <= configuration.maxBodyBytes else {
            session.send(
                type: "error",
                json: Self.errorFrame(Self.clientMessageId(in: text), PigeonError(.payloadTooLarge, "message is larger than \(configuration.maxBodyBytes) bytes")))
            return
        }
        let operation: ClientOperation
        do {
            operation = try ClientOperationParser.parse(text)
        } catch {
            session.send(type: "error", json: Self.errorFrame(Self.clientMessageId(in: text), error as? PigeonError ?? .invalid("malformed JSON")))
            return
        }
        switch operation {
        case .send(let conversationId, let request):
            do {
                let message = try await ingest.prepare(request, from: device, to: conversationId)
                ingest.append(message) { result in
                    switch result {
                    case .success(let accepted):
                        session.send(type: "ack", json: Self.ackFrame(accepted.response))
                    case .failure(let error):
                        session.send(type: "error", json: Self.errorFrame(request.clientMessageId, error))
                    }
                }
            } catch {
                session.send(type: "error", json: Self.errorFrame(request.clientMessageId, error as? PigeonError ?? PigeonError(.internalError, "send failed")))
            }
        case .receipt(let conversationId, let request):
            receipts.add(conversationId: conversationId, kind: request.kind, upToSeq: request.upToSeq)
        case .typing(let conversationId, let active):
            do {
                try await recordTyping(active: active, conversationId: conversationId, device: device)
            } catch {
                session.send(type: "error", json: Self.errorFrame(nil, error as? PigeonError ?? PigeonError(.internalError, "typing failed")))
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
/// A request with a bad token or cursor is not upgraded and falls through to the HTTP route, which answers
/// 401 or 400.
struct WebSocketAuthMiddleware: RouterMiddleware {
    let core: PigeonCore

    func handle(_ request: Request, context: PigeonRequestContext, next: (Request, PigeonRequestContext) async throws -> Response) async throws -> Response {
        var context = context
        context.device = try? await core.authenticate(request, allowQuery: true)
        if context.device != nil {
            // A malformed cursor (or a store failure) leaves no start: not upgraded, the HTTP route answers.
            context.streamStart = try? await core.store.resolveStart(core.cursorParameter(request, allowHeader: false))
        }
        return try await next(request, context)
    }
}
