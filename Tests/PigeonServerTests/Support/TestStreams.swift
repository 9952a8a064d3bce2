import AsyncHTTPClient
import Foundation
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol

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
    static func connect(port: Int, token: String?, cursor: String? = nil) async throws -> TestWebSocket {
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
                    let response = try await HTTPClient.shared.execute(finalRequest, timeout: .seconds(3600))
                    sse.status.withLockedValue { $0 = Int(response.status.code) }
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
