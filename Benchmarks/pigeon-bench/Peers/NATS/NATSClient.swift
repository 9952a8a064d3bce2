import Foundation
import NIOCore
import NIOPosix
import PigeonBenchSupport

/// A minimal NATS client on SwiftNIO for the benchmark's JetStream publishers and consumers: one connection per
/// session, headers and no-responders on, no verbose `+OK`s, no reconnection (runs are short and stay on loopback).
/// The server's keep-alive `PING`s are answered inside the pipeline.
enum NATSClient {
    /// Connects to `127.0.0.1:port`, reads the server's `INFO`, sends `CONNECT` named `name` and a `PING`, and once
    /// the `PONG` came back runs `session` with the operations that follow and the writer for the connection; closes
    /// the connection when `session` returns.
    static func withConnection<Result: Sendable>(
        port: Int,
        name: String,
        _ session: (_ inbound: inout NATSInbound, _ writer: NATSWriter) async throws -> Result
    ) async throws -> Result {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(NATSServerOperationDecoder()))
                    try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(NATSClientOperationEncoder()))
                    try channel.pipeline.syncOperations.addHandler(NATSPingHandler())
                    return try NIOAsyncChannel<NATSServerOperation, NATSClientOperation>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var operations = inbound.makeAsyncIterator()
            guard case .info(let info) = try await operations.next() else {
                throw BenchError.natsProtocol("\(name): the server did not start with INFO")
            }
            let writer = NATSWriter(outbound: outbound)
            try await outbound.write(.connect(json: connectJSON(name: name)))
            try await outbound.write(.ping)
            wait: while let operation = try await operations.next() {
                switch operation {
                case .pong: break wait
                case .error(let text): throw BenchError.natsProtocol("\(name): CONNECT refused: \(text)")
                default: continue
                }
            }
            var connection = NATSInbound(iterator: operations, name: name, serverInfo: info)
            return try await session(&connection, writer)
        }
    }

    /// `CONNECT`'s options: no `+OK` per operation, headers (for `HPUB` and JetStream's status messages) and a
    /// `503` status message for a request nobody answers (instead of silence).
    private static func connectJSON(name: String) -> String {
        let options: [String: Any] = [
            "verbose": false, "pedantic": false, "headers": true, "no_responders": true, "name": name, "lang": "swift",
            "version": "pigeon-bench", "protocol": 1,
        ]
        let data = (try? JSONSerialization.data(withJSONObject: options, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// A fresh inbox subject, `_INBOX.<random>`, for replies to this connection.
    static func makeInbox() -> String {
        "_INBOX." + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }
}

/// The operations a NATS server sends after the `PONG` that completed the handshake. Read it from one task.
struct NATSInbound {
    fileprivate var iterator: NIOAsyncChannelInboundStream<NATSServerOperation>.AsyncIterator
    /// The connection's name, for error messages.
    let name: String
    /// The JSON of the server's `INFO`.
    let serverInfo: String

    /// The next message on any subscription, or `nil` when the connection has ended; `PONG`s, `+OK`s and `INFO`
    /// updates are skipped. Throws on `-ERR`.
    mutating func next() async throws -> NATSMessage? {
        while let operation = try await iterator.next() {
            switch operation {
            case .message(let message): return message
            case .error(let text): throw BenchError.natsProtocol("\(name): -ERR \(text)")
            case .info, .ping, .pong, .ok: continue
            }
        }
        return nil
    }
}

/// Writes client operations on one NATS connection; each write is flushed.
struct NATSWriter: Sendable {
    let outbound: NIOAsyncChannelOutboundWriter<NATSClientOperation>

    /// `PUB` (or `HPUB` with `headers`) of `payload` on `subject`, answers going to `replyTo`.
    func publish(_ subject: String, replyTo: String? = nil, headers: [(String, String)] = [], payload: ByteBuffer) async throws {
        try await outbound.write(.publish(subject: subject, replyTo: replyTo, headers: headers, payload: payload))
    }

    /// `SUB`: messages on `subject` (wildcards allowed) arrive with `sid`.
    func subscribe(_ subject: String, sid: String) async throws {
        try await outbound.write(.subscribe(subject: subject, sid: sid))
    }
}
