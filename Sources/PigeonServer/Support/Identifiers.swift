import Foundation

/// Identifier and time helpers shared by the server.
enum Identifiers {
    /// A new lowercase UUID, version 7 (time-ordered, so ids inserted in order stay close in indexes).
    static func uuidV7(nowMillis: Int64 = WallClock.nowMillis()) -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        let random1 = generator.next() as UInt64
        let random2 = generator.next() as UInt64
        let millis = UInt64(max(0, nowMillis))
        for i in 0..<6 { bytes[i] = UInt8(truncatingIfNeeded: millis >> (40 - 8 * UInt64(i))) }
        for i in 6..<8 { bytes[i] = UInt8(truncatingIfNeeded: random1 >> (8 * UInt64(i))) }
        for i in 8..<16 { bytes[i] = UInt8(truncatingIfNeeded: random2 >> (8 * UInt64(i - 8))) }
        bytes[6] = (bytes[6] & 0x0F) | 0x70
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return format(bytes)
    }

    /// A new lowercase random UUID (version 4).
    static func uuidV4() -> String {
        UUID().uuidString.lowercased()
    }

    /// `count` random bytes as lowercase hex.
    static func randomHex(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in hexByte(UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

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

    private static func hexByte(_ byte: UInt8) -> String {
        String(decoding: [hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]], as: UTF8.self)
    }
}

/// Wall-clock time in the units of the wire contract.
enum WallClock {
    /// Milliseconds since the Unix epoch.
    static func nowMillis() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }
}
