import Crypto
import Foundation
@testable import PigeonKit
import Testing

/// PigeonKit's SHA-256 (its own on Linux, CryptoKit's on Apple platforms): the standard's test vectors, and the same
/// digests as swift-crypto for random inputs fed in random pieces (the block boundaries and the padding's edge cases
/// included).
struct SHA256DigestTests {
    private func digest(_ bytes: [UInt8], pieces: [Int] = []) -> String {
        var digest = SHA256Digest()
        var rest = bytes[...]
        for piece in pieces where !rest.isEmpty {
            let chunk = rest.prefix(piece)
            chunk.withUnsafeBytes { digest.update($0) }
            rest = rest.dropFirst(chunk.count)
        }
        rest.withUnsafeBytes { digest.update($0) }
        return digest.hex
    }

    @Test func theStandardsVectors() {
        #expect(digest([]) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(digest(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(
            digest(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            digest(Array("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu".utf8))
                == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
        #expect(
            digest([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000), pieces: [1, 63, 64, 1000])
                == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test func theSameAsSwiftCryptoForRandomInputsInRandomPieces() {
        var generator = SystemRandomNumberGenerator()
        for length in [1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 65_537] + (0..<50).map({ _ in Int.random(in: 0...5000) }) {
            let bytes = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
            let pieces = (0..<5).map { _ in Int.random(in: 1...200) }
            let expected = Crypto.SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
            #expect(digest(bytes, pieces: pieces) == expected, "\(length) bytes in pieces \(pieces)")
        }
    }

    @Test func theDigestSoFarLeavesTheHasherGoingOn() {
        var digest = SHA256Digest()
        Array("ab".utf8).withUnsafeBytes { digest.update($0) }
        _ = digest.hex
        Array("c".utf8).withUnsafeBytes { digest.update($0) }
        #expect(digest.hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }
}
