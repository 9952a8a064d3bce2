/// Finds a key that appears twice in one JSON object.
///
/// Parsers disagree on such input (Foundation keeps the first value, JavaScript and Python the last), so a proxy
/// that validated one reading would let the server act on the other: Pigeon refuses it (`400`). Keys are compared
/// after unescaping (`"a"` and `"\u0061"` are the same key). Iterative, so nesting depth cannot exhaust the stack.
package enum JSONDuplicateKeys {
    /// The first repeated key of `bytes` (a JSON text that a decoder already accepted), or `nil`.
    package static func first(in bytes: some Collection<UInt8>) -> String? {
        let bytes = Array(bytes)
        // One entry per open container: the keys seen so far (nil for an array).
        var open: [Set<[UInt8]>?] = []
        var index = 0
        var expectingKey = false
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "{"):
                open.append([])
                expectingKey = true
                index += 1
            case UInt8(ascii: "["):
                open.append(nil)
                expectingKey = false
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                if !open.isEmpty { open.removeLast() }
                expectingKey = false
                index += 1
            case UInt8(ascii: ","):
                if case .some(.some) = open.last { expectingKey = true }
                index += 1
            case UInt8(ascii: "\""):
                let (string, end) = readString(bytes, from: index + 1, decode: expectingKey)
                if expectingKey, var keys = open.last.flatMap({ $0 }) {
                    guard keys.insert(string).inserted else { return String(decoding: string, as: UTF8.self) }
                    open[open.count - 1] = keys
                    expectingKey = false
                }
                index = end
            default:
                index += 1
            }
        }
        return nil
    }

    /// The string starting after its opening quote at `start`: its unescaped UTF-8 (when `decode`) and the index
    /// just after its closing quote.
    private static func readString(_ bytes: [UInt8], from start: Int, decode: Bool) -> ([UInt8], Int) {
        var result: [UInt8] = []
        var index = start
        var pendingHighSurrogate: UInt32?
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") { return (result, index + 1) }
            guard byte == UInt8(ascii: "\\"), index + 1 < bytes.count else {
                if decode { result.append(byte) }
                index += 1
                continue
            }
            let escape = bytes[index + 1]
            index += 2
            guard decode else {
                if escape == UInt8(ascii: "u") { index += 4 }
                continue
            }
            switch escape {
            case UInt8(ascii: "b"): result.append(0x08)
            case UInt8(ascii: "f"): result.append(0x0C)
            case UInt8(ascii: "n"): result.append(0x0A)
            case UInt8(ascii: "r"): result.append(0x0D)
            case UInt8(ascii: "t"): result.append(0x09)
            case UInt8(ascii: "u"):
                guard index + 4 <= bytes.count, let unit = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
                    return (result, bytes.count)
                }
                index += 4
                var scalarValue = unit
                if (0xD800..<0xDC00).contains(unit) {
                    pendingHighSurrogate = unit
                    continue
                }
                if (0xDC00..<0xE000).contains(unit), let high = pendingHighSurrogate {
                    scalarValue = 0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00)
                }
                pendingHighSurrogate = nil
                result.append(contentsOf: Array(String(Unicode.Scalar(scalarValue).map(Character.init) ?? "\u{FFFD}").utf8))
            default: result.append(escape)
            }
        }
        return (result, bytes.count)
    }
}
