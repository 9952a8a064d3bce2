import AsyncHTTPClient
import Foundation
import Glibc
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
    /// The close code and reason the server sent, once the connection is closed.
    let closeFrame = NIOLockedValueBox<(code: Int, reason: String?)?>(nil)
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
        // Bounded: an upgrade a dying server never answers must fail the test, not hang the run.
        do {
            try await withTimeLimit(.seconds(20), "the WebSocket upgrade on port \(port)") {
                try await Self.start(url: url, socket: socket, stream: stream, connected: connected)
            }
        } catch {
            socket.task.withLockedValue { $0 }?.cancel()
            throw error
        }
        return socket
    }

    private static func start(
        url: String, socket: TestWebSocket, stream: AsyncStream<String>, connected: NIOLockedValueBox<CheckedContinuation<Void, any Error>?>
    ) async throws {
        try await withCheckedThrowingContinuation { (ready: CheckedContinuation<Void, any Error>) in
            connected.withLockedValue { $0 = ready }
            let task = Task {
                var logger = Logger(label: "test-ws")
                logger.logLevel = .critical
                do {
                    let close = try await WebSocketClient.connect(url: url, configuration: .init(maxFrameSize: 1 << 21), logger: logger) { inbound, outbound, _ in
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
                    if let close {
                        let code: Int
                        switch close.closeCode {
                        case .unknown(let number): code = Int(number)
                        case .dataInconsistentWithMessage: code = 1007
                        case .normalClosure: code = 1000
                        case .goingAway: code = 1001
                        default: code = -1
                        }
                        socket.closeFrame.withLockedValue { $0 = (code, close.reason) }
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
    }

    func send(_ operation: ClientOperation) {
        outgoing.yield(String(decoding: try! JSONEncoder().encode(operation), as: UTF8.self))
    }

    func sendRaw(_ text: String) {
        outgoing.yield(text)
    }

    /// Closes the connection and waits until it is closed (at most 10 s: a peer that died may never finish the
    /// closing handshake; the connection is then left to NIO).
    func close() async {
        outgoing.finish()
        guard let task = self.task.withLockedValue({ $0 }) else { return }
        task.cancel()
        _ = try? await withTimeLimit(.seconds(10), "closing the WebSocket") { await task.value }
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
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/v1/events" + (query.isEmpty ? "" : "?" + query))
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let finalRequest = request
        var attempt = 0
        while true {
            attempt += 1
            let sse = TestSSE()
            let head = NIOLockedValueBox<CheckedContinuation<Void, any Error>?>(nil)
            do {
                try await withTimeLimit(.seconds(20), "the event stream's response head on port \(port)") {
                    try await Self.start(sse: sse, port: port, request: finalRequest, head: head)
                }
                return sse
            } catch where attempt == 1 && Self.isIdleCloseRace(error) {
                // A pooled keep-alive connection the server closed as idle just as the request went out on it (a
                // server with a short idle timeout): the GET is idempotent, so once more on a new connection.
                continue
            } catch {
                sse.task.withLockedValue { $0 }?.cancel()
                throw error
            }
        }
    }

    /// Whether `error` is the client's side of a request written to a pooled connection the server had just closed:
    /// AsyncHTTPClient reports it as `remoteConnectionClosed`, or as NIO's `ioOnClosedChannel` when the write itself
    /// finds the channel closed, or as a reset (`ECONNRESET`, `EPIPE`) when the request reached the server's socket
    /// after it closed (the kernel answers unread bytes on a closed socket with a reset).
    private static func isIdleCloseRace(_ error: any Error) -> Bool {
        if let error = error as? HTTPClientError, error == .remoteConnectionClosed { return true }
        if let error = error as? ChannelError, error == .ioOnClosedChannel { return true }
        if let error = error as? IOError, error.errnoCode == ECONNRESET || error.errnoCode == EPIPE { return true }
        return false
    }

    private static func start(
        sse: TestSSE, port: Int, request finalRequest: HTTPClientRequest, head: NIOLockedValueBox<CheckedContinuation<Void, any Error>?>
    ) async throws {
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
    }

    /// Closes the stream and waits until it is closed (at most 10 s).
    func close() async {
        guard let task = self.task.withLockedValue({ $0 }) else { return }
        task.cancel()
        _ = try? await withTimeLimit(.seconds(10), "closing the event stream") { await task.value }
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

// MARK: - A raw socket that never reads

/// A TCP client of the test server that does the WebSocket upgrade (or opens an SSE stream) and then reads
/// nothing unless told to: the never-reading client of the stream limits' tests. Its receive buffer is made
/// small before connecting, so the server's writes to it block early.
final class RawStreamSocket: Sendable {
    private let descriptor: Int32

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit { Glibc.close(descriptor) }

    /// Connects and upgrades to a WebSocket on `/v1/ws`; throws unless the server answers 101. The blocking socket
    /// calls run on a thread of their own, never on one of the concurrency pool's (the in-process server needs those
    /// to answer).
    static func webSocket(
        port: Int, token: String, cursor: String? = nil, headers: [String: String] = [:], receiveBuffer: Int32 = 4_096
    ) async throws -> RawStreamSocket {
        let (socket, head) = try await webSocketUpgrade(port: port, token: token, cursor: cursor, headers: headers, receiveBuffer: receiveBuffer)
        guard head.hasPrefix("HTTP/1.1 101") else { throw TestFailure("WebSocket upgrade refused: \(head)") }
        return socket
    }

    /// Sends a WebSocket upgrade request for `/v1/ws` (with `headers` beside the upgrade's own) and reads the
    /// answer's head, whatever it is (on a thread of its own).
    static func webSocketUpgrade(
        port: Int, token: String, cursor: String? = nil, headers: [String: String] = [:], receiveBuffer: Int32 = 4_096
    ) async throws -> (socket: RawStreamSocket, head: String) {
        try await onOwnThread { try webSocketUpgradeBlocking(port: port, token: token, cursor: cursor, headers: headers, receiveBuffer: receiveBuffer) }
    }

    /// ``webSocketUpgrade(port:token:cursor:headers:receiveBuffer:)`` on the calling thread: only for a thread of its own.
    static func webSocketUpgradeBlocking(
        port: Int, token: String, cursor: String?, headers: [String: String], receiveBuffer: Int32
    ) throws -> (socket: RawStreamSocket, head: String) {
        let socket = try connect(port: port, receiveBuffer: receiveBuffer)
        var path = "/v1/ws?access_token=\(token)"
        if let cursor { path += "&cursor=\(cursor)" }
        let extra = headers.map { "\($0.key): \($0.value)\r\n" }.joined()
        try socket.writeAll(Array(
            ("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\(extra)\r\n").utf8))
        return (socket, try socket.readHead())
    }

    /// Opens `GET /v1/events` and reads the response head (on a thread of its own); throws unless the server answers 200.
    static func serverSentEvents(port: Int, token: String, receiveBuffer: Int32 = 4_096) async throws -> RawStreamSocket {
        try await onOwnThread { try serverSentEventsBlocking(port: port, token: token, receiveBuffer: receiveBuffer) }
    }

    static func serverSentEventsBlocking(port: Int, token: String, receiveBuffer: Int32) throws -> RawStreamSocket {
        let socket = try connect(port: port, receiveBuffer: receiveBuffer)
        try socket.writeAll(Array("GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(token)\r\n\r\n".utf8))
        let head = try socket.readHead()
        guard head.hasPrefix("HTTP/1.1 200") else { throw TestFailure("SSE refused: \(head)") }
        return socket
    }

    /// Reads `count` bytes (a body whose length the head told), or fewer if the connection ends first.
    func read(count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4_096)
        while bytes.count < count {
            let read = Glibc.read(descriptor, &buffer, min(buffer.count, count - bytes.count))
            if read <= 0 { break }
            bytes += buffer[0..<read]
        }
        return bytes
    }

    /// Makes the close (when this socket is released) a reset (RST) instead of an orderly FIN.
    func resetOnClose() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }

    /// Closes the sending side only (a FIN): the server sees the client's input end, the socket can still read.
    func closeWrite() {
        Glibc.shutdown(descriptor, Int32(SHUT_WR))
    }

    private static func connect(port: Int, receiveBuffer: Int32) throws -> RawStreamSocket {
        let descriptor = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw TestFailure("socket: errno \(errno)") }
        let socket = RawStreamSocket(descriptor: descriptor)
        var size = receiveBuffer
        setsockopt(descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else { throw TestFailure("connect: errno \(errno)") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return socket
    }

    /// Reads the HTTP response head byte by byte (nothing after it).
    private func readHead() throws -> String {
        var head: [UInt8] = []
        var byte: UInt8 = 0
        while !head.suffix(4).elementsEqual([13, 10, 13, 10]) {
            guard Glibc.read(descriptor, &byte, 1) == 1 else { throw TestFailure("no response head: \(String(decoding: head, as: UTF8.self))") }
            head.append(byte)
        }
        return String(decoding: head, as: UTF8.self)
    }

    private func writeAll(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { throw TestFailure("send: errno \(errno)") }
            offset += written
        }
    }

    /// A masked client frame (`opcode` 1: text).
    /// A masked client frame; `fin: false` for every fragment of a message but its last.
    static func frame(opcode: UInt8 = 1, payload: [UInt8], fin: Bool = true) -> [UInt8] {
        var frame: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        if payload.count < 126 {
            frame.append(0x80 | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            frame.append(0x80 | 127)
            frame += (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        frame += mask
        frame += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        return frame
    }

    /// Sends one text frame, blocking until the kernel took it.
    func sendText(_ text: String) throws {
        try writeAll(Self.frame(payload: Array(text.utf8)))
    }

    /// Sends one frame with these payload bytes as is (which may be invalid UTF-8).
    func sendFrame(opcode: UInt8 = 1, payload: [UInt8], fin: Bool = true) throws {
        try writeAll(Self.frame(opcode: opcode, payload: payload, fin: fin))
    }

    /// Sends `bytes` without blocking; how many the kernel took (fewer once the server stops reading).
    func sendWithoutBlocking(_ bytes: [UInt8]) -> Int {
        let written = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        return max(0, written)
    }

    /// Reads (discarding data frames) until the server's close frame or the end of the connection, for at most
    /// `timeout`: the close code, `0` if the connection ended without one, `nil` if it is still open. Waits on a
    /// thread of its own.
    func readUntilClosed(timeout: Duration = .seconds(10)) async -> Int? {
        let frames = await readFrames(timeout: timeout) { $0.opcode == 8 }
        guard let frames else { return 0 }
        guard let close = frames.last, close.opcode == 8 else { return nil }
        return close.closeCode
    }

    /// A frame the server sent: its opcode (1 text, 8 close, 9 ping, 10 pong) and payload.
    struct ServerFrame: Sendable {
        var opcode: UInt8
        var payload: [UInt8]
        var text: String { String(decoding: payload, as: UTF8.self) }
        /// A close frame's code (1005 when it has none).
        var closeCode: Int { payload.count >= 2 ? Int(payload[0]) << 8 | Int(payload[1]) : 1005 }
    }

    /// Reads the server's frames until one satisfies `last` (included) or `timeout` passes: the frames read, or `nil`
    /// if the connection ended first. Waits on a thread of its own.
    func readFrames(timeout: Duration = .seconds(10), until last: @escaping @Sendable (ServerFrame) -> Bool) async -> [ServerFrame]? {
        (try? await onOwnThread { [self] in readFramesBlocking(timeout: timeout, until: last) }) ?? nil
    }

    private func readFramesBlocking(timeout: Duration, until last: (ServerFrame) -> Bool) -> [ServerFrame]? {
        let deadline = ContinuousClock.now + timeout
        var frames: [ServerFrame] = []
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var poll = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        while ContinuousClock.now < deadline {
            let left = deadline - ContinuousClock.now
            let ready = Glibc.poll(&poll, 1, Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)))
            if ready <= 0 { continue }
            let count = Glibc.read(descriptor, &buffer, buffer.count)
            if count <= 0 { return nil }
            pending += buffer[0..<count]
            while let (opcode, payload, length) = Self.parseServerFrame(pending) {
                let frame = ServerFrame(opcode: opcode, payload: Array(payload))
                frames.append(frame)
                pending.removeFirst(length)
                if last(frame) { return frames }
            }
        }
        return frames
    }

    /// The first unmasked frame in `bytes`: its opcode, payload and length, or `nil` if incomplete.
    private static func parseServerFrame(_ bytes: [UInt8]) -> (UInt8, ArraySlice<UInt8>, Int)? {
        guard bytes.count >= 2 else { return nil }
        var length = Int(bytes[1] & 0x7F)
        var offset = 2
        if length == 126 {
            guard bytes.count >= 4 else { return nil }
            length = Int(bytes[2]) << 8 | Int(bytes[3])
            offset = 4
        } else if length == 127 {
            guard bytes.count >= 10 else { return nil }
            length = bytes[2..<10].reduce(0) { $0 << 8 | Int($1) }
            offset = 10
        }
        guard bytes.count >= offset + length else { return nil }
        return (bytes[0] & 0x0F, bytes[offset..<(offset + length)], offset + length)
    }
}

/// What this test process uses: its resident memory (an in-process server runs in it).
enum ProcessUsage {
    /// Resident memory in bytes, from `/proc/self/statm`.
    static var residentBytes: Int {
        let text = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? ""
        let pages = text.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
