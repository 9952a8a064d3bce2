import Foundation

/// Time-ordered UUIDs (version 7, RFC 9562), in lowercase.
///
/// Use them as `clientMessageId`: the server keeps a de-duplication index keyed by device and
/// clientMessageId, and ids that grow with time append to it instead of landing on random pages,
/// which keeps durable accepts fast. Any UUID is accepted.
public enum TimeOrderedID {
    /// A new version 7 UUID for the given time (milliseconds since the epoch; now by default).
    public static func make(millisecondsSince1970: Int64 = Int64(Date().timeIntervalSince1970 * 1000)) -> String {
        var generator = SystemRandomNumberGenerator()
        let random1 = generator.next() as UInt64
        let random2 = generator.next() as UInt64
        let millis = UInt64(max(0, millisecondsSince1970))
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(i))) }
        for i in 6..<8 { bytes[i] = UInt8(truncatingIfNeeded: random1 >> (8 * UInt64(i))) }
        for i in 8..<16 { bytes[i] = UInt8(truncatingIfNeeded: random2 >> (8 * UInt64(i - 8))) }
        bytes[6] = (bytes[6] & 0x0F) | 0x70
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return format(bytes)
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// 16 bytes in the canonical 8-4-4-4-12 form.
    static func format(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: 36) { buffer in
            var position = 0
            for (index, byte) in bytes.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    buffer[position] = UInt8(ascii: "-")
                    position += 1
                }
                buffer[position] = hexDigits[Int(byte >> 4)]
                buffer[position + 1] = hexDigits[Int(byte & 0x0F)]
                position += 2
            }
            return position
        }
    }
}
