import NIOCore

/// A Redis command: its name and arguments, already encoded as RESP bulk strings.
///
/// Build it in place, without intermediate arrays of strings:
/// ```swift
/// var command = RESPCommand("XADD", key, "*")
/// command.append("m")
/// command.append(payload)
/// ```
public struct RESPCommand: Sendable, Equatable, CustomStringConvertible {
    /// The number of bulk strings, the command name included.
    public private(set) var argumentCount: Int = 0
    private var body: ByteBuffer

    /// A command with its name and arguments.
    public init(_ name: String, _ arguments: any RESPArgument...) {
        body = ByteBufferAllocator().buffer(capacity: 32 + name.utf8.count + arguments.count * 24)
        append(name)
        for argument in arguments { append(argument) }
    }

    /// Appends one argument.
    public mutating func append(_ argument: some RESPArgument) {
        argumentCount += 1
        argument.writeRESPBulkString(into: &body)
    }

    /// Appends every element of a sequence as an argument.
    public mutating func append<Arguments: Sequence>(contentsOf arguments: Arguments) where Arguments.Element: RESPArgument {
        for argument in arguments { append(argument) }
    }

    /// The encoded size in bytes (a good capacity for ``encode(into:)``).
    public var encodedSize: Int { 1 + argumentCount.decimalDigitCount + 2 + body.readableBytes }

    /// Writes the command as a RESP array of bulk strings: `*N\r\n$len\r\n...`.
    public func encode(into buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt8(ascii: "*"))
        buffer.writeDecimal(Int64(argumentCount))
        buffer.writeCRLF()
        buffer.writeImmutableBuffer(body)
    }

    /// The command with its arguments, for logs (binary arguments are shown as UTF-8, long ones shortened).
    public var description: String {
        var encoded = ByteBufferAllocator().buffer(capacity: encodedSize)
        encode(into: &encoded)
        var decoder = RESPDecoder()
        guard let value = try? decoder.decode(buffer: &encoded), let arguments = value.array else { return "<invalid command>" }
        return arguments.map { argument -> String in
            let text = argument.string ?? ""
            return text.count > 64 ? "\(text.prefix(64))…" : text
        }.joined(separator: " ")
    }
}

/// A value that can be a command argument: written as one RESP bulk string.
public protocol RESPArgument: Sendable {
    /// Writes `$<length>\r\n<bytes>\r\n`.
    func writeRESPBulkString(into buffer: inout ByteBuffer)
}

extension String: RESPArgument {
    public func writeRESPBulkString(into buffer: inout ByteBuffer) {
        buffer.writeBulkStringHeader(length: utf8.count)
        buffer.writeString(self)
        buffer.writeCRLF()
    }
}

extension Substring: RESPArgument {
    public func writeRESPBulkString(into buffer: inout ByteBuffer) {
        buffer.writeBulkStringHeader(length: utf8.count)
        buffer.writeSubstring(self)
        buffer.writeCRLF()
    }
}

extension Int: RESPArgument {
    public func writeRESPBulkString(into buffer: inout ByteBuffer) {
        Int64(self).writeRESPBulkString(into: &buffer)
    }
}

extension Int64: RESPArgument {
    public func writeRESPBulkString(into buffer: inout ByteBuffer) {
        buffer.writeBulkStringHeader(length: decimalDigitCount)
        buffer.writeDecimal(self)
        buffer.writeCRLF()
    }
}

extension ByteBuffer: RESPArgument {
    public func writeRESPBulkString(into buffer: inout ByteBuffer) {
        buffer.writeBulkStringHeader(length: readableBytes)
        buffer.writeImmutableBuffer(self)
        buffer.writeCRLF()
    }
}

extension Array: RESPArgument where Element == UInt8 {
    public func writeRESPBulkString(into buffer: inout ByteBuffer) {
        buffer.writeBulkStringHeader(length: count)
        buffer.writeBytes(self)
        buffer.writeCRLF()
    }
}

extension ByteBuffer {
    mutating func writeCRLF() {
        writeInteger(UInt16(0x0D0A))  // "\r\n", big endian by default
    }

    mutating func writeBulkStringHeader(length: Int) {
        writeInteger(UInt8(ascii: "$"))
        writeDecimal(Int64(length))
        writeCRLF()
    }

    /// Writes the decimal digits of `value` without going through a String.
    mutating func writeDecimal(_ value: Int64) {
        let count = value.decimalDigitCount
        var magnitude = value.magnitude
        writeWithUnsafeMutableBytes(minimumWritableBytes: count) { pointer in
            var index = count - 1
            repeat {
                pointer[index] = UInt8(ascii: "0") &+ UInt8(magnitude % 10)
                magnitude /= 10
                index -= 1
            } while magnitude > 0
            if value < 0 { pointer[0] = UInt8(ascii: "-") }
            return count
        }
    }
}

extension BinaryInteger {
    /// The length of the decimal representation, the minus sign included.
    var decimalDigitCount: Int {
        var magnitude = self.magnitude
        var count = self < 0 ? 2 : 1
        while magnitude >= 10 {
            magnitude /= 10
            count += 1
        }
        return count
    }
}
