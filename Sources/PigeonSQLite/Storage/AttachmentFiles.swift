import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PigeonDomain

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The embedded store's attachment bytes on disk: one file per content, `<directory>/<first 2 hex>/<sha256>`, so
/// equal bytes are stored once; an upload is written to `<directory>/tmp/<uuid>` first and renamed into place once
/// complete (and, with `durable`, fsynced), so a content file is always whole.
///
/// With a key (``AtRestCipher``), a file holds its bytes sealed a chunk (``chunkBytes``) at a time, each chunk with
/// its index authenticated, so a range is read by opening only the chunks it spans. The name stays the SHA-256 of
/// the plaintext (as the upload's metadata has it): equal uploads still share one file. A file written before the
/// store had a key is exactly its plaintext size, which tells it apart; `rekey` seals it.
///
/// Every operation here blocks; ``run(_:)`` runs it on the blocking pool, never on a Swift concurrency thread.
package struct AttachmentFiles: Sendable {
    package let directory: URL
    /// Whether a file and the directory entry that names it are fsynced before an upload counts as stored.
    let durable: Bool
    private let pool: NIOThreadPool
    /// Seals what is written, opens what is read (``AtRestCipher/off``: bytes as they are).
    let cipher: AtRestCipher

    /// The most bytes one read or write moves: the chunks a download streams, and the pieces an upload is written in.
    static let chunkBytes = 256 * 1024

    init(directory: URL, durable: Bool, pool: NIOThreadPool, cipher: AtRestCipher = .off) {
        self.directory = directory
        self.durable = durable
        self.pool = pool
        self.cipher = cipher
    }

    /// The size on disk of a content of `size` bytes written now: its plaintext size, plus each chunk's seal.
    func storedSize(of size: Int64) -> Int64 {
        let chunks = (size + Int64(Self.chunkBytes) - 1) / Int64(Self.chunkBytes)
        return size + chunks * Int64(cipher.chunkOverhead)
    }

    var temporaryDirectory: String { directory.appendingPathComponent("tmp").path }

    func contentDirectory(_ sha256: String) -> String { directory.appendingPathComponent(String(sha256.prefix(2))).path }

    func contentPath(_ sha256: String) -> String { contentDirectory(sha256) + "/" + sha256 }

    /// Runs the blocking `body` on the pool and answers its outcome. It runs to its end even if the calling task is
    /// cancelled meanwhile: a half-done cleanup would leave bytes behind.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            pool.submit { state in
                switch state {
                case .active: continuation.resume(with: Result(catching: body))
                case .cancelled: continuation.resume(throwing: IOError(errnoCode: ECANCELED, reason: "the blocking pool is shut down"))
                }
            }
        }
    }

    // MARK: Writing

    /// A new file in `tmp/`, open for writing.
    func createTemporary() throws -> TemporaryFile {
        let path = temporaryDirectory + "/" + UUID().uuidString.lowercased()
        let descriptor = try Self.retrying { open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) }
        return TemporaryFile(path: path, descriptor: descriptor)
    }

    /// Appends `buffer`'s readable bytes to `file` as its chunk number `index`: at most ``chunkBytes``, and exactly
    /// that many unless it is the last (sealed with the cipher's newest key when it has one).
    func append(_ buffer: ByteBuffer, to file: TemporaryFile, index: Int64) throws {
        let sealed = cipher.isOn ? ByteBuffer(bytes: buffer.withUnsafeReadableBytes { cipher.sealChunk($0, index: index) }) : buffer
        try Self.append(sealed, to: file)
    }

    private static func append(_ buffer: ByteBuffer, to file: TemporaryFile) throws {
        try file.withDescriptor { descriptor in
            try buffer.withUnsafeReadableBytes { bytes in
                var written = 0
                while written < bytes.count {
                    written += try Self.retrying { write(descriptor, bytes.baseAddress! + written, bytes.count - written) }
                }
            }
        }
    }

    /// Makes `file`'s bytes durable (with `durable`) and closes it; closed even when the fsync fails.
    func finish(_ file: TemporaryFile) throws {
        defer { file.close() }
        if durable { try file.withDescriptor { descriptor in _ = try Self.retrying { fsync(descriptor) } } }
    }

    /// Closes `file` if open and removes it, if it is still there.
    func discard(_ file: TemporaryFile) {
        file.close()
        unlink(file.path)
    }

    /// Puts the finished temporary file at `path` in place as the content `sha256` of `size` bytes. When that content
    /// is stored already (an equal upload), the temporary file is dropped instead. With `durable`, the rename is on
    /// disk when this returns.
    func place(temporary path: String, sha256: String, size: Int64) throws {
        let target = contentPath(sha256)
        var existing = stat()
        if stat(target, &existing) == 0, Int64(existing.st_size) == storedSize(of: size) {
            unlink(path)
            return
        }
        let contentDirectory = contentDirectory(sha256)
        if mkdir(contentDirectory, 0o700) == 0 {
            if durable { try Self.syncDirectory(directory.path) }
        } else if errno != EEXIST {
            throw IOError(errnoCode: errno, reason: "mkdir \(contentDirectory)")
        }
        _ = try Self.retrying { rename(path, target) }
        if durable { try Self.syncDirectory(contentDirectory) }
    }

    /// Removes the content `sha256`; whether there was one.
    func erase(_ sha256: String) throws -> Bool {
        if unlink(contentPath(sha256)) == 0 { return true }
        if errno == ENOENT { return false }
        throw IOError(errnoCode: errno, reason: "unlink \(contentPath(sha256))")
    }

    /// Creates `directory` and its `tmp/` if needed; with `durable`, makes `directory`'s own entry durable too, so that
    /// the first content renamed into it cannot be lost with it.
    func prepare() throws {
        try FileManager.default.createDirectory(atPath: temporaryDirectory, withIntermediateDirectories: true)
        if durable {
            try Self.syncDirectory(directory.deletingLastPathComponent().path)
            try Self.syncDirectory(directory.path)
        }
    }

    /// What a killed process can leave: every file in `tmp/` (an upload cut short), and the content files no row
    /// names (renamed into place, the process gone before the row's commit). `isNamed` tells the contents rows name.
    /// Answers how many files of each kind it removed.
    func removeLeftovers(isNamed: ([String]) throws -> Set<String>) throws -> (temporary: Int, unnamed: Int) {
        let manager = FileManager.default
        var removed = (temporary: 0, unnamed: 0)
        for name in try manager.contentsOfDirectory(atPath: temporaryDirectory) {
            try manager.removeItem(atPath: temporaryDirectory + "/" + name)
            removed.temporary += 1
        }
        for prefix in try manager.contentsOfDirectory(atPath: directory.path) where Self.isContentPrefix(prefix) {
            let contents = try manager.contentsOfDirectory(atPath: directory.appendingPathComponent(prefix).path)
            let named = try isNamed(contents)
            for name in contents where !named.contains(name) {
                try manager.removeItem(atPath: directory.appendingPathComponent(prefix).path + "/" + name)
                removed.unnamed += 1
            }
        }
        return removed
    }

    private static func isContentPrefix(_ name: String) -> Bool {
        name.utf8.count == 2 && name.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    // MARK: Reading

    /// The content `sha256` of `size` plaintext bytes, open for reading: sealed if the file is longer than that.
    func openContent(_ sha256: String, size: Int64) throws -> ContentFile {
        let descriptor = try Self.retrying { open(contentPath(sha256), O_RDONLY | O_CLOEXEC) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            closeDescriptor(descriptor)
            throw IOError(errnoCode: errno, reason: "fstat \(contentPath(sha256))")
        }
        let file = ContentFile(descriptor: descriptor, size: size, keyId: nil)
        guard Int64(info.st_size) > size else { return file }
        let idLength = Int(try Self.read(file, offset: 4, count: 1).readableBytesView.first!)
        let header = try Self.read(file, offset: 0, count: AtRestCipher.chunkHeaderLength(idLength: idLength))
        guard let keyId = AtRestCipher.chunkKeyId(Array(header.readableBytesView)) else {
            throw AtRestKeyError("the attachment file \(contentPath(sha256)) is neither its plaintext nor sealed")
        }
        return ContentFile(descriptor: file.take(), size: size, keyId: keyId)
    }

    /// Rewrites the content `sha256` of `size` bytes sealed with the cipher's newest key, unless it is already (or is
    /// gone); whether it did. The new file replaces the old one by a rename: a download that opened the old one reads
    /// it to its end.
    func reseal(_ sha256: String, size: Int64) throws -> Bool {
        let file: ContentFile
        do {
            file = try openContent(sha256, size: size)
        } catch let error as IOError where error.errnoCode == ENOENT {
            return false
        }
        if file.keyId == cipher.newest?.id || (size == 0 && file.keyId == nil) { return false }
        let temporary = try createTemporary()
        do {
            var (offset, index): (Int64, Int64) = (0, 0)
            while offset < size {
                let plain = try readPlain(file, offset: offset, count: Int(min(Int64(Self.chunkBytes), size - offset)))
                try append(plain, to: temporary, index: index)
                offset += Int64(plain.readableBytes)
                index += 1
            }
            try finish(temporary)
            _ = try Self.retrying { rename(temporary.path, contentPath(sha256)) }
            if durable { try Self.syncDirectory(contentDirectory(sha256)) }
            return true
        } catch {
            discard(temporary)
            throw error
        }
    }

    /// Up to `count` plaintext bytes of `file` from `offset`, within one chunk (``chunkBytes``) of it.
    func readPlain(_ file: ContentFile, offset: Int64, count: Int) throws -> ByteBuffer {
        guard let keyId = file.keyId else { return try Self.read(file, offset: offset, count: count) }
        let overhead = AtRestCipher.chunkHeaderLength(idLength: keyId.utf8.count) + 28
        let chunkBytes = Int64(Self.chunkBytes)
        let index = offset / chunkBytes
        let plainLength = Int(min(chunkBytes, file.size - index * chunkBytes))
        let sealed = try Self.read(file, offset: index * (chunkBytes + Int64(overhead)), count: plainLength + overhead)
        let plain = try cipher.openChunk(Array(sealed.readableBytesView), index: index)
        let start = Int(offset - index * chunkBytes)
        return ByteBuffer(bytes: plain[start..<min(plain.count, start + count)])
    }

    /// `count` bytes of `file` from `offset`: the file must have them all.
    static func read(_ file: ContentFile, offset: Int64, count: Int) throws -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: count)
        try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { target in
            var done = 0
            while done < count {
                let read = try retrying { pread(file.descriptor, target.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
                guard read > 0 else { throw IOError(errnoCode: EIO, reason: "the attachment's file ends before its size") }
                done += read
            }
            return done
        }
        return buffer
    }

    // MARK: System calls

    /// Runs a system call until it is not interrupted; its result, or its `errno` thrown.
    private static func retrying<T: BinaryInteger>(_ call: () -> T) throws -> T {
        while true {
            let result = call()
            if result >= 0 { return result }
            if errno != EINTR { throw IOError(errnoCode: errno, reason: "file I/O") }
        }
    }

    /// Fsyncs the directory at `path`, so that the entries created or renamed in it survive power loss.
    private static func syncDirectory(_ path: String) throws {
        let descriptor = try retrying { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { closeDescriptor(descriptor) }
        _ = try retrying { fsync(descriptor) }
    }
}

/// An upload's file in `tmp/` while it is written. Closing it is idempotent, so that every path out of an upload
/// can close it without tracking whether another did.
final class TemporaryFile: Sendable {
    let path: String
    private let descriptor: NIOLockedValueBox<CInt?>

    init(path: String, descriptor: CInt) {
        self.path = path
        self.descriptor = NIOLockedValueBox(descriptor)
    }

    func withDescriptor<T>(_ body: (CInt) throws -> T) throws -> T {
        try descriptor.withLockedValue { descriptor in
            guard let descriptor else { throw IOError(errnoCode: EBADF, reason: "the upload's file is closed") }
            return try body(descriptor)
        }
    }

    func close() {
        descriptor.withLockedValue { descriptor in
            if let open = descriptor { closeDescriptor(open) }
            descriptor = nil
        }
    }

    deinit { close() }
}

/// A content file open for reading; closed when the last reader lets go of it. Open, it stays readable after the
/// sweep unlinks it, so a download that started is served whole.
final class ContentFile: Sendable {
    let descriptor: CInt
    /// The plaintext size of the content.
    let size: Int64
    /// The key its chunks are sealed with; `nil`: the file is its plaintext.
    let keyId: String?
    private let owned = NIOLockedValueBox(true)

    init(descriptor: CInt, size: Int64, keyId: String?) {
        self.descriptor = descriptor
        self.size = size
        self.keyId = keyId
    }

    /// The descriptor, for another `ContentFile` to own: this one no longer closes it.
    func take() -> CInt {
        owned.withLockedValue { $0 = false }
        return descriptor
    }

    deinit { if owned.withLockedValue({ $0 }) { closeDescriptor(descriptor) } }
}

/// `close(2)`, by a name the types above (which have a `close()` of their own) can call.
private func closeDescriptor(_ descriptor: CInt) {
    #if canImport(Glibc)
    _ = Glibc.close(descriptor)
    #elseif canImport(Darwin)
    _ = Darwin.close(descriptor)
    #endif
}
