import Foundation
import NIOCore
import NIOHTTP1
import NIOConcurrencyHelpers
import NIOFoundationCompat
import NIOPosix
import PigeonProtocol

extension HTTPTransport {
    /// Bytes read from a file and put on the wire per step of an upload.
    static let uploadChunkBytes = 256 * 1024

    /// The slowest an upload or a download is expected to run: its deadline is the request timeout plus its size at
    /// this rate (a 25 MiB photo album gets about 7 minutes on top).
    static let slowestBytesPerSecond: Int64 = 64 * 1024

    static func timeout(for size: Int64, requestTimeout: Duration) -> Duration {
        requestTimeout + .seconds(max(0, size) / slowestBytesPerSecond)
    }

    package func uploadAttachment(
        file path: String, size: Int64, name: String, contentType: String, onChunk: @escaping @Sendable (ByteBuffer) -> Void
    ) async throws -> AttachmentUpload {
        let route = "/v1/attachments"
        let query = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? name
        let head: HTTPResponseHead
        let bytes: ByteBuffer
        do {
            let server = try address()
            let file = try FileChunks(path: path, size: size)
            defer { file.close() }
            var request = HTTP1Request(method: .POST, uri: basePath + route + "?name=" + query)
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            request.headers.add(name: "Content-Type", value: contentType)
            request.body = .stream(length: size) {
                guard let chunk = try await file.next() else { return nil }
                onChunk(chunk)
                return chunk
            }
            (head, bytes) = try await http.execute(
                request, on: server, trust: trust, connectTimeout: connectTimeout, timeout: Self.timeout(for: size, requestTimeout: requestTimeout)
            ) { head, body in
                (head, try await body.collect(upTo: 1 << 20))
            }
        } catch {
            throw Self.networkError(error, method: .POST, path: route)
        }
        let status = Int(head.status.code)
        guard (200..<300).contains(status) else {
            throw Self.serverError(status: status, headers: head.headers, body: bytes)
        }
        do {
            return try JSONDecoder().decode(AttachmentUpload.self, from: bytes)
        } catch {
            throw PigeonClientError(.server, "POST \(route): undecodable answer (\(error))", httpStatus: status)
        }
    }

    /// `GET /v1/attachments/{id}` into a new file at `path`, streamed; its size and SHA-256 as they arrived, with the
    /// server's `ETag`. A partial file is removed when the download fails. The answer's head must come within the
    /// request timeout; the body then gets a deadline of its own, by its size.
    func downloadAttachment(id: String, to path: String) async throws -> DownloadedAttachment {
        let encoded = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? id
        let route = "/v1/attachments/\(encoded)"
        var request = HTTP1Request(method: .GET, uri: basePath + route)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        var deadline = requestTimeout
        do {
            let server = try address()
            return try await http.execute(
                request, on: server, trust: trust, connectTimeout: connectTimeout, timeout: requestTimeout,
                bodyTimeout: { head in
                    deadline = Self.timeout(for: head.headers.first(name: "Content-Length").flatMap { Int64($0) } ?? 0, requestTimeout: requestTimeout)
                    return deadline
                }
            ) { head, body in
                let status = Int(head.status.code)
                guard status == 200 else {
                    throw Self.serverError(status: status, headers: head.headers, body: try await body.collect(upTo: 1 << 20))
                }
                let expected = head.headers.first(name: "Content-Length").flatMap { Int64($0) }
                let etag = head.headers.first(name: "ETag").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"W/")) }
                let (size, sha256) = try await Self.write(body, to: path)
                if let expected, expected != size {
                    throw PigeonClientError(.network, "GET \(route): the connection ended after \(size) of \(expected) bytes")
                }
                return DownloadedAttachment(size: size, sha256: sha256, etag: etag)
            }
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            if error is HTTP1Client.TimedOut {
                throw PigeonClientError(.timeout, "GET \(route): the file did not arrive within \(deadline)")
            }
            throw Self.networkError(error, method: .GET, path: route)
        }
    }

    /// Writes `body` into a new file at `path` (blocking file I/O on SwiftNIO's thread pool, never on the caller's):
    /// how many bytes, and their SHA-256.
    private static func write(_ body: HTTP1ResponseBody, to path: String) async throws -> (Int64, String) {
        guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path) else {
            throw PigeonClientError(.localDatabase, "cannot create \(path)")
        }
        defer { try? handle.close() }
        var hasher = SHA256Digest()
        var size: Int64 = 0
        for try await chunk in body {
            chunk.withUnsafeReadableBytes { hasher.update($0) }
            size += Int64(chunk.readableBytes)
            let data = Data(buffer: chunk)
            try await NIOThreadPool.singleton.runIfActive { try handle.write(contentsOf: data) }
        }
        return (size, hasher.hex)
    }
}

/// A file read in chunks of ``HTTPTransport/uploadChunkBytes`` on SwiftNIO's thread pool (blocking reads never run on
/// the caller's thread), up to `size` bytes: a file that is shorter than it was when the upload began fails the read.
final class FileChunks: Sendable {
    private let handle: FileHandle
    private let size: Int64
    private let read = NIOLockedValueBox<Int64>(0)

    init(path: String, size: Int64) throws {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw PigeonClientError(.invalidArgument, "cannot read \(path)")
        }
        self.handle = handle
        self.size = size
    }

    /// The next chunk; `nil` once `size` bytes were read.
    func next() async throws -> ByteBuffer? {
        let done = read.withLockedValue { $0 }
        guard done < size else { return nil }
        let count = Int(min(Int64(HTTPTransport.uploadChunkBytes), size - done))
        let handle = handle
        let data = try await NIOThreadPool.singleton.runIfActive { try handle.read(upToCount: count) ?? Data() }
        guard !data.isEmpty else { throw PigeonClientError(.invalidArgument, "the file ended after \(done) of its \(size) bytes") }
        read.withLockedValue { $0 += Int64(data.count) }
        return ByteBuffer(data: data)
    }

    func close() {
        try? handle.close()
    }
}

/// What ``HTTPTransport/downloadAttachment(id:to:)`` wrote.
struct DownloadedAttachment: Sendable, Equatable {
    var size: Int64
    /// The SHA-256 of the bytes written, lowercase hex.
    var sha256: String
    /// The server's `ETag` without its quotes (the SHA-256 it stored), when it sent one.
    var etag: String?
}

extension Sequence where Element == UInt8 {
    /// Lowercase hex, as API.md writes a SHA-256.
    var hexString: String {
        map { String(format: "%02x", $0) }.joined()
    }
}
