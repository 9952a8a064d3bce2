import Foundation
import PigeonProtocol

/// Identifier helpers of the server.
package enum Identifiers {
    /// A new lowercase UUID, version 7 (time-ordered, so ids inserted in order stay close in indexes).
    package static func uuidV7(nowMillis: Int64 = WallClock.nowMillis()) -> String {
        TimeOrderedID.make(millisecondsSince1970: nowMillis)
    }

    /// A new lowercase random UUID (version 4).
    package static func uuidV4() -> String {
        UUID().uuidString.lowercased()
    }

    /// `count` random bytes as lowercase hex.
    package static func randomHex(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}

/// Wall-clock time in the units of the wire contract.
package enum WallClock {
    /// Milliseconds since the Unix epoch.
    package static func nowMillis() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }
}
