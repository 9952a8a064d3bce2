import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PigeonDomain
import PigeonProtocol
import Logging
import ServiceLifecycle

/// A device's event log: `GET /v1/sync` (pages of it), `GET /v1/events` (its stream as server-sent events), and the
/// WebSocket at `/v1/ws` (its stream, and sends, receipts and typing going the other way), for an authenticated
/// device (``DeviceRequestContext``).
struct StreamController: Sendable {
    let store: any EventLog
    let hub: StreamHub
    let ingest: Ingest
    let access: ConversationAccess
    let authenticator: Authenticator
    let metrics: PigeonMetrics
    let streamLimits: StreamLimits
    let keepAliveInterval: Duration
    let maxBodyBytes: Int
    let logger: Logger

    /// `GET /v1/sync` (token in the header only).
    func addSyncRoutes(to group: RouterGroup<DeviceRequestContext>) {
        group.get("/sync", use: sync)
    }

    /// `GET /v1/events`, and the plain-HTTP answer to `GET /v1/ws` when it cannot be upgraded (not a WebSocket
    /// request); the token may be in the query (`access_token`).
    func addStreamRoutes(to group: RouterGroup<DeviceRequestContext>) {
        group.get("/events", use: serverSentEvents)
        group.get("/ws") { request, _ -> Response in
            _ = try request.cursorParameter(allowHeader: false)
            throw PigeonError.invalid("this endpoint needs a WebSocket upgrade request")
        }
    }

    @Sendable func sync(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let cursor = try request.cursorParameter(allowHeader: false)
        let pageLimit = Int(try request.integerParameter("limit", range: 1...1000) ?? 100)
        let start = try await store.resolveStart(cursor)
        var events = try await store.events(for: context.device, after: start.after, limit: pageLimit + 1)
        let hasMore = events.count > pageLimit
        if hasMore { events.removeLast() }
        var position = start.after
        var frames: [String] = []
        frames.reserveCapacity(events.count + 1)
        if start.reset { frames.append("{\"type\":\"reset\",\"cursor\":\"\(store.cursor(position))\"}") }
        for event in events {
            position.advance(past: event)
            frames.append(event.frame(cursor: store.cursor(position)))
        }
        let next = store.cursor(position)
        let json = "{\"events\":[\(frames.joined(separator: ","))],\"cursor\":\"\(next)\",\"hasMore\":\(hasMore)}"
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: .init(string: json)))
    }

    @Sendable func serverSentEvents(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let cursor = try request.cursorParameter(allowHeader: true)
        let session = makeStreamSession(device: context.device, tokenIssuedAt: context.tokenIssuedAt, transport: "sse")
        let start: StreamStart
        do {
            start = try await store.resolveStart(cursor)
        } catch {
            hub.unregister(session)
            throw error
        }
        let clientClosed = await ConnectionGuardHandler.clientClosed(on: context.channel)
        let headers: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-cache", HTTPField.Name("X-Accel-Buffering")!: "no"]
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                let ended = try await self.runServerSentEvents(session: session, start: start, clientClosed: clientClosed, writer: writer)
                // Ended by the server (too slow, write timeout, replaced): the connection is closed, not the
                // response finished, as the client may not be reading; it reconnects with its last id. A revoked
                // device's stream is finished: its reconnection gets 401.
                if let ended, ended != .revoked { throw StreamEnded(reason: ended) }
                try await writer.finish(nil)
            })
    }

    /// A registered session of `device` (its token issued at `tokenIssuedAt`) under the configured stream limits.
    func makeStreamSession(device: DeviceIdentity, tokenIssuedAt: Int64?, transport: String) -> StreamSession {
        let metrics = self.metrics
        let session = hub.makeSession(device: device, tokenIssuedAt: tokenIssuedAt, transport: transport, limits: streamLimits) {
            metrics.limitHit($0)
        }
        hub.register(session, maxStreamsPerDevice: streamLimits.maxStreamsPerDevice)
        return session
    }

    /// Writes the session's stream as server-sent events until it closes, or until `clientClosed` completes (the
    /// client closed the connection: the device is offline at once, not after writes to it failed); the reason if the
    /// server ended it.
    private func runServerSentEvents(
        session: StreamSession, start: StreamStart, clientClosed: EventLoopFuture<Void>, writer: any ResponseBodyWriter
    ) async throws -> StreamSession.EndReason? {
        defer { hub.unregister(session) }
        let output = ServerSentEventWriter(writer: writer)
        let streamer = EventStreamer(store: store, session: session, start: start, idleInterval: keepAliveInterval)
        let clientGone = AsyncSignal()
        clientClosed.whenComplete { _ in clientGone.notify() }
        return try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: StreamSession.EndReason?.self) { group in
                group.addTask {
                    var streamer = streamer
                    try await session.write(cost: 0) { try await output.write("retry: 1000\n: connected\n\n") }
                    while let next = try await streamer.next() {
                        switch next {
                        case .idle:
                            try await session.write(cost: 0) { try await output.write(": keep-alive\n\n") }
                        case .frame(let frame):
                            var text = ""
                            if let cursor = frame.cursor { text += "id: \(cursor)\n" }
                            text += "event: \(frame.type)\ndata: \(frame.json)\n\n"
                            try await session.write(cost: frame.cost) { try await output.write(text) }
                        }
                    }
                    return nil
                }
                group.addTask { await session.watch() }
                group.addTask {
                    await clientGone.wait()
                    return nil
                }
                // Whichever task ends first, a stream the server ended reports why (the writer may see it first).
                let ended = (try await group.next() ?? nil) ?? session.endReason
                session.close()
                group.cancelAll()
                return ended
            }
        } onGracefulShutdown: {
            session.close()
        }
    }
}

/// A server-sent event stream ended by the server (``StreamSession/EndReason``): the connection is closed.
struct StreamEnded: Error {
    var reason: StreamSession.EndReason
}

/// The response body writer of an SSE stream, handed to the task that writes the events while the route's own
/// task waits for that task and the session's watch; only one of them uses it at a time.
private final class ServerSentEventWriter: @unchecked Sendable {
    private var writer: any ResponseBodyWriter

    init(writer: any ResponseBodyWriter) {
        self.writer = writer
    }

    func write(_ text: String) async throws {
        try await writer.write(ByteBuffer(string: text))
    }
}
