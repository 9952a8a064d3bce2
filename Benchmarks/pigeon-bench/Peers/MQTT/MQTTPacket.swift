import NIOCore
import PigeonBenchSupport

/// The MQTT 3.1.1 control packets the benchmark's client exchanges with a broker: just enough for QoS 1 publishing
/// and subscribing on persistent sessions (no QoS 2, no will, no authentication).
enum MQTTPacket: Sendable {
    /// CONNECT with keep alive 0 (no pings: runs are short).
    case connect(clientId: String, cleanSession: Bool)
    case connack(sessionPresent: Bool, returnCode: UInt8)
    /// PUBLISH at QoS 1 when `packetId` is set, QoS 0 otherwise.
    case publish(topic: String, packetId: UInt16?, payload: ByteBuffer)
    case puback(packetId: UInt16)
    /// SUBSCRIBE to one topic filter at QoS 1.
    case subscribe(packetId: UInt16, topicFilter: String)
    case suback(packetId: UInt16, returnCodes: [UInt8])
    case disconnect
    /// A packet the client does not act on (PINGRESP, …), by its type number.
    case other(type: UInt8)
}

/// Splits the byte stream from the broker into ``MQTTPacket``s.
struct MQTTPacketDecoder: ByteToMessageDecoder {
    typealias InboundOut = MQTTPacket

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let (header, remainingLength, headerSize) = try Self.fixedHeader(in: buffer) else { return .needMoreData }
        guard buffer.readableBytes >= headerSize + remainingLength else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: headerSize)
        var body = buffer.readSlice(length: remainingLength)!
        context.fireChannelRead(wrapInboundOut(try Self.packet(header: header, body: &body)))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }

    /// The first byte, the remaining length and the size of both, or `nil` if the header is not complete yet.
    private static func fixedHeader(in buffer: ByteBuffer) throws -> (UInt8, Int, Int)? {
        guard let header = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        var length = 0
        for position in 0..<4 {
            guard let byte = buffer.getInteger(at: buffer.readerIndex + 1 + position, as: UInt8.self) else { return nil }
            length |= Int(byte & 0x7F) << (7 * position)
            if byte & 0x80 == 0 { return (header, length, 2 + position) }
        }
        throw BenchError.mqttProtocol("remaining length longer than 4 bytes")
    }

    private static func packet(header: UInt8, body: inout ByteBuffer) throws -> MQTTPacket {
        let type = header >> 4
        switch type {
        case 2:
            guard let flags = body.readInteger(as: UInt8.self), let returnCode = body.readInteger(as: UInt8.self) else {
                throw BenchError.mqttProtocol("short CONNACK")
            }
            return .connack(sessionPresent: flags & 1 == 1, returnCode: returnCode)
        case 3:
            let qos = (header >> 1) & 0x03
            guard qos < 2 else { throw BenchError.mqttProtocol("PUBLISH at QoS \(qos) is not supported") }
            guard let topic = body.readMQTTString() else { throw BenchError.mqttProtocol("short PUBLISH") }
            var packetId: UInt16?
            if qos == 1 {
                guard let id = body.readInteger(as: UInt16.self) else { throw BenchError.mqttProtocol("PUBLISH without packet id") }
                packetId = id
            }
            return .publish(topic: topic, packetId: packetId, payload: body)
        case 4:
            guard let packetId = body.readInteger(as: UInt16.self) else { throw BenchError.mqttProtocol("short PUBACK") }
            return .puback(packetId: packetId)
        case 9:
            guard let packetId = body.readInteger(as: UInt16.self) else { throw BenchError.mqttProtocol("short SUBACK") }
            return .suback(packetId: packetId, returnCodes: Array(body.readableBytesView))
        default:
            return .other(type: type)
        }
    }
}

/// Writes ``MQTTPacket``s as bytes.
struct MQTTPacketEncoder: MessageToByteEncoder {
    typealias OutboundIn = MQTTPacket

    func encode(data packet: MQTTPacket, out: inout ByteBuffer) throws {
        var body = ByteBuffer()
        let header: UInt8
        switch packet {
        case .connect(let clientId, let cleanSession):
            header = 0x10
            body.writeMQTTString("MQTT")
            body.writeInteger(UInt8(4))  // protocol level 3.1.1
            body.writeInteger(UInt8(cleanSession ? 0x02 : 0x00))
            body.writeInteger(UInt16(0))  // keep alive off
            body.writeMQTTString(clientId)
        case .publish(let topic, let packetId, var payload):
            header = packetId == nil ? 0x30 : 0x32
            body.writeMQTTString(topic)
            if let packetId { body.writeInteger(packetId) }
            body.writeBuffer(&payload)
        case .puback(let packetId):
            header = 0x40
            body.writeInteger(packetId)
        case .subscribe(let packetId, let topicFilter):
            header = 0x82
            body.writeInteger(packetId)
            body.writeMQTTString(topicFilter)
            body.writeInteger(UInt8(1))  // requested QoS
        case .disconnect:
            header = 0xE0
        case .connack, .suback, .other:
            throw BenchError.mqttProtocol("a client does not send \(packet)")
        }
        out.writeInteger(header)
        var remaining = body.readableBytes
        repeat {
            var byte = UInt8(remaining & 0x7F)
            remaining >>= 7
            if remaining > 0 { byte |= 0x80 }
            out.writeInteger(byte)
        } while remaining > 0
        out.writeBuffer(&body)
    }
}

extension ByteBuffer {
    /// An MQTT UTF-8 string: a 2-byte length, then the bytes.
    fileprivate mutating func writeMQTTString(_ string: String) {
        writeInteger(UInt16(string.utf8.count))
        writeString(string)
    }

    fileprivate mutating func readMQTTString() -> String? {
        guard let length = readInteger(as: UInt16.self) else { return nil }
        return readString(length: Int(length))
    }
}
