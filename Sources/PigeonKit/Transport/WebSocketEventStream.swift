import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol

/// The event stream over `GET /v1/ws`, operations out on the same socket. The socket lives in a task owned by this
/// object; ``close()`` ends it (the closing handshake, bounded by a second).
final class WebSocketEventStream: EventStreamConnection {
    private let buffer = FrameBuffer()
    private let outgoing: AsyncStream<String>.Continuation
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)
    /// The upgrade completed: from then on ``close()`` closes politely instead of cancelling the attempt.
    private let opened = NIOLockedValueBox(false)

    private init(outgoing: AsyncStream<String>.Continuation) {
        self.outgoing = outgoing
    }

    static func open(transport: HTTPTransport, url: String, timeout: Duration, pingInterval: Duration) async throws -> WebSocketEventStream {
        let (outStream, outContinuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .unbounded)
        let connection = WebSocketEventStream(outgoing: outContinuation)
        let gate = ConnectGate()
        let settings = WebSocketSession.Settings(pingInterval: pingInterval, closeTimeout: .seconds(1), maxMessageSize: 1 << 20)
        let buffer = connection.buffer
        let logger = transport.logger
        let opened = connection.opened
        let runTask = Task {
            do {
                let webSocket = try await WebSocketConnector.connect(
                    url: url, headers: [("Authorization", "Bearer \(transport.token)")], trust: transport.trust, connectTimeout: timeout,
                    maxFrameSize: 1 << 20)
                opened.withLockedValue { $0 = true }
                gate.succeed()
                let decoder = JSONDecoder()
                try await WebSocketSession.run(webSocket, settings: settings, outgoing: outStream) { text in
                    do {
                        await buffer.append(try decoder.decode(ServerFrame.self, from: Data(text.utf8)))
                    } catch {
                        logger.warning("undecodable frame skipped", metadata: ["frame": "\(text.prefix(200))", "error": "\(error)"])
                    }
                }
                gate.fail(PigeonClientError(.network, "the WebSocket closed before it opened"))
            } catch is WebSocketConnector.UpgradeDeclined {
                gate.fail(PigeonClientError(.webSocketRefused, "WebSocket \(url): the upgrade was refused"))
            } catch {
                logger.debug("the WebSocket ended", metadata: ["error": "\(error)"])
                gate.fail(HTTPTransport.isConnectTimeout(error)
                    ? PigeonClientError(.timeout, "WebSocket \(url): no connection in time")
                    : PigeonClientError(.network, "WebSocket \(url): \(error)"))
            }
            buffer.finish()
            outContinuation.finish()
        }
        connection.task.withLockedValue { $0 = runTask }
        do {
            try await gate.wait(timeout: timeout)
        } catch let error as PigeonClientError where error.code == .webSocketRefused {
            connection.close()
            throw await refusal(transport: transport, url: url) ?? error
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Why the server refused an upgrade, when it was the token: the same request without the upgrade answers `401`
    /// then (anything else, a proxy's refusal included, leaves the refusal as it was: `nil`).
    private static func refusal(transport: HTTPTransport, url: String) async -> PigeonClientError? {
        guard let target = ServerAddress(url) else { return nil }
        var request = HTTP1Request(method: .GET, uri: target.uri)
        request.headers.add(name: "Authorization", value: "Bearer \(transport.token)")
        guard let (head, body) = try? await transport.execute(request, route: "/v1/ws", limit: 1 << 16), head.status == .unauthorized else {
            return nil
        }
        return HTTPTransport.serverError(status: 401, headers: head.headers, body: body)
    }

    func nextBatch() async throws -> [ServerFrame]? {
        try await buffer.nextBatch()
    }

    func send(_ request: SendMessageRequest, to conversationId: String) async -> MessageHandover {
        do {
            try write(.send(conversationId: conversationId, request))
            return .queued
        } catch {
            return .connectionClosed
        }
    }

    func edit(_ request: EditMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover {
        do {
            try write(.edit(conversationId: conversationId, serverId: serverId, request))
            return .queued
        } catch {
            return .connectionClosed
        }
    }

    func delete(_ request: DeleteMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover {
        do {
            try write(.delete(conversationId: conversationId, serverId: serverId, request))
            return .queued
        } catch {
            return .connectionClosed
        }
    }

    func react(_ request: ReactRequest, in conversationId: String) async -> MessageHandover {
        do {
            try write(.react(conversationId: conversationId, request))
            return .queued
        } catch {
            return .connectionClosed
        }
    }

    func sendReceipt(_ request: ReceiptRequest, to conversationId: String) async throws {
        try write(.receipt(conversationId: conversationId, request))
    }

    func sendTyping(_ active: Bool, in conversationId: String) async throws {
        try write(.typing(conversationId: conversationId, active: active))
    }

    /// Queues an operation on the socket; throws when the connection is closed.
    private func write(_ operation: ClientOperation) throws {
        guard !buffer.isFinished else { throw PigeonClientError(.network, "the connection is closed") }
        let data = try JSONEncoder().encode(operation)
        outgoing.yield(String(decoding: data, as: UTF8.self))
    }

    func close() {
        buffer.finish()
        outgoing.finish()
        // Once open, the session closes itself (its close frame, the server's answer or a second); before, the
        // attempt is cancelled, which closes its connection.
        if !opened.withLockedValue({ $0 }) { task.withLockedValue { $0 }?.cancel() }
    }
}
