import NIOCore

/// A RESP2 value: a reply from Redis, or an element of one.
public enum RESPValue: Sendable, Equatable {
    /// A status reply such as `OK` or `QUEUED`.
    case simpleString(String)
    /// An error reply such as `WRONGTYPE Operation against a key holding the wrong kind of value`.
    ///
    /// A top-level error reply fails the command with ``RedisError/server(_:)``; this case appears only
    /// nested inside an array (the results of `EXEC`, for example).
    case error(String)
    /// An integer reply.
    case integer(Int64)
    /// A binary-safe string; `nil` is the null bulk string (a missing key, for example).
    case bulkString(ByteBuffer?)
    /// An array of values; `nil` is the null array (an aborted `EXEC`, a `BLPOP` timeout).
    case array([RESPValue]?)
}

extension RESPValue {
    /// The text of a simple or bulk string (bulk bytes decoded as UTF-8, invalid sequences repaired); `nil` otherwise.
    public var string: String? {
        switch self {
        case .simpleString(let string): string
        case .bulkString(let buffer?): String(buffer: buffer)
        default: nil
        }
    }

    /// The bytes of a bulk string; `nil` for anything else, including the null bulk string.
    public var buffer: ByteBuffer? {
        if case .bulkString(let buffer?) = self { return buffer }
        return nil
    }

    /// An integer reply, or a simple or bulk string that holds a decimal integer (as `HGET` returns them);
    /// `nil` otherwise.
    public var int: Int64? {
        switch self {
        case .integer(let value): value
        case .simpleString(let string): Int64(string)
        case .bulkString(let buffer?): buffer.readableBytesView.parseDecimalInt64()
        default: nil
        }
    }

    /// The elements of an array; `nil` for anything else, including the null array.
    public var array: [RESPValue]? {
        if case .array(let elements?) = self { return elements }
        return nil
    }

    /// Whether this is the null bulk string or the null array.
    public var isNull: Bool {
        switch self {
        case .bulkString(nil), .array(nil): true
        default: false
        }
    }
}

extension RESPValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case .simpleString(let string): "+\(string)"
        case .error(let message): "-\(message)"
        case .integer(let value): ":\(value)"
        case .bulkString(nil), .array(nil): "(nil)"
        case .bulkString(let buffer?):
            buffer.readableBytes > 256 ? "\"\(String(buffer: buffer.getSlice(at: buffer.readerIndex, length: 256)!))…\" (\(buffer.readableBytes) bytes)" : "\"\(String(buffer: buffer))\""
        case .array(let elements?): "[\(elements.map(\.description).joined(separator: ", "))]"
        }
    }
}

extension Collection<UInt8> {
    /// Parses `-?[0-9]+` exactly (no sign on zero-length digits, no spaces, no overflow); `nil` otherwise.
    func parseDecimalInt64() -> Int64? {
        var index = startIndex
        guard index != endIndex else { return nil }
        let negative = self[index] == UInt8(ascii: "-")
        if negative { formIndex(after: &index) }
        guard index != endIndex else { return nil }
        var value: Int64 = 0
        while index != endIndex {
            let byte = self[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let digit = Int64(byte &- UInt8(ascii: "0"))
            let (shifted, overflow1) = value.multipliedReportingOverflow(by: 10)
            // Accumulate negatively so that Int64.min parses.
            let (next, overflow2) = shifted.subtractingReportingOverflow(digit)
            guard !overflow1, !overflow2 else { return nil }
            value = next
            formIndex(after: &index)
        }
        if negative { return value }
        guard value != .min else { return nil }
        return -value
    }
}
