import Foundation
import NIOCore
import PigeonBenchSupport

/// A message a NATS server sends (the client protocol's server operations).
enum NATSServerOperation: Sendable {
    /// `INFO {json}`: the server's description, first on every connection.
    case info(String)
    /// `MSG` or `HMSG`: a message on a subscription.
    case message(NATSMessage)
    case ping
    case pong
    /// `+OK` (only sent in verbose mode, which the benchmark's client turns off).
    case ok
    /// `-ERR 'text'`: the server refused something; most such errors also close the connection.
    case error(String)
}

/// A message delivered on a subscription (`MSG`, or `HMSG` when it carries headers).
struct NATSMessage: Sendable {
    let subject: String
    /// The subscription id given in `SUB`.
    let sid: String
    let replyTo: String?
    /// The header block of an `HMSG` (`NATS/1.0[ status]\r\nName: value\r\n…\r\n`), `nil` for a `MSG`.
    let headers: String?
    let payload: ByteBuffer

    /// The status code of a status message (`NATS/1.0 503` for no responders, 408, 100 …), `nil` for a plain one.
    var status: Int? {
        guard let firstLine = headers?.split(separator: "\r\n", maxSplits: 1).first else { return nil }
        let fields = firstLine.split(separator: " ")
        return fields.count >= 2 ? Int(fields[1]) : nil
    }
}

/// A client operation the benchmark sends.
enum NATSClientOperation: Sendable {
    /// `CONNECT {json}`.
    case connect(json: String)
    /// `PUB`, or `HPUB` when `headers` are given (each `(name, value)` becomes a `Name: value` line).
    case publish(subject: String, replyTo: String?, headers: [(String, String)], payload: ByteBuffer)
    /// `SUB subject sid`.
    case subscribe(subject: String, sid: String)
    case ping
    case pong
}

/// Splits the byte stream from a NATS server into ``NATSServerOperation``s: a control line ended by CRLF, and for
/// `MSG`/`HMSG` the number of bytes it announces plus CRLF.
struct NATSServerOperationDecoder: ByteToMessageDecoder {
    typealias InboundOut = NATSServerOperation

    /// Longest control line accepted (an `INFO` line is the longest; the server's default limit is 4 KiB).
    private static let maxControlLine = 64 * 1024

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            if buffer.readableBytes > Self.maxControlLine { throw BenchError.natsProtocol("control line longer than 64 KiB") }
            return .needMoreData
        }
        let lineLength = newline - buffer.readerIndex
        guard var line = buffer.getString(at: buffer.readerIndex, length: lineLength) else { return .needMoreData }
        if line.hasSuffix("\r") { line.removeLast() }
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let verb = fields.first?.uppercased() else {
            buffer.moveReaderIndex(forwardBy: lineLength + 1)
            return .continue
        }
        let operation: NATSServerOperation
        switch verb {
        case "MSG", "HMSG":
            let withHeaders = verb == "HMSG"
            let counts = withHeaders ? 2 : 1
            guard fields.count == 3 + counts || fields.count == 4 + counts,
                let total = Int(fields[fields.count - 1]),
                let headerLength = withHeaders ? Int(fields[fields.count - 2]) : 0,
                headerLength <= total
            else { throw BenchError.natsProtocol("malformed \(verb) line: \(line)") }
            guard buffer.readableBytes >= lineLength + 1 + total + 2 else { return .needMoreData }
            buffer.moveReaderIndex(forwardBy: lineLength + 1)
            let headers = withHeaders ? buffer.readString(length: headerLength) : nil
            let payload = buffer.readSlice(length: total - headerLength) ?? ByteBuffer()
            buffer.moveReaderIndex(forwardBy: 2)
            operation = .message(
                NATSMessage(
                    subject: String(fields[1]),
                    sid: String(fields[2]),
                    replyTo: fields.count == 4 + counts ? String(fields[3]) : nil,
                    headers: headers,
                    payload: payload
                )
            )
        default:
            buffer.moveReaderIndex(forwardBy: lineLength + 1)
            switch verb {
            case "PING": operation = .ping
            case "PONG": operation = .pong
            case "+OK": operation = .ok
            case "INFO": operation = .info(String(line.dropFirst(4)).trimmingCharacters(in: .whitespaces))
            case "-ERR": operation = .error(String(line.dropFirst(4)).trimmingCharacters(in: .whitespaces))
            default: throw BenchError.natsProtocol("unknown operation: \(line)")
            }
        }
        context.fireChannelRead(wrapInboundOut(operation))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }
}

/// Writes ``NATSClientOperation``s as bytes.
struct NATSClientOperationEncoder: MessageToByteEncoder {
    typealias OutboundIn = NATSClientOperation

    func encode(data operation: NATSClientOperation, out: inout ByteBuffer) throws {
        switch operation {
        case .connect(let json):
            out.writeString("CONNECT \(json)\r\n")
        case .publish(let subject, let replyTo, let headers, var payload):
            let reply = replyTo.map { " \($0)" } ?? ""
            if headers.isEmpty {
                out.writeString("PUB \(subject)\(reply) \(payload.readableBytes)\r\n")
            } else {
                let block = "NATS/1.0\r\n" + headers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
                let headerLength = block.utf8.count
                out.writeString("HPUB \(subject)\(reply) \(headerLength) \(headerLength + payload.readableBytes)\r\n")
                out.writeString(block)
            }
            out.writeBuffer(&payload)
            out.writeString("\r\n")
        case .subscribe(let subject, let sid):
            out.writeString("SUB \(subject) \(sid)\r\n")
        case .ping:
            out.writeString("PING\r\n")
        case .pong:
            out.writeString("PONG\r\n")
        }
    }
}

/// Answers the server's keep-alive `PING`s with `PONG` inside the pipeline, so that a session busy with its own work
/// is never disconnected as a stale client; every other operation passes on.
final class NATSPingHandler: ChannelInboundHandler {
    typealias InboundIn = NATSServerOperation
    typealias InboundOut = NATSServerOperation
    typealias OutboundOut = NATSClientOperation

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .ping = unwrapInboundIn(data) {
            context.writeAndFlush(wrapOutboundOut(.pong), promise: nil)
        } else {
            context.fireChannelRead(data)
        }
    }
}
