import NIOCore
import NIOPosix
import PigeonBenchSupport

/// A minimal MQTT 3.1.1 client on SwiftNIO for the benchmark's QoS 1 publishers and subscribers: one session per TCP
/// connection, no keep-alive pings and no retransmission (runs are short and stay on loopback).
enum MQTTClient {
    /// Connects to `127.0.0.1:port` as `clientId`, waits for an accepting CONNACK, runs `session` with the packets
    /// that follow and the writer for the connection, then sends DISCONNECT and closes it.
    static func withSession<Result: Sendable>(
        port: Int,
        clientId: String,
        cleanSession: Bool,
        _ session: (MQTTPackets, NIOAsyncChannelOutboundWriter<MQTTPacket>) async throws -> Result
    ) async throws -> Result {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(MQTTPacketDecoder()))
                    try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(MQTTPacketEncoder()))
                    return try NIOAsyncChannel<MQTTPacket, MQTTPacket>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var packets = inbound.makeAsyncIterator()
            try await outbound.write(.connect(clientId: clientId, cleanSession: cleanSession))
            let answer = try await packets.next()
            guard case .connack(_, 0) = answer else {
                throw BenchError.mqttProtocol("\(clientId): CONNECT answered with \(answer.map { "\($0)" } ?? "end of stream")")
            }
            let result = try await session(MQTTPackets(iterator: packets), outbound)
            // The session's work is done: a connection already closing may refuse the DISCONNECT.
            try? await outbound.write(.disconnect)
            return result
        }
    }
}

/// The packets a broker sends after CONNACK. Iterate it once.
struct MQTTPackets: AsyncSequence {
    typealias Element = MQTTPacket

    fileprivate let iterator: NIOAsyncChannelInboundStream<MQTTPacket>.AsyncIterator

    func makeAsyncIterator() -> NIOAsyncChannelInboundStream<MQTTPacket>.AsyncIterator {
        iterator
    }
}

/// MQTT packet identifiers for one session: 1, 2, … 65535, 1, …
struct MQTTPacketIDs {
    private var last: UInt16 = 0

    mutating func next() -> UInt16 {
        last = last == .max ? 1 : last + 1
        return last
    }
}
