import NIOCore

/// Decodes RESP2 values from a byte stream.
///
/// Incremental: a value split anywhere across reads (inside a length line, a bulk payload, or between the
/// elements of nested arrays) is resumed where it stopped, so a big reply arriving in many reads is parsed once,
/// in linear time. Malformed input throws ``RedisError/protocolError(_:)``.
public struct RESPDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = RESPValue

    /// The largest bulk string accepted (Redis's own `proto-max-bulk-len` default is 512 MB).
    public var maximumBulkLength: Int
    /// The longest simple string, error or length line accepted.
    public var maximumLineLength: Int

    private struct PartialArray {
        var remaining: Int
        var elements: [RESPValue]
    }

    /// Arrays whose header was read and whose elements are still arriving, innermost last.
    private var openArrays: [PartialArray] = []
    /// The length of a bulk string whose header was read and whose payload is still arriving.
    private var pendingBulkLength: Int?
    /// How far the search for the end of the current line got (resumes there on the next read).
    private var scannedLineBytes = 0

    public init(maximumBulkLength: Int = 512 * 1024 * 1024, maximumLineLength: Int = 1024 * 1024) {
        self.maximumBulkLength = maximumBulkLength
        self.maximumLineLength = maximumLineLength
    }

    private enum Step {
        case value(RESPValue)
        case arrayHeader(count: Int)
        case needMoreData
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> RESPValue? {
        while true {
            switch try step(&buffer) {
            case .needMoreData:
                return nil
            case .arrayHeader(let count):
                openArrays.append(PartialArray(remaining: count, elements: []))
                // A claimed count is not trusted with memory: the array grows as elements really arrive.
                openArrays[openArrays.count - 1].elements.reserveCapacity(min(count, 1024))
            case .value(var value):
                while !openArrays.isEmpty {
                    let last = openArrays.count - 1
                    openArrays[last].elements.append(value)
                    openArrays[last].remaining -= 1
                    guard openArrays[last].remaining == 0 else { break }
                    value = .array(openArrays.removeLast().elements)
                }
                if openArrays.isEmpty { return value }
            }
        }
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> RESPValue? {
        try decode(buffer: &buffer)
    }

    /// Reads one scalar value or one array header, consuming its bytes; consumes nothing if it is incomplete.
    private mutating func step(_ buffer: inout ByteBuffer) throws -> Step {
        if let length = pendingBulkLength {
            guard buffer.readableBytes >= length + 2 else { return .needMoreData }
            let payload = buffer.readSlice(length: length)!
            guard buffer.readInteger(as: UInt16.self) == 0x0D0A else {
                throw RedisError.protocolError("bulk string of \(length) bytes not followed by CRLF")
            }
            pendingBulkLength = nil
            return .value(.bulkString(payload))
        }
        let start = buffer.readerIndex
        guard let type = buffer.getInteger(at: start, as: UInt8.self) else { return .needMoreData }
        guard Self.typeBytes.contains(type) else {
            let shown = buffer.readableBytesView.prefix(40)
            throw RedisError.protocolError("unexpected type byte 0x\(String(type, radix: 16)) in \(Self.quoted(shown))")
        }
        guard let lineLength = try findLine(in: buffer) else { return .needMoreData }
        let content = buffer.readableBytesView[(start + 1)..<(start + lineLength)]
        buffer.moveReaderIndex(forwardBy: lineLength + 2)
        scannedLineBytes = 0
        switch type {
        case UInt8(ascii: "+"):
            return .value(.simpleString(String(decoding: content, as: UTF8.self)))
        case UInt8(ascii: "-"):
            return .value(.error(String(decoding: content, as: UTF8.self)))
        case UInt8(ascii: ":"):
            guard let value = content.parseDecimalInt64() else {
                throw RedisError.protocolError("invalid integer \(Self.quoted(content))")
            }
            return .value(.integer(value))
        case UInt8(ascii: "$"):
            guard let length = content.parseDecimalInt64(), length >= -1 else {
                throw RedisError.protocolError("invalid bulk string length \(Self.quoted(content))")
            }
            if length == -1 { return .value(.bulkString(nil)) }
            guard length <= maximumBulkLength else {
                throw RedisError.protocolError("bulk string of \(length) bytes exceeds the limit of \(maximumBulkLength)")
            }
            pendingBulkLength = Int(length)
            return try step(&buffer)
        case UInt8(ascii: "*"):
            guard let count = content.parseDecimalInt64(), count >= -1, count <= Int32.max else {
                throw RedisError.protocolError("invalid array length \(Self.quoted(content))")
            }
            switch count {
            case -1: return .value(.array(nil))
            case 0: return .value(.array([]))
            default: return .arrayHeader(count: Int(count))
            }
        default:
            preconditionFailure("type byte checked above")
        }
    }

    /// The length of the line at the reader index without its CRLF, or `nil` if its end has not arrived.
    private mutating func findLine(in buffer: ByteBuffer) throws -> Int? {
        let view = buffer.readableBytesView
        var index = view.startIndex + max(0, scannedLineBytes - 1)
        while index < view.endIndex {
            if view[index] == UInt8(ascii: "\r") {
                guard index + 1 < view.endIndex else { break }
                guard view[index + 1] == UInt8(ascii: "\n") else {
                    throw RedisError.protocolError("CR not followed by LF in a line")
                }
                return index - view.startIndex
            }
            index += 1
        }
        scannedLineBytes = view.count
        guard scannedLineBytes <= maximumLineLength else {
            throw RedisError.protocolError("line longer than \(maximumLineLength) bytes without CRLF")
        }
        return nil
    }

    private static let typeBytes: [UInt8] = [UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: ":"), UInt8(ascii: "$"), UInt8(ascii: "*")]

    private static func quoted(_ bytes: some Collection<UInt8>) -> String {
        "\"\(String(decoding: bytes.prefix(40), as: UTF8.self))\""
    }
}
