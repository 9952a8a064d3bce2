import AsyncHTTPClient
import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol

/// The event stream over `GET /v1/ws`, operations out on the same socket. The socket lives in a task owned by this
/// object; ``close()`` ends it.
final class WebSocketEventStream: EventStreamConnection {
    private let buffer = FrameBuffer()
    private let outgoing: AsyncStream<String>.Continuation
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)

    private init(outgoing: AsyncStream<String>.Continuation) {
        self.outgoing = outgoing
    }

    static func open(url: String, token: String, timeout: Duration, pingInterval: Duration, logger: Logger) async throws -> WebSocketEventStream {
        let (outStream, outContinuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .unbounded)
        let connection = WebSocketEventStream(outgoing: outContinuation)
        let gate = ConnectGate()
        let settings = WebSocketConnector.Settings(
            headers: [("Authorization", "Bearer \(token)")], connectTimeout: timeout, pingInterval: pingInterval,
            closeTimeout: .seconds(1), maxFrameSize: 1 << 20)
        let buffer = connection.buffer
        let handler: WebSocketDataHandler<WebSocketConnector.Context> = { inbound, outbound, _ in
            gate.succeed()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    let decoder = JSONDecoder()
                    for try await message in inbound.messages(maxSize: 1 << 20) {
                        guard case .text(let text) = message else { continue }
                        do {
                            buffer.append(try decoder.decode(ServerFrame.self, from: Data(text.utf8)))
                        } catch {
                            logger.warning("undecodable frame skipped", metadata: ["frame": "\(text.prefix(200))", "error": "\(error)"])
                        }
                    }
                }
                group.addTask {
                    for await text in outStream { try await outbound.write(.text(text)) }
                }
                _ = try await group.next()
                group.cancelAll()
            }
        }
        let runTask = Task {
            do {
                try await WebSocketConnector.run(url: url, settings: settings, logger: logger, handler: handler)
                gate.fail(PigeonClientError(.network, "the WebSocket closed before it opened"))
                buffer.finish()
            } catch is WebSocketConnector.UpgradeDeclined {
                gate.fail(PigeonClientError(.webSocketRefused, "WebSocket \(url): the upgrade was refused"))
                buffer.finish()
            } catch {
                gate.fail(PigeonClientError(.network, "WebSocket \(url): \(error)"))
                buffer.finish()
            }
            outContinuation.finish()
        }
        connection.task.withLockedValue { $0 = runTask }
        do {
            try await gate.wait(timeout: timeout)
        } catch let error as PigeonClientError where error.code == .webSocketRefused {
            connection.close()
            throw await refusal(url: url, token: token, timeout: timeout) ?? error
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Why the server refused an upgrade, when it was the token: the same request without the upgrade answers `401`
    /// then (anything else, a proxy's refusal included, leaves the refusal as it was: `nil`).
    private static func refusal(url: String, token: String, timeout: Duration) async -> PigeonClientError? {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        guard let response = try? await HTTPClient.pigeonKit.execute(request, timeout: TimeAmount(timeout)),
            response.status == .unauthorized,
            let body = try? await response.body.collect(upTo: 1 << 16)
        else { return nil }
        return HTTPTransport.serverError(status: 401, headers: response.headers, body: body)
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
        task.withLockedValue { $0 }?.cancel()
    }
}
