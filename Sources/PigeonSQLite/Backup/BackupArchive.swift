import Crypto
import Foundation

/// The file a backup is: a POSIX ustar archive (so `tar -tvf` lists it and `tar -xf` unpacks it by hand), whose last
/// entry, `manifest.json`, names every other entry with its size and SHA-256. One file, written in one pass (each
/// entry's digest is computed as it is written), and verifiable: ``BackupArchive/read(_:into:)`` checks every header's
/// checksum, every entry against the manifest and the manifest against the entries, both ways.
package enum BackupArchive {
    /// What the manifest says of one entry.
    package struct Entry: Codable, Equatable, Sendable {
        package var path: String
        package var size: Int64
        package var sha256: String
    }

    /// The last entry of every archive.
    package struct Manifest: Codable, Equatable, Sendable {
        /// Always ``Manifest/formatName``: tells a Pigeon backup from any other tar file.
        package var format: String
        package var version: Int
        /// When the copy was taken (milliseconds since the epoch).
        package var createdAt: Int64
        package var entries: [Entry]

        package static let formatName = "pigeon-embedded-backup"
    }

    package static let manifestPath = "manifest.json"
    static let block = 512
    static let chunkBytes = 1 << 20

    /// Why an archive is refused.
    package struct Corrupt: Error, CustomStringConvertible {
        package let reason: String
        package var description: String { "the backup archive is not intact: \(reason)" }
    }

    // MARK: Writing

    /// Appends entries to an archive file, hashing each as it goes.
    package final class Writer {
        private let handle: FileHandle
        private(set) var entries: [Entry] = []

        package init(handle: FileHandle) {
            self.handle = handle
        }

        /// Adds the file at `source` as `path`; its size is what was read (the file must not change meanwhile: every
        /// file backed up is a private copy or immutable content).
        package func addFile(at source: String, as path: String) throws {
            let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: source))
            defer { try? input.close() }
            let size = Int64(try input.seekToEnd())
            try input.seek(toOffset: 0)
            try handle.write(contentsOf: try BackupArchive.header(path: path, size: size))
            var hasher = SHA256()
            var written: Int64 = 0
            while written < size {
                guard let chunk = try input.read(upToCount: Int(min(Int64(BackupArchive.chunkBytes), size - written))), !chunk.isEmpty else {
                    throw CocoaError(.fileReadCorruptFile, userInfo: [NSFilePathErrorKey: source])
                }
                hasher.update(data: chunk)
                try handle.write(contentsOf: chunk)
                written += Int64(chunk.count)
            }
            try handle.write(contentsOf: BackupArchive.padding(after: size))
            entries.append(Entry(path: path, size: size, sha256: BackupArchive.hex(hasher.finalize())))
        }

        /// Writes the manifest of everything added and the end-of-archive marker, and syncs the file.
        package func finish(createdAt: Int64) throws {
            let manifest = Manifest(format: Manifest.formatName, version: 1, createdAt: createdAt, entries: entries)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let data = try encoder.encode(manifest)
            try handle.write(contentsOf: try BackupArchive.header(path: BackupArchive.manifestPath, size: Int64(data.count)))
            try handle.write(contentsOf: data)
            try handle.write(contentsOf: BackupArchive.padding(after: Int64(data.count)))
            try handle.write(contentsOf: Data(count: 2 * BackupArchive.block))
            try handle.synchronize()
        }
    }

    /// A ustar header of a regular file (mode 0600). Sizes past the 11 octal digits' 8 GiB are written in base-256, as
    /// GNU tar does.
    static func header(path: String, size: Int64) throws -> Data {
        let name = Array(path.utf8)
        guard name.count <= 100 else { throw Corrupt(reason: "entry name longer than 100 bytes: \(path)") }
        var header = [UInt8](repeating: 0, count: block)
        header.replaceSubrange(0..<name.count, with: name)
        func octal(_ value: Int64, at offset: Int, width: Int) {
            let digits = Array(String(value, radix: 8).utf8)
            let padded = [UInt8](repeating: UInt8(ascii: "0"), count: width - 1 - digits.count) + digits
            header.replaceSubrange(offset..<offset + width - 1, with: padded)
        }
        octal(0o600, at: 100, width: 8)
        octal(0, at: 108, width: 8)
        octal(0, at: 116, width: 8)
        if size <= 0o77777777777 {
            octal(size, at: 124, width: 12)
        } else {
            header[124] = 0x80
            for index in 0..<8 { header[135 - index] = UInt8(truncatingIfNeeded: size >> (8 * index)) }
        }
        octal(Int64(Date().timeIntervalSince1970), at: 136, width: 12)
        header[156] = UInt8(ascii: "0")
        header.replaceSubrange(257..<263, with: Array("ustar\0".utf8))
        header.replaceSubrange(263..<265, with: Array("00".utf8))
        header.replaceSubrange(148..<156, with: [UInt8](repeating: UInt8(ascii: " "), count: 8))
        let checksum = header.reduce(0) { $0 + Int64($1) }
        let digits = Array(String(checksum, radix: 8).utf8)
        header.replaceSubrange(148..<155, with: [UInt8](repeating: UInt8(ascii: "0"), count: 6 - digits.count) + digits + [0])
        return Data(header)
    }

    static func padding(after size: Int64) -> Data {
        let remainder = Int(size % Int64(block))
        return Data(count: remainder == 0 ? 0 : block - remainder)
    }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }

    // MARK: Reading

    /// Reads the whole archive at `path`, handing each entry but the manifest to `open`, which answers where its bytes
    /// go (a file it created), and checks it: header checksums, no entry twice, the manifest last, and every entry's
    /// size and SHA-256 exactly as the manifest lists them (no more, no fewer). Throws ``Corrupt`` otherwise. Answers
    /// the manifest.
    package static func read(_ path: String, into open: (String) throws -> FileHandle) throws -> Manifest {
        guard let input = FileHandle(forReadingAtPath: path) else { throw Corrupt(reason: "cannot open \(path)") }
        defer { try? input.close() }
        var found: [String: Entry] = [:]
        var manifestData: Data?
        while true {
            guard let header = try input.read(upToCount: block), header.count == block else {
                throw Corrupt(reason: "it ends without an end-of-archive marker (truncated?)")
            }
            if header.allSatisfy({ $0 == 0 }) { break }
            guard manifestData == nil else { throw Corrupt(reason: "an entry follows the manifest") }
            let (name, size) = try parse(header: [UInt8](header))
            guard found[name] == nil, name != manifestPath || size <= 16 << 20 else { throw Corrupt(reason: "entry \(name) appears twice or is too large") }
            var hasher = SHA256()
            var data = Data()
            let output = try name == manifestPath ? nil : open(name)
            defer { try? output?.close() }
            var remaining = size
            while remaining > 0 {
                guard let chunk = try input.read(upToCount: Int(min(Int64(chunkBytes), remaining))), !chunk.isEmpty else {
                    throw Corrupt(reason: "entry \(name) is cut short (truncated?)")
                }
                hasher.update(data: chunk)
                if let output { try output.write(contentsOf: chunk) } else { data.append(chunk) }
                remaining -= Int64(chunk.count)
            }
            try output?.synchronize()
            let skip = padding(after: size).count
            if skip > 0 {
                guard let pad = try input.read(upToCount: skip), pad.count == skip else { throw Corrupt(reason: "entry \(name) is cut short") }
                guard pad.allSatisfy({ $0 == 0 }) else { throw Corrupt(reason: "the padding after entry \(name) is not zeros") }
            }
            if output == nil { manifestData = data } else { found[name] = Entry(path: name, size: size, sha256: hex(hasher.finalize())) }
        }
        guard let manifestData else { throw Corrupt(reason: "it has no \(manifestPath) (not a Pigeon backup, or truncated)") }
        guard let manifest = try? JSONDecoder().decode(Manifest.self, from: manifestData), manifest.format == Manifest.formatName else {
            throw Corrupt(reason: "its \(manifestPath) is not a Pigeon backup manifest")
        }
        guard manifest.version == 1 else { throw Corrupt(reason: "manifest version \(manifest.version) is newer than this server knows") }
        var listed: [String: Entry] = [:]
        for entry in manifest.entries { listed[entry.path] = entry }
        for (name, entry) in found {
            guard let expected = listed[name] else { throw Corrupt(reason: "entry \(name) is not in the manifest") }
            guard expected == entry else {
                throw Corrupt(reason: "entry \(name) has \(entry.size) bytes with SHA-256 \(entry.sha256); the manifest says \(expected.size) bytes, \(expected.sha256)")
            }
        }
        if let missing = listed.keys.sorted().first(where: { found[$0] == nil }) { throw Corrupt(reason: "entry \(missing) is missing") }
        return manifest
    }

    /// An entry header's name and size, once its checksum is right and it is a regular file.
    static func parse(header: [UInt8]) throws -> (String, Int64) {
        var sum: Int64 = 0
        for (index, byte) in header.enumerated() { sum += (148..<156).contains(index) ? 32 : Int64(byte) }
        guard let stored = octal(header[148..<156]), stored == sum else { throw Corrupt(reason: "a header's checksum is wrong") }
        guard header[156] == UInt8(ascii: "0") || header[156] == 0 else { throw Corrupt(reason: "an entry is not a regular file") }
        let nameBytes = header[0..<100].prefix { $0 != 0 }
        guard let name = String(bytes: nameBytes, encoding: .utf8), !name.isEmpty else { throw Corrupt(reason: "an entry has no readable name") }
        let size: Int64
        if header[124] & 0x80 != 0 {
            size = header[128..<136].reduce(Int64(0)) { ($0 << 8) | Int64($1) }
        } else {
            guard let parsed = octal(header[124..<136]) else { throw Corrupt(reason: "entry \(name) has an unreadable size") }
            size = parsed
        }
        guard size >= 0 else { throw Corrupt(reason: "entry \(name) has a negative size") }
        return (name, size)
    }

    static func octal(_ field: ArraySlice<UInt8>) -> Int64? {
        let digits = field.filter { $0 != 0 && $0 != UInt8(ascii: " ") }
        guard !digits.isEmpty else { return 0 }
        return Int64(String(decoding: digits, as: UTF8.self), radix: 8)
    }
}
