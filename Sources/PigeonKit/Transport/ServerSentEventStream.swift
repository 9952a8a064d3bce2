import AsyncHTTPClient
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

    static func open(
        http: HTTPClient, url: String, token: String, timeout: Duration, idleTimeout: Duration, operations: any PigeonTransport
    ) async throws -> ServerSentEventStream {
        let connection = ServerSentEventStream(operations: operations)
        let gate = ConnectGate()
        let buffer = connection.buffer
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Accept", value: "text/event-stream")
        let runTask = Task {
            do {
                let response = try await http.execute(request, deadline: .distantFuture)
                guard response.status == .ok else {
                    let body = try await response.body.collect(upTo: 1 << 20)
                    throw HTTPTransport.serverError(status: Int(response.status.code), headers: response.headers, body: body)
                }
                gate.succeed()
                let lastActivity = NIOLockedValueBox(ContinuousClock.now)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        var parser = ServerSentEventParser()
                        let decoder = JSONDecoder()
                        for try await chunk in response.body {
                            lastActivity.withLockedValue { $0 = .now }
                            for event in parser.feed(chunk.readableBytesView) {
                                if let frame = try? decoder.decode(ServerFrame.self, from: Data(event.data.utf8)) { buffer.append(frame) }
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
                buffer.finish()
            } catch {
                gate.fail(error as? PigeonClientError ?? HTTPTransport.networkError(error, method: .GET, path: "/v1/events"))
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
