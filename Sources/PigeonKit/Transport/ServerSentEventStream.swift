import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol

/// The event stream over `GET /v1/events` (server-sent events), for networks that block WebSockets. Operations go
/// out as HTTP requests through `operations`, each answered at once.
final class ServerSentEventStream: EventStreamConnection {
    private let operations: any PigeonTransport
    private let buffer = FrameBuffer()
    private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)

    private init(operations: any PigeonTransport) {
        self.operations = operations
    }

    /// Opens the stream at `uri` (the server's path included) and reads it in a task of its own: the stream ends when
    /// the server closes it, on a network error, or after `idleTimeout` without a byte (not even the server's
    /// keep-alive comment).
    static func open(transport: HTTPTransport, uri: String, timeout: Duration, idleTimeout: Duration) async throws -> ServerSentEventStream {
        let connection = ServerSentEventStream(operations: transport)
        let gate = ConnectGate()
        let buffer = connection.buffer
        var request = HTTP1Request(method: .GET, uri: uri)
        request.headers.add(name: "Authorization", value: "Bearer \(transport.token)")
        request.headers.add(name: "Accept", value: "text/event-stream")
        let runTask = Task {
            do {
                try await transport.http.execute(
                    request, on: transport.address(), trust: transport.trust, connectTimeout: timeout, timeout: nil
                ) { head, body in
                    guard head.status == .ok else {
                        throw HTTPTransport.serverError(status: Int(head.status.code), headers: head.headers, body: try await body.collect(upTo: 1 << 20))
                    }
                    gate.succeed()
                    try await read(body, into: buffer, idleTimeout: idleTimeout)
                }
                buffer.finish()
            } catch {
                gate.fail(HTTPTransport.networkError(error, method: .GET, path: "/v1/events"))
                buffer.finish()
            }
        }
        connection.task.withLockedValue { $0 = runTask }
        do {
            try await gate.wait(timeout: timeout)
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Parses `body` into frames until it ends or stays silent for `idleTimeout`.
    private static func read(_ body: HTTP1ResponseBody, into buffer: FrameBuffer, idleTimeout: Duration) async throws {
        let lastActivity = NIOLockedValueBox(ContinuousClock.now)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var parser = ServerSentEventParser()
                let decoder = JSONDecoder()
                for try await chunk in body {
                    lastActivity.withLockedValue { $0 = .now }
                    for event in parser.feed(chunk.readableBytesView) {
                        if let frame = try? decoder.decode(ServerFrame.self, from: Data(event.data.utf8)) { await buffer.append(frame) }
                    }
                }
            }
            group.addTask {
                while true {
                    try await Task.sleep(for: idleTimeout / 4)
                    if ContinuousClock.now - lastActivity.withLockedValue({ $0 }) > idleTimeout { return }
                }
            }
            _ = try await group.next()
            group.cancelAll()
        }
    }

    func nextBatch() async throws -> [ServerFrame]? {
        try await buffer.nextBatch()
    }

    func send(_ request: SendMessageRequest, to conversationId: String) async -> MessageHandover {
        do {
            return .accepted(try await operations.sendMessage(conversationId: conversationId, request))
        } catch {
            return .failed(error as? PigeonClientError ?? PigeonClientError(.network, "\(error)"))
        }
    }

    func edit(_ request: EditMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover {
        do {
            return .accepted(try await operations.editMessage(conversationId: conversationId, serverId: serverId, request))
        } catch {
            return .failed(error as? PigeonClientError ?? PigeonClientError(.network, "\(error)"))
        }
    }

    func delete(_ request: DeleteMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover {
        do {
            return .accepted(try await operations.deleteMessage(conversationId: conversationId, serverId: serverId, request))
        } catch {
            return .failed(error as? PigeonClientError ?? PigeonClientError(.network, "\(error)"))
        }
    }

    func react(_ request: ReactRequest, in conversationId: String) async -> MessageHandover {
        do {
            return .reacted(try await operations.react(
                conversationId: conversationId, serverId: request.serverId, key: request.key, action: request.action))
        } catch {
            return .failed(error as? PigeonClientError ?? PigeonClientError(.network, "\(error)"))
        }
    }

    func sendReceipt(_ request: ReceiptRequest, to conversationId: String) async throws {
        _ = try await operations.postReceipt(conversationId: conversationId, request)
    }

    func sendTyping(_ active: Bool, in conversationId: String) async throws {
        try await operations.postTyping(conversationId: conversationId, active: active)
    }

    func close() {
        buffer.finish()
        task.withLockedValue { $0 }?.cancel()
    }
}
