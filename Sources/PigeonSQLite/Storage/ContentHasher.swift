import Crypto
import NIOCore

/// The SHA-256 of an upload, fed chunk by chunk as the bytes arrive: its lowercase hex is the bytes' content address.
struct ContentHasher: Sendable {
    private var hash = SHA256()

    mutating func update(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { hash.update(bufferPointer: $0) }
    }

    /// The lowercase hex digest of everything fed.
    func finalize() -> String {
        let digits = Array("0123456789abcdef".utf8)
        var hex: [UInt8] = []
        hex.reserveCapacity(64)
        for byte in hash.finalize() {
            hex.append(digits[Int(byte >> 4)])
            hex.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: hex, as: UTF8.self)
    }
}
