import AsyncHTTPClient
import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol
import PigeonTestSupport

/// Received items with a timed wait, shared by the WebSocket and SSE test clients.
final class Inbox<Item: Sendable>: Sendable {
    private struct State {
        var items: [Item] = []
        var closed = false
    }

    private let state = NIOLockedValueBox(State())

    func append(_ item: Item) { state.withLockedValue { $0.items.append(item) } }
    func close() { state.withLockedValue { $0.closed = true } }
    var isClosed: Bool { state.withLockedValue { $0.closed } }

    /// The next item, or `nil` after `timeout` (or when closed and empty).
    func next(timeout: Duration = .seconds(10)) async -> Item? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let item = state.withLockedValue { state -> Item?? in
                if !state.items.isEmpty { return .some(state.items.removeFirst()) }
                return state.closed ? .some(nil) : nil
            }
            if let item { return item }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Waits for the first item matching `predicate` and removes only that one; the others stay queued in order.
    func take(timeout: Duration = .seconds(10), where predicate: (Item) -> Bool) async -> Item? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let found = state.withLockedValue { state -> Item? in
                guard let index = state.items.firstIndex(where: predicate) else { return nil }
                return state.items.remove(at: index)
            }
            if let found { return found }
            if ContinuousClock.now >= deadline || isClosed { return nil }
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    /// Everything that arrives within `duration` (for short checks that something does not arrive).
    func drain(for duration: Duration) async -> [Item] {
        await collect(timeout: duration) { _ in false }
    }

    /// Items until `predicate` says stop (inclusive) or the timeout passes.
    func collect(timeout: Duration = .seconds(10), until predicate: ([Item]) -> Bool) async -> [Item] {
        let deadline = ContinuousClock.now + timeout
        var items: [Item] = []
        while !predicate(items) {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero, let item = await next(timeout: remaining) else { break }
            items.append(item)
        }
        return items
    }
}

/// A WebSocket to `/v1/ws` driven by a test.
final class TestWebSocket: Sendable {
    let inbox = Inbox<ServerFrame>()
    let rawInbox = Inbox<String>()
    private let outgoing: AsyncStream<String>.Continuation
    private let task: NIOLockedValueBox<Task<Void, Never>?> = .init(nil)

    private init(outgoing: AsyncStream<String>.Continuation) {
        self.outgoing = outgoing
    }

    /// Connects; throws if the server refuses the upgrade.
    ///
    /// With `waitUntilLive` (the default) it returns only once the server streams to this socket: the upgrade
    /// answer comes before the server has registered the connection, so an event committed right after
    /// `connect` returned could otherwise be missed by a stream that starts "now". It sends an operation the
    /// server refuses and waits for that error frame, which the server writes after any replayed events; the
    /// probe's frame is removed from the inboxes, everything else stays.
    static func connect(port: Int, token: String?, cursor: String? = nil, waitUntilLive: Bool = true) async throws -> TestWebSocket {
        let socket = try await connectOnly(port: port, token: token, cursor: cursor)
        if waitUntilLive { try await socket.waitUntilLive() }
        return socket
    }

    /// Sends a probe the server answers with an error frame naming it, and waits for (and removes) that frame.
    func waitUntilLive(timeout: Duration = .seconds(10)) async throws {
        let probe = UUID().uuidString.lowercased()
        sendRaw("{\"op\":\"test.probe\",\"clientMessageId\":\"\(probe)\"}")
        let frame = await inbox.take(timeout: timeout) { frame in
            if case .error(let error) = frame { error.clientMessageId == probe } else { false }
        }
        guard frame != nil else { throw TestFailure("WebSocket did not answer the liveness probe within \(timeout)") }
        _ = await rawInbox.take(timeout: timeout) { $0.contains(probe) }
    }

    private static func connectOnly(port: Int, token: String?, cursor: String?) async throws -> TestWebSocket {
        var query: [String] = []
        if let token { query.append("access_token=\(token)") }
        if let cursor { query.append("cursor=\(cursor)") }
        let url = "ws://127.0.0.1:\(port)/v1/ws" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        let socket = TestWebSocket(outgoing: continuation)
        let connected = NIOLockedValueBox<CheckedContinuation<Void, any Error>?>(nil)
        try await withCheckedThrowingContinuation { (ready: CheckedContinuation<Void, any Error>) in
            connected.withLockedValue { $0 = ready }
            let task = Task {
                var logger = Logger(label: "test-ws")
                logger.logLevel = .critical
                do {
                    try await WebSocketClient.connect(url: url, configuration: .init(maxFrameSize: 1 << 21), logger: logger) { inbound, outbound, _ in
                        connected.withLockedValue { $0?.resume(); $0 = nil }
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                for try await message in inbound.messages(maxSize: 1 << 21) {
                                    guard case .text(let text) = message else { continue }
                                    socket.rawInbox.append(text)
                                    if let frame = try? JSONDecoder().decode(ServerFrame.self, from: Data(text.utf8)) { socket.inbox.append(frame) }
                                }
                            }
                            group.addTask {
                                for await text in stream { try await outbound.write(.text(text)) }
                            }
                            _ = try await group.next()
                            group.cancelAll()
                        }
                    }
                } catch {
                    connected.withLockedValue { $0?.resume(throwing: error); $0 = nil }
                }
                connected.withLockedValue { $0?.resume(throwing: TestFailure("WebSocket closed before upgrade")); $0 = nil }
                socket.inbox.close()
                socket.rawInbox.close()
            }
            socket.task.withLockedValue { $0 = task }
        }
        return socket
    }

    func send(_ operation: ClientOperation) {
        outgoing.yield(String(decoding: try! JSONEncoder().encode(operation), as: UTF8.self))
    }

    func sendRaw(_ text: String) {
        outgoing.yield(text)
    }

    /// Closes the connection and waits until it is closed.
    func close() async {
        outgoing.finish()
        let task = self.task.withLockedValue { $0 }
        task?.cancel()
        await task?.value
    }

    /// Sends a message with `{"op": "send"}`.
    func sendMessage(
        to conversationId: String, body: String, clientMessageId: String = UUID().uuidString.lowercased(), type: String = "text",
        clientTimestamp: Int64 = 1_763_700_000_000
    ) {
        send(.send(conversationId: conversationId, SendMessageRequest(clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: clientTimestamp)))
    }

    /// The first frame matching `predicate` (removed from the inbox; frames before it stay), or `nil` after the timeout.
    func first(timeout: Duration = .seconds(10), where predicate: (ServerFrame) -> Bool) async -> ServerFrame? {
        await inbox.take(timeout: timeout, where: predicate)
    }

    /// The first stream event matching `predicate` (removed; others stay), or `nil` after the timeout.
    func firstEvent(timeout: Duration = .seconds(10), where predicate: (ServerEvent) -> Bool) async -> ServerEvent? {
        await inbox.take(timeout: timeout) { frame in frame.event.map(predicate) ?? false }?.event
    }

    /// Frames until one matches `predicate` (which is included), or the timeout.
    func frames(timeout: Duration = .seconds(10), until predicate: @escaping (ServerFrame) -> Bool) async -> [ServerFrame] {
        await inbox.collect(timeout: timeout) { frames in frames.last.map(predicate) ?? false }
    }
}

/// One server-sent event as parsed by the test client.
struct SSEEvent: Sendable, Equatable {
    var id: String?
    var event: String?
    var data: String

    var serverEvent: ServerEvent? { try? JSONDecoder().decode(ServerEvent.self, from: Data(data.utf8)) }
}

/// A `GET /v1/events` stream read by a test.
final class TestSSE: Sendable {
    let events = Inbox<SSEEvent>()
    let comments = NIOLockedValueBox(0)
    let status = NIOLockedValueBox<Int?>(nil)
    /// The response headers, names lowercased.
    let headers = NIOLockedValueBox<[String: String]>([:])
    private let task: NIOLockedValueBox<Task<Void, Never>?> = .init(nil)

    /// Opens the stream and waits for the response head; `status` tells whether it was accepted.
    static func open(port: Int, token: String?, query: String = "", headers: [String: String] = [:]) async throws -> TestSSE {
        let sse = TestSSE()
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/events" + (query.isEmpty ? "" : "?" + query))
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let head = NIOLockedValueBox<CheckedContinuation<Void, any Error>?>(nil)
        let finalRequest = request
        try await withCheckedThrowingContinuation { (ready: CheckedContinuation<Void, any Error>) in
            head.withLockedValue { $0 = ready }
            let task = Task {
                do {
                    let response = try await TestHTTPClients.client(for: port).execute(finalRequest, timeout: .seconds(3600))
                    sse.status.withLockedValue { $0 = Int(response.status.code) }
                    sse.headers.withLockedValue { headers in
                        for header in response.headers { headers[header.name.lowercased()] = header.value }
                    }
                    head.withLockedValue { $0?.resume(); $0 = nil }
                    var pending = ""
                    var current = SSEEvent(id: nil, event: nil, data: "")
                    for try await buffer in response.body {
                        pending += String(buffer: buffer)
                        while let newline = pending.firstIndex(of: "\n") {
                            let line = String(pending[..<newline])
                            pending = String(pending[pending.index(after: newline)...])
                            if line.isEmpty {
                                if !current.data.isEmpty || current.event != nil { sse.events.append(current) }
                                current = SSEEvent(id: nil, event: nil, data: "")
                            } else if line.hasPrefix(":") {
                                sse.comments.withLockedValue { $0 += 1 }
                            } else if line.hasPrefix("id: ") {
                                current.id = String(line.dropFirst(4))
                            } else if line.hasPrefix("event: ") {
                                current.event = String(line.dropFirst(7))
                            } else if line.hasPrefix("data: ") {
                                current.data += String(line.dropFirst(6))
                            }
                        }
                    }
                } catch {
                    head.withLockedValue { $0?.resume(throwing: error); $0 = nil }
                }
                sse.events.close()
            }
            sse.task.withLockedValue { $0 = task }
        }
        return sse
    }

    func close() async {
        let task = self.task.withLockedValue { $0 }
        task?.cancel()
        await task?.value
    }
}

extension TestSSE {
    /// The first event matching `predicate` (removed; others stay), or `nil` after the timeout.
    func first(timeout: Duration = .seconds(10), where predicate: (SSEEvent) -> Bool) async -> SSEEvent? {
        await events.take(timeout: timeout, where: predicate)
    }
}

// MARK: - Frame and event accessors

extension ServerFrame {
    var event: ServerEvent? { if case .event(let event) = self { event } else { nil } }
    var ack: AckFrame? { if case .ack(let ack) = self { ack } else { nil } }
    var errorFrame: ErrorFrame? { if case .error(let error) = self { error } else { nil } }
}

extension ServerEvent {
    /// The message of a `message.new`.
    var newMessage: Message? { if case .messageNew(_, let message) = self { message } else { nil } }
    var stored: MessageStoredEvent? { if case .messageStored(_, let event) = self { event } else { nil } }
    var failed: MessageFailedEvent? { if case .messageFailed(_, let event) = self { event } else { nil } }
    var receipt: ReceiptEvent? { if case .receipt(_, let event) = self { event } else { nil } }
    var typing: TypingEvent? { if case .typing(let event) = self { event } else { nil } }
    var createdConversation: Conversation? { if case .conversationCreated(_, let conversation) = self { conversation } else { nil } }
    var isReset: Bool { if case .reset = self { true } else { false } }
}
