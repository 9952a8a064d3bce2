import Crypto
import Foundation

/// Encryption at rest (`--encryption-key-file`, SECURITY.md "Encryption at rest"): the values that carry what users
/// wrote (message and edit bodies, reply previews read from them, push registration `data`, webhook payloads, event
/// payloads, dead letters, attachment bytes) are sealed with AES-256-GCM before a store writes them and opened as it
/// reads them. Ids, seqs, timestamps and membership stay in the clear: the stores query and order by them.
///
/// A key ring holds one or more keys, newest last: values are sealed with the newest and opened with the key whose id
/// they carry, so a ring of an old and a new key reads a store part-way through `pigeon-server rekey`. Without keys
/// (``off``) values are written as they are.
///
/// A sealed text value is `"\u{1}at1:" + keyId + ":" + base64(nonce ‖ ciphertext ‖ tag)`; a value without that prefix
/// was written before the store had a key and is read as it is (`rekey` seals it). Sealed bytes (attachments) are
/// `"PGNE" ‖ id length ‖ id ‖ nonce ‖ ciphertext ‖ tag` per chunk (``sealChunk(_:index:)``).
public struct AtRestCipher: Sendable {
    public struct Key: Sendable {
        public let id: String
        let key: SymmetricKey
    }

    /// The ring, newest last; empty: encryption is off.
    public let keys: [Key]

    public static let off = AtRestCipher(keys: [])

    public var isOn: Bool { !keys.isEmpty }
    /// The key new values are sealed with.
    public var newest: Key? { keys.last }

    init(keys: [Key]) {
        self.keys = keys
    }

    /// What the check value (``checkValue()``) seals: opening it proves a key is the one the store was written with.
    static let checkPlaintext = "pigeon at-rest check v1"
    static let textPrefix = "\u{1}at1:"

    // MARK: Key file

    /// Reads `--encryption-key-file`: exactly 32 bytes are one key (its id: the first 16 hex digits of the SHA-256 of
    /// the key); anything else is a text key ring, one `id:base64key` per line (32-byte keys, ids of
    /// `[A-Za-z0-9._-]`, at most 64 characters, each once), newest last; blank lines and `#` comments are skipped.
    public static func load(path: String) throws(AtRestKeyError) -> AtRestCipher {
        guard let contents = FileManager.default.contents(atPath: path) else {
            throw AtRestKeyError("cannot read the encryption key file \(path)")
        }
        return try parse(contents, source: path)
    }

    public static func parse(_ contents: Data, source: String) throws(AtRestKeyError) -> AtRestCipher {
        if contents.count == 32 { return AtRestCipher(keys: [rawKey(contents)]) }
        guard let text = String(data: contents, encoding: .utf8) else {
            throw AtRestKeyError("the encryption key file \(source) is neither 32 raw bytes nor a key ring of id:base64key lines")
        }
        var keys: [Key] = []
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let colon = line.firstIndex(of: ":") else {
                throw AtRestKeyError("the encryption key file \(source), line \(number + 1): expected id:base64key (or the whole file 32 raw bytes)")
            }
            let id = String(line[..<colon])
            guard isValidKeyId(id) else {
                throw AtRestKeyError("the encryption key file \(source), line \(number + 1): a key id is 1-64 characters of [A-Za-z0-9._-]")
            }
            guard let bytes = Data(base64Encoded: String(line[line.index(after: colon)...])), bytes.count == 32 else {
                throw AtRestKeyError("the encryption key file \(source), line \(number + 1): the key must be 32 bytes in base64")
            }
            guard !keys.contains(where: { $0.id == id }) else {
                throw AtRestKeyError("the encryption key file \(source), line \(number + 1): key id \(id) appears twice")
            }
            keys.append(Key(id: id, key: SymmetricKey(data: bytes)))
        }
        guard !keys.isEmpty else { throw AtRestKeyError("the encryption key file \(source) holds no key") }
        return AtRestCipher(keys: keys)
    }

    static func rawKey(_ bytes: Data) -> Key {
        let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        return Key(id: String(digest.prefix(16)), key: SymmetricKey(data: bytes))
    }

    static func isValidKeyId(_ id: String) -> Bool {
        (1...64).contains(id.utf8.count)
            && id.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                    UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                    true
                default: false
                }
            }
    }

    func key(id: some StringProtocol) -> Key? { keys.first { $0.id == id } }

    // MARK: Text values

    /// `text` sealed with the newest key, or `text` itself when encryption is off.
    public func seal(_ text: String) -> String {
        guard let newest else { return text }
        // AES-GCM with a fresh random nonce cannot fail for a valid 256-bit key.
        let box = try! AES.GCM.seal(Data(text.utf8), using: newest.key)
        return Self.textPrefix + newest.id + ":" + box.combined!.base64EncodedString()
    }

    public func seal(_ text: String?) -> String? { text.map { seal($0) } }

    /// Each of `texts` sealed; an empty one stays empty (columns where `''` stands for "none", and an erased body,
    /// which tells nothing its `deleted_at` does not).
    public func seal(all texts: [String]) -> [String] {
        guard isOn else { return texts }
        return texts.map { $0.isEmpty ? $0 : seal($0) }
    }

    /// The plaintext of a stored value: opened with the key its id names, or the value itself if it was written
    /// unsealed. A sealed value whose key is not in the ring, or that does not open, is an error (never shown as text).
    public func open(_ stored: String) throws(AtRestKeyError) -> String {
        guard stored.hasPrefix(Self.textPrefix) else { return stored }
        let rest = stored.dropFirst(Self.textPrefix.count)
        guard let colon = rest.firstIndex(of: ":") else { throw AtRestKeyError("a sealed value is malformed") }
        let id = rest[..<colon]
        guard let key = key(id: id) else {
            throw AtRestKeyError("a value is encrypted under key id \(id), which is not in the encryption key file")
        }
        guard let combined = Data(base64Encoded: String(rest[rest.index(after: colon)...])),
            let box = try? AES.GCM.SealedBox(combined: combined),
            let plain = try? AES.GCM.open(box, using: key.key)
        else { throw AtRestKeyError("a value encrypted under key id \(id) does not open with that key (wrong key or damaged value)") }
        return String(decoding: plain, as: UTF8.self)
    }

    public func open(_ stored: String?) throws(AtRestKeyError) -> String? {
        guard let stored else { return nil }
        return try open(stored)
    }

    /// The id of the key a stored value is sealed with; `nil`: written unsealed.
    public static func keyId(of stored: String) -> Substring? {
        guard stored.hasPrefix(textPrefix) else { return nil }
        let rest = stored.dropFirst(textPrefix.count)
        return rest.firstIndex(of: ":").map { rest[..<$0] }
    }

    /// Whether `rekey` must rewrite a stored value: it is sealed with another key than the newest, or (non-empty) not
    /// sealed at all.
    public func needsRekey(_ stored: String?) -> Bool {
        guard let stored, let newest else { return false }
        guard let id = Self.keyId(of: stored) else { return !stored.isEmpty }
        return id != newest.id
    }

    /// The value rewritten under the newest key (unchanged if it already is).
    public func rekeyed(_ stored: String) throws(AtRestKeyError) -> String {
        needsRekey(stored) ? seal(try open(stored)) : stored
    }

    // MARK: Check values

    /// The check value a store keeps for the newest key: proves at start that a key of the same id is the same key.
    public func checkValue() -> (keyId: String, value: String)? {
        guard let newest else { return nil }
        return (newest.id, seal(Self.checkPlaintext))
    }

    /// Refuses to start on a store that keeps `checks` (key id → its check value) unless every one of their keys is
    /// in the ring and opens its check value: a store with encrypted values started without a key, with a ring that
    /// lacks one of its keys, or with another key under a known id.
    public func verify(checks: [String: String]) throws(AtRestKeyError) {
        guard isOn else {
            if !checks.isEmpty {
                throw AtRestKeyError("the store holds values encrypted at rest: start with --encryption-key-file (key ids \(checks.keys.sorted().joined(separator: ", ")))")
            }
            return
        }
        for (id, value) in checks.sorted(by: { $0.key < $1.key }) {
            guard key(id: id) != nil else {
                throw AtRestKeyError("the store holds values encrypted under key id \(id), which is not in the encryption key file (run rekey with a ring holding it)")
            }
            guard (try? open(value)) == Self.checkPlaintext else {
                throw AtRestKeyError("the key with id \(id) in the encryption key file is not the key the store was encrypted with")
            }
        }
    }

    // MARK: Bytes

    /// A chunk of attachment bytes sealed with the newest key; `index` (the chunk's place in its file) is
    /// authenticated, so chunks cannot be reordered. Off: the bytes as they are.
    public func sealChunk(_ bytes: some DataProtocol, index: Int64) -> [UInt8] {
        guard let newest else { return Array(bytes) }
        let box = try! AES.GCM.seal(bytes, using: newest.key, authenticating: Self.chunkAAD(index))
        var out = Self.chunkHeader(newest.id)
        out.append(contentsOf: box.combined!)
        return out
    }

    /// Opens a chunk sealed by ``sealChunk(_:index:)``.
    public func openChunk(_ bytes: [UInt8], index: Int64) throws(AtRestKeyError) -> [UInt8] {
        guard bytes.count > 5, bytes.starts(with: Self.chunkMagic) else { throw AtRestKeyError("a sealed chunk is malformed") }
        let idLength = Int(bytes[4])
        guard bytes.count >= 5 + idLength + 28 else { throw AtRestKeyError("a sealed chunk is malformed") }
        let id = String(decoding: bytes[5..<(5 + idLength)], as: UTF8.self)
        guard let key = key(id: id) else {
            throw AtRestKeyError("attachment bytes are encrypted under key id \(id), which is not in the encryption key file")
        }
        guard let box = try? AES.GCM.SealedBox(combined: bytes[(5 + idLength)...]),
            let plain = try? AES.GCM.open(box, using: key.key, authenticating: Self.chunkAAD(index))
        else { throw AtRestKeyError("attachment bytes under key id \(id) do not open with that key (wrong key or damaged file)") }
        return Array(plain)
    }

    /// The bytes ``sealChunk(_:index:)`` adds to a chunk: header, nonce and tag.
    public var chunkOverhead: Int { newest.map { Self.chunkHeader($0.id).count + 28 } ?? 0 }

    /// The id of the key a sealed chunk is under.
    public static func chunkKeyId(_ bytes: [UInt8]) -> String? {
        guard bytes.count > 5, bytes.starts(with: chunkMagic), bytes.count >= 5 + Int(bytes[4]) else { return nil }
        return String(decoding: bytes[5..<(5 + Int(bytes[4]))], as: UTF8.self)
    }

    static let chunkMagic: [UInt8] = Array("PGNE".utf8)

    static func chunkHeader(_ id: String) -> [UInt8] { chunkMagic + [UInt8(id.utf8.count)] + Array(id.utf8) }

    /// The length of a sealed chunk's header for a key id of `idLength` bytes (the first 5 bytes of a chunk say it).
    public static func chunkHeaderLength(idLength: Int) -> Int { chunkMagic.count + 1 + idLength }

    static func chunkAAD(_ index: Int64) -> Data { withUnsafeBytes(of: index.bigEndian) { Data($0) } }
}

/// A key file that cannot be used, or a store its keys cannot open: one line that says which.
public struct AtRestKeyError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    public let message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }
    public var debugDescription: String { message }
}
