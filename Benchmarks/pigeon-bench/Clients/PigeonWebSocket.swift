import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOFoundationCompat
import PigeonBenchSupport
import PigeonProtocol
import Synchronization

/// One device's event stream, `GET /v1/ws?access_token=…`, with the frames of the wire contract decoded.
struct PigeonWebSocket: Sendable {
    let url: String

    init(baseURL: String, token: String) {
        let allowed = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))
        let escapedToken = token.addingPercentEncoding(withAllowedCharacters: allowed) ?? token
        url = "ws" + baseURL.dropFirst("http".count) + "/v1/ws?access_token=" + escapedToken
    }

    private static let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 20, closeTimeout: .seconds(2))

    private static let logger: Logger = {
        var logger = Logger(label: "pigeon-bench.websocket")
        logger.logLevel = .error
        return logger
    }()

    /// Connects, runs `session` with the incoming frames and a writer for operations, and closes the connection
    /// when `session` returns. Cancelling the task ends the frame sequence, so a session that reads frames until they
    /// end returns what it has counted when its scenario cancels it.
    func run<Result: Sendable>(
        _ session: @escaping @Sendable (ServerFrames, OperationWriter) async throws -> Result
    ) async throws -> Result {
        let result = SessionResult<Result>()
        let client = WebSocketClient(url: url, configuration: Self.configuration, logger: Self.logger) { inbound, outbound, _ in
            let value = try await session(ServerFrames(messages: inbound.messages(maxSize: 1 << 20)), OperationWriter(outbound: outbound))
            result.store(value)
        }
        do {
            try await client.run()
        } catch {
            // An error while closing does not undo a session that finished.
            if let value = result.value { return value }
            throw error
        }
        guard let value = result.value else {
            throw BenchError.connectionFailed("\(url): the connection ended before the session did")
        }
        return value
    }

    /// The server's messages on a stream, decoded as ``ServerFrame``s.
    struct ServerFrames: AsyncSequence {
        typealias Element = ServerFrame

        let messages: WebSocketInboundMessageStream

        struct AsyncIterator: AsyncIteratorProtocol {
            var messages: WebSocketInboundMessageStream.AsyncIterator
            let decoder = JSONDecoder()

            mutating func next() async throws -> ServerFrame? {
                guard let message = try await messages.next() else { return nil }
                let buffer: ByteBuffer =
                    switch message {
                    case .text(let text): ByteBuffer(string: text)
                    case .binary(let bytes): bytes
                    }
                do {
                    return try decoder.decode(ServerFrame.self, from: buffer)
                } catch {
                    throw BenchError.unexpectedFrame("\(String(buffer: buffer)) (\(error))")
                }
            }
        }

        func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(messages: messages.makeAsyncIterator())
        }
    }

    /// Writes client operations as JSON text messages.
    struct OperationWriter: Sendable {
        let outbound: WebSocketOutboundWriter
        private let encoder = JSONEncoder()

        init(outbound: WebSocketOutboundWriter) {
            self.outbound = outbound
        }

        func send(_ operation: ClientOperation) async throws {
            let json = try encoder.encode(operation)
            try await outbound.write(.text(String(decoding: json, as: UTF8.self)))
        }
    }
}

/// The value a WebSocket session returned, carried out of the client's handler closure.
private final class SessionResult<Value: Sendable>: Sendable {
    private let storage = Mutex<Value?>(nil)

    func store(_ value: Value) {
        storage.withLock { $0 = value }
    }

    var value: Value? { storage.withLock { $0 } }
}
