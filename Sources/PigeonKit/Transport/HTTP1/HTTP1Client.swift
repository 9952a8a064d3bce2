import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// A request as ``HTTP1Client`` sends it.
struct HTTP1Request: Sendable {
    var method: HTTPMethod
    /// The path and query, percent-encoded.
    var uri: String
    var headers = HTTPHeaders()
    var body = Body.none

    enum Body: Sendable {
        case none
        case bytes(ByteBuffer)
        /// `length` bytes, each chunk from `next` (`nil` at the end), put on the wire as it comes: a file is never
        /// held whole.
        case stream(length: Int64, next: @Sendable () async throws -> ByteBuffer?)

        /// The body can be sent again (on another connection).
        var isReplayable: Bool {
            if case .stream = self { return false }
            return true
        }
    }
}

/// The answer's status and headers; its body is read through ``HTTP1ResponseBody``.
typealias HTTP1ResponseHead = HTTPResponseHead

/// PigeonKit's HTTP/1.1 client on SwiftNIO: what the SDK needs and nothing more (the server speaks HTTP/1.1).
///
/// Connections are kept alive and reused, a few per server: idle ones are closed after ``idleLifetime`` (below the
/// idle timeouts of common proxies and load balancers, so a reused connection is rarely one the other side is
/// closing). A request that meets a reused connection the server closed before any byte of the answer came is sent
/// again on a new connection, when its body can be sent again. A connection that cannot be made fails the request at
/// once: the SDK retries with its own backoff.
final class HTTP1Client: Sendable {
    static let shared = HTTP1Client()

    /// Idle connections kept per server.
    let maxIdlePerServer = 4
    /// How long an idle connection is kept.
    let idleLifetime = Duration.seconds(20)

    private struct Idle {
        var connection: HTTP1Connection
        var since: ContinuousClock.Instant
    }

    private let idle = NIOLockedValueBox<[String: [Idle]]>([:])

    /// The request's deadline passed (``execute(_:on:trust:connectTimeout:timeout:_:)``'s `timeout`).
    struct TimedOut: Error, CustomStringConvertible {
        var description: String { "no answer in time" }
    }

    /// Sends `request` to `server` and hands the answer to `handle`, which reads as much of the body as it wants. The
    /// connection goes back to the pool when `handle` read the whole body and both sides keep the connection alive;
    /// otherwise it is closed. `timeout` bounds the whole exchange, `handle` included (`nil`: no bound, for a stream):
    /// past it the connection is closed and the call throws ``TimedOut``. With `bodyTimeout`, `timeout` bounds the
    /// exchange until the answer's head, and what `bodyTimeout` says for that head bounds the rest (a download's
    /// deadline by its size). Cancelling the calling task closes the connection too.
    func execute<Result>(
        _ request: HTTP1Request, on server: ServerAddress, trust: TLSTrust, connectTimeout: Duration, timeout: Duration?,
        bodyTimeout: ((HTTP1ResponseHead) -> Duration)? = nil,
        _ handle: (HTTP1ResponseHead, HTTP1ResponseBody) async throws -> Result
    ) async throws -> Result {
        let start = ContinuousClock.now
        var (connection, reused) = try await acquire(server, trust: trust, connectTimeout: connectTimeout)
        while true {
            let remaining = timeout.map { $0 - (ContinuousClock.now - start) }
            do {
                return try await exchange(
                    request, on: connection, poolKey: Self.poolKey(server, trust), server: server, timeout: remaining,
                    bodyTimeout: bodyTimeout, handle)
            } catch let error as StaleConnection where reused && request.body.isReplayable {
                _ = error
                (connection, reused) = (try await HTTP1Connection.connect(to: server, trust: trust, timeout: connectTimeout), false)
            } catch let error as StaleConnection {
                throw error.underlying
            }
        }
    }

    /// A reused connection failed before any byte of the answer arrived: the server had closed it.
    private struct StaleConnection: Error {
        var underlying: any Error
    }

    private func exchange<Result>(
        _ request: HTTP1Request, on connection: HTTP1Connection, poolKey: String, server: ServerAddress, timeout: Duration?,
        bodyTimeout: ((HTTP1ResponseHead) -> Duration)?, _ handle: (HTTP1ResponseHead, HTTP1ResponseBody) async throws -> Result
    ) async throws -> Result {
        let exchange = try await connection.lease()
        let timedOut = NIOLockedValueBox(false)
        func arm(_ timeout: Duration) -> Scheduled<Void> {
            connection.channel.eventLoop.scheduleTask(in: TimeAmount(max(timeout, .zero))) {
                timedOut.withLockedValue { $0 = true }
                connection.close()
            }
        }
        var timer = timeout.map(arm)
        var reusable = false
        defer {
            timer?.cancel()
            exchange.finish(reusable: reusable)
            if reusable { release(connection, key: poolKey) }
        }
        do {
            return try await withTaskCancellationHandler {
                let head = try await send(request, server: server, on: exchange, connection: connection)
                if let bodyTimeout {
                    timer?.cancel()
                    timer = arm(bodyTimeout(head))
                }
                let body = HTTP1ResponseBody(exchange: exchange)
                let result = try await handle(head, body)
                reusable = exchange.requestEnded && exchange.responseEnded && head.isKeepAlive && !timedOut.withLockedValue { $0 }
                return result
            } onCancel: {
                connection.close()
            }
        } catch {
            if timedOut.withLockedValue({ $0 }) { throw TimedOut() }
            if !exchange.receivedAnything, !(error is CancellationError), !Task.isCancelled { throw StaleConnection(underlying: error) }
            throw error
        }
    }

    /// Writes the request and reads the answer's head. A streamed body is written while the head is awaited: a server
    /// may answer before it has read the whole body (`413` for an upload over its limit) and close the connection,
    /// and that answer, not the write that failed, is what the caller needs. The connection is then not reused.
    private func send(
        _ request: HTTP1Request, server: ServerAddress, on exchange: HTTP1Exchange, connection: HTTP1Connection
    ) async throws -> HTTPResponseHead {
        guard case .stream = request.body else {
            do {
                try await write(request, server: server, to: exchange)
            } catch {
                // Why the connection closed (a TLS handshake that failed, say) comes on the inbound side.
                _ = try await exchange.next()
                throw error
            }
            return try await readHead(exchange)
        }
        // Not a child task: a writer stuck on a server that stopped reading must not hold the answer back. It ends when
        // the connection closes (an exchange whose request did not end is never reused).
        let writer = Task { try await self.write(request, server: server, to: exchange) }
        do {
            let head = try await readHead(exchange)
            if exchange.requestEnded { try await writer.value }
            return head
        } catch {
            connection.close()
            // No answer: the write's failure, when there was one, says more than the end of the connection.
            try await writer.value
            throw error
        }
    }

    private func write(_ request: HTTP1Request, server: ServerAddress, to exchange: HTTP1Exchange) async throws {
        var head = HTTPRequestHead(version: .http1_1, method: request.method, uri: request.uri, headers: request.headers)
        head.headers.replaceOrAdd(name: "Host", value: server.hostHeader)
        switch request.body {
        case .none:
            if [.POST, .PUT, .PATCH].contains(request.method) { head.headers.replaceOrAdd(name: "Content-Length", value: "0") }
            try await exchange.outbound.write(contentsOf: [.head(head), .end(nil)])
            exchange.markRequestEnded()
        case .bytes(let bytes):
            head.headers.replaceOrAdd(name: "Content-Length", value: String(bytes.readableBytes))
            try await exchange.outbound.write(contentsOf: [.head(head), .body(.byteBuffer(bytes)), .end(nil)])
            exchange.markRequestEnded()
        case .stream(let length, let next):
            head.headers.replaceOrAdd(name: "Content-Length", value: String(length))
            try await exchange.outbound.write(.head(head))
            var sent: Int64 = 0
            while let chunk = try await next() {
                sent += Int64(chunk.readableBytes)
                guard sent <= length else { throw HTTP1ProtocolError("the body is longer than its \(length) bytes") }
                try await exchange.outbound.write(.body(.byteBuffer(chunk)))
            }
            guard sent == length else { throw HTTP1ProtocolError("the body ended after \(sent) of its \(length) bytes") }
            try await exchange.outbound.write(.end(nil))
            exchange.markRequestEnded()
        }
    }

    /// The answer's head, past any informational (1xx) one.
    private func readHead(_ exchange: HTTP1Exchange) async throws -> HTTPResponseHead {
        while true {
            switch try await exchange.next() {
            case .head(let head) where head.status.code >= 100 && head.status.code < 200 && head.status != .switchingProtocols:
                continue
            case .head(let head):
                return head
            case .body, .end:
                throw HTTP1ProtocolError("an answer's body came before its head")
            case nil:
                throw HTTP1ConnectionClosed()
            }
        }
    }

    // MARK: The pool

    private func acquire(_ server: ServerAddress, trust: TLSTrust, connectTimeout: Duration) async throws -> (HTTP1Connection, reused: Bool) {
        let key = Self.poolKey(server, trust)
        let now = ContinuousClock.now
        let (found, expired) = idle.withLockedValue { idle -> (HTTP1Connection?, [HTTP1Connection]) in
            var expired: [HTTP1Connection] = []
            var found: HTTP1Connection?
            while found == nil, let candidate = idle[key]?.popLast() {
                if candidate.connection.channel.isActive, now - candidate.since < idleLifetime {
                    found = candidate.connection
                } else {
                    expired.append(candidate.connection)
                }
            }
            return (found, expired)
        }
        for connection in expired { connection.close() }
        if let found { return (found, true) }
        return (try await HTTP1Connection.connect(to: server, trust: trust, timeout: connectTimeout), false)
    }

    /// Connections are shared by requests to the same server with the same trust.
    private static func poolKey(_ server: ServerAddress, _ trust: TLSTrust) -> String {
        trust == .system ? server.connectionKey : server.connectionKey + "#" + trust.additionalCertificatesPEM.joined()
    }

    private func release(_ connection: HTTP1Connection, key: String) {
        let kept = idle.withLockedValue { idle -> Bool in
            var list = idle[key, default: []]
            guard list.count < maxIdlePerServer else { return false }
            list.append(Idle(connection: connection, since: .now))
            idle[key] = list
            return true
        }
        if !kept { connection.close() }
    }
}

/// The answer's body, read chunk by chunk as the connection delivers it (back-pressured: a slow reader slows the
/// connection, nothing piles up). Read it within ``HTTP1Client/execute(_:on:trust:connectTimeout:timeout:_:)``'s
/// `handle`; once.
struct HTTP1ResponseBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    fileprivate let exchange: HTTP1Exchange

    struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let exchange: HTTP1Exchange

        mutating func next() async throws -> ByteBuffer? {
            if exchange.responseEnded { return nil }
            switch try await exchange.next() {
            case .body(let chunk): return chunk
            case .end: return nil
            case .head: throw HTTP1ProtocolError("a second head came within an answer")
            case nil: throw HTTP1ConnectionClosed()
            }
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(exchange: exchange)
    }

    /// The whole body; throws when it is longer than `limit` bytes.
    func collect(upTo limit: Int) async throws -> ByteBuffer {
        var all = ByteBuffer()
        for try await var chunk in self {
            guard all.readableBytes + chunk.readableBytes <= limit else {
                throw HTTP1ProtocolError("the answer is longer than \(limit) bytes")
            }
            all.writeBuffer(&chunk)
        }
        return all
    }
}

/// The connection ended before the answer did.
struct HTTP1ConnectionClosed: Error, CustomStringConvertible {
    var description: String { "the connection closed before the answer ended" }
}

/// The other side broke HTTP/1.1 (or a body broke its own length).
struct HTTP1ProtocolError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
