import AsyncHTTPClient
import Foundation
import NIOCore
import PigeonBenchSupport
import PigeonProtocol

/// Attachments (API.md 1.2): upload and download MiB/s of 24 MiB files, one at a time and eight at once, beside this
/// machine's fsynced disk write rate measured in the same run, and the server's resident memory while eight uploads
/// stream in (target: the bytes are streamed, never held; upload ≥ 0.5× the disk's fsynced rate on the embedded
/// default).
struct AttachmentsBench {
    static let fileBytes = 24 << 20
    static let files = 8
    static let chunk = 64 << 10

    let api: PigeonAPI
    let server: PigeonServer
    let namePrefix: String

    func measure() async throws -> AttachmentsResult {
        let disk = try Self.diskRates()
        let owner = try await api.registerDevice(userId: namePrefix + "-alice", deviceName: "bench")
        let second = try await api.registerDevice(userId: namePrefix + "-bob", deviceName: "bench")
        let tokens = [owner.token, second.token]
        // One upload to warm the path (connections, statements, the store's pool).
        _ = try await upload(token: owner.token, seed: 999, bytes: 1 << 20)

        var ids: [String] = []
        let sequentialStart = ContinuousClock.now
        for index in 0..<Self.files { ids.append(try await upload(token: tokens[index % 2], seed: index, bytes: Self.fileBytes)) }
        let sequentialUpload = (ContinuousClock.now - sequentialStart).seconds

        let residentBefore = server.pid.flatMap(ProcessStats.residentBytes) ?? 0
        let peak = PeakResident(pid: server.pid)
        let sampling = Task { await peak.sample() }
        let parallelStart = ContinuousClock.now
        let parallelIds = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<Self.files {
                group.addTask { try await upload(token: tokens[index % 2], seed: 100 + index, bytes: Self.fileBytes) }
            }
            var ids: [String] = []
            for try await id in group { ids.append(id) }
            return ids
        }
        let parallelUpload = (ContinuousClock.now - parallelStart).seconds
        sampling.cancel()
        let residentPeak = await sampling.value

        let downloadStart = ContinuousClock.now
        for (index, id) in ids.enumerated() { try await download(id: id, token: tokens[index % 2]) }
        let sequentialDownload = (ContinuousClock.now - downloadStart).seconds
        let parallelDownloadStart = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for id in parallelIds { group.addTask { try await download(id: id, token: owner.token, anyOwner: tokens) } }
            try await group.waitForAll()
        }
        let parallelDownload = (ContinuousClock.now - parallelDownloadStart).seconds
        let total = Double(Self.files * Self.fileBytes) / 1_048_576
        return AttachmentsResult(
            fileMiB: Self.fileBytes >> 20, files: Self.files, diskDsyncMiBPerSecond: disk.dsync, diskWriteThenFsyncMiBPerSecond: disk.writeThenFsync,
            uploadMiBPerSecond: total / sequentialUpload, parallelUploadMiBPerSecond: total / parallelUpload,
            downloadMiBPerSecond: total / sequentialDownload, parallelDownloadMiBPerSecond: total / parallelDownload,
            residentBytesBefore: residentBefore, residentBytesPeak: max(residentPeak, residentBefore))
    }

    /// Uploads `bytes` generated from `seed` (distinct contents, so equal bytes stored once never shortcut a write).
    private func upload(token: String, seed: Int, bytes: Int) async throws -> String {
        var request = HTTPClientRequest(url: api.baseURL + "/v1/attachments?name=bench-\(seed).bin")
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        request.body = .stream(Chunks(count: bytes, seed: seed), length: .known(Int64(bytes)))
        let response = try await api.http.execute(request, timeout: .seconds(300))
        let answer = try await response.body.collect(upTo: 1 << 20)
        guard response.status.code == 201 else {
            throw BenchError.timedOut("upload answered \(response.status.code): \(String(buffer: answer))")
        }
        return try JSONDecoder().decode(AttachmentUpload.self, from: Data(answer.readableBytesView)).id
    }

    /// Reads an attachment whole (the owner's token, or either when `anyOwner`), counting the bytes.
    private func download(id: String, token: String, anyOwner: [String] = []) async throws {
        for candidate in [token] + anyOwner {
            var request = HTTPClientRequest(url: api.baseURL + "/v1/attachments/\(id)")
            request.headers.add(name: "Authorization", value: "Bearer \(candidate)")
            let response = try await api.http.execute(request, timeout: .seconds(300))
            guard response.status.code == 200 else {
                _ = try await response.body.collect(upTo: 1 << 20)
                continue
            }
            var received = 0
            for try await part in response.body { received += part.readableBytes }
            guard received == Self.fileBytes else { throw BenchError.timedOut("a download of \(received) bytes") }
            return
        }
        throw BenchError.timedOut("no token could read attachment \(id)")
    }

    /// This machine's fsynced write rates in the temporary directory (the file system the bench's data directories
    /// are on), 64 MiB each: `O_DSYNC` in 1 MiB writes (what `dd oflag=dsync bs=1M` measures), and 256 KiB writes with
    /// one `fsync` at the end (what an embedded upload does).
    static func diskRates() throws -> (dsync: Double, writeThenFsync: Double) {
        let path = NSTemporaryDirectory() + "/pigeon-bench-disk-\(getpid())"
        defer { unlink(path) }
        func run(block: Int, flags: Int32, fsyncAtEnd: Bool) throws -> Double {
            let total = 64 << 20
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | flags, 0o600)
            guard descriptor >= 0 else { throw BenchError.timedOut("cannot open \(path)") }
            defer { close(descriptor) }
            let buffer = [UInt8](repeating: 0xA5, count: block)
            let start = ContinuousClock.now
            var written = 0
            while written < total {
                let wrote = buffer.withUnsafeBytes { write(descriptor, $0.baseAddress, block) }
                guard wrote > 0 else { throw BenchError.timedOut("write failed") }
                written += wrote
            }
            if fsyncAtEnd { fsync(descriptor) }
            return Double(total) / 1_048_576 / (ContinuousClock.now - start).seconds
        }
        return (try run(block: 1 << 20, flags: O_DSYNC, fsyncAtEnd: false), try run(block: 256 << 10, flags: 0, fsyncAtEnd: true))
    }

    /// A body of `count` generated bytes, made chunk by chunk as the client sends.
    struct Chunks: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let count: Int
        let seed: Int
        static let pattern: [UInt8] = (0..<AttachmentsBench.chunk).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) }

        struct AsyncIterator: AsyncIteratorProtocol {
            let chunks: Chunks
            var offset = 0

            mutating func next() async throws -> ByteBuffer? {
                guard offset < chunks.count else { return nil }
                let size = Swift.min(AttachmentsBench.chunk, chunks.count - offset)
                // A fixed pattern stamped with the file's seed and the chunk's offset: cheap to make (the client shares
                // the cores with the server), and every file's bytes differ from every other's.
                var buffer = ByteBuffer(bytes: Chunks.pattern[0..<size])
                buffer.setInteger(UInt64(chunks.seed), at: 0)
                if size >= 16 { buffer.setInteger(UInt64(offset), at: 8) }
                offset += size
                return buffer
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(chunks: self) }
    }
}

/// The highest resident set size of a process, sampled every 10 ms until cancelled.
private struct PeakResident: Sendable {
    let pid: pid_t?

    func sample() async -> UInt64 {
        guard let pid else { return 0 }
        var peak: UInt64 = 0
        while !Task.isCancelled {
            peak = max(peak, ProcessStats.residentBytes(of: pid) ?? 0)
            try? await Task.sleep(for: .milliseconds(10))
        }
        return peak
    }
}

struct AttachmentsResult: Codable, Sendable {
    var fileMiB: Int
    var files: Int
    var diskDsyncMiBPerSecond: Double
    var diskWriteThenFsyncMiBPerSecond: Double
    var uploadMiBPerSecond: Double
    var parallelUploadMiBPerSecond: Double
    var downloadMiBPerSecond: Double
    var parallelDownloadMiBPerSecond: Double
    var residentBytesBefore: UInt64
    var residentBytesPeak: UInt64

    func printLines() {
        let f = { (value: Double) in String(format: "%.0f", value) }
        print("  disk, this run:     \(f(diskDsyncMiBPerSecond)) MiB/s O_DSYNC 1 MiB writes; \(f(diskWriteThenFsyncMiBPerSecond)) MiB/s 256 KiB writes + one fsync")
        print("  upload:             \(f(uploadMiBPerSecond)) MiB/s one at a time (\(String(format: "%.2f", uploadMiBPerSecond / diskDsyncMiBPerSecond))× the O_DSYNC rate; target ≥ 0.5×), \(f(parallelUploadMiBPerSecond)) MiB/s \(files) at once (\(files) × \(fileMiB) MiB)")
        print("  download:           \(f(downloadMiBPerSecond)) MiB/s one at a time, \(f(parallelDownloadMiBPerSecond)) MiB/s \(files) at once")
        print("  server RSS:         \(Format.mebibytes(residentBytesBefore)) before, peak \(Format.mebibytes(residentBytesPeak)) during \(files) parallel uploads (+\(Format.mebibytes(residentBytesPeak - residentBytesBefore)))")
    }
}
