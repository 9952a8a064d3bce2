import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOFileSystem
import NIOHTTP1
import PigeonProtocol

extension HTTPTransport {
    /// Bytes read from a file and put on the wire per step of an upload.
    static let uploadChunkBytes: ByteCount = .kibibytes(256)

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
        var head = HTTPClientRequest(url: baseURL + route + "?name=" + query)
        head.method = .POST
        head.headers.add(name: "Authorization", value: "Bearer \(token)")
        head.headers.add(name: "Content-Type", value: contentType)
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            (response, bytes) = try await FileSystem.shared.withFileHandle(forReadingAt: FilePath(path)) { handle in
                let chunks = ObservedChunks(base: handle.readChunks(in: 0..<size, chunkLength: Self.uploadChunkBytes), observe: onChunk)
                var request = head
                request.body = .stream(chunks, length: .known(size))
                let response = try await http.execute(request, timeout: TimeAmount(Self.timeout(for: size, requestTimeout: requestTimeout)))
                return (response, try await response.body.collect(upTo: 1 << 20))
            }
        } catch {
            throw Self.networkError(error, method: .POST, path: route)
        }
        let status = Int(response.status.code)
        guard (200..<300).contains(status) else {
            throw Self.serverError(status: status, headers: response.headers, body: bytes)
        }
        do {
            return try JSONDecoder().decode(AttachmentUpload.self, from: bytes)
        } catch {
            throw PigeonClientError(.server, "POST \(route): undecodable answer (\(error))", httpStatus: status)
        }
    }

    /// `GET /v1/attachments/{id}` into a new file at `path`, streamed; its size and SHA-256 as they arrived, with the
    /// server's `ETag`. A partial file is removed when the download fails.
    func downloadAttachment(id: String, to path: String) async throws -> DownloadedAttachment {
        let encoded = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? id
        let route = "/v1/attachments/\(encoded)"
        var request = HTTPClientRequest(url: baseURL + route)
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        do {
            let response = try await http.execute(request, timeout: TimeAmount(requestTimeout))
            let status = Int(response.status.code)
            guard status == 200 else {
                let body = try await response.body.collect(upTo: 1 << 20)
                throw Self.serverError(status: status, headers: response.headers, body: body)
            }
            let expected = response.headers.first(name: "Content-Length").flatMap { Int64($0) }
            let etag = response.headers.first(name: "ETag").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"W/")) }
            // The request's deadline ends with the answer's head: the body gets one of its own, by its size.
            let deadline = Self.timeout(for: expected ?? 0, requestTimeout: requestTimeout)
            let (size, sha256) = try await withThrowingTaskGroup(of: (Int64, String)?.self) { group in
                group.addTask { try await Self.write(response.body, to: path) }
                group.addTask {
                    try await Task.sleep(for: deadline)
                    return nil
                }
                defer { group.cancelAll() }
                guard let written = try await group.next() ?? nil else {
                    throw PigeonClientError(.timeout, "GET \(route): the file did not arrive within \(deadline)")
                }
                return written
            }
            if let expected, expected != size {
                throw PigeonClientError(.network, "GET \(route): the connection ended after \(size) of \(expected) bytes")
            }
            return DownloadedAttachment(size: size, sha256: sha256, etag: etag)
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw Self.networkError(error, method: .GET, path: route)
        }
    }
}

extension HTTPTransport {
    /// Writes `body` into a new file at `path`: how many bytes, and their SHA-256.
    private static func write(_ body: HTTPClientResponse.Body, to path: String) async throws -> (Int64, String) {
        var hasher = SHA256()
        var size: Int64 = 0
        try await FileSystem.shared.withFileHandle(forWritingAt: FilePath(path), options: .newFile(replaceExisting: true)) { handle in
            var writer = handle.bufferedWriter()
            for try await chunk in body {
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                size += Int64(chunk.readableBytes)
                try await writer.write(contentsOf: chunk)
            }
            try await writer.flush()
        }
        return (size, hasher.finalize().hexString)
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

/// A file's chunks on their way to the socket, each shown to `observe` as the HTTP client takes it (for progress and
/// for hashing what is sent).
struct ObservedChunks<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let observe: @Sendable (ByteBuffer) -> Void

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let observe: @Sendable (ByteBuffer) -> Void

        mutating func next() async throws -> ByteBuffer? {
            guard let chunk = try await base.next() else { return nil }
            observe(chunk)
            return chunk
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), observe: observe)
    }
}

extension Sequence where Element == UInt8 {
    /// Lowercase hex, as API.md writes a SHA-256.
    var hexString: String {
        map { String(format: "%02x", $0) }.joined()
    }
}
