import AsyncHTTPClient
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonProtocol
import PigeonTestSupport
import Testing

/// A body of `count` bytes made on demand in chunks of `chunk` (the same bytes every time for the same arguments),
/// so that a test can upload hundreds of MiB without holding them. `onChunk` sees how far it got.
struct GeneratedBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let count: Int
    var chunk = 64 * 1024
    var pace: Duration? = nil
    var onChunk: (@Sendable (Int) -> Void)? = nil

    static func byte(at index: Int) -> UInt8 { UInt8(truncatingIfNeeded: index &* 131 &+ (index >> 16)) }

    /// The SHA-256 of the whole body, in lowercase hex.
    var sha256: String {
        var hash = SHA256()
        var offset = 0
        while offset < count {
            let size = Swift.min(chunk, count - offset)
            hash.update(data: (offset..<(offset + size)).map(Self.byte))
            offset += size
        }
        return hash.finalize().map { String(format: "%02x", $0) }.joined()
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let body: GeneratedBody
        var offset = 0

        mutating func next() async throws -> ByteBuffer? {
            guard offset < body.count else { return nil }
            if let pace = body.pace { try await Task.sleep(for: pace) }
            let size = Swift.min(body.chunk, body.count - offset)
            var buffer = ByteBuffer()
            buffer.reserveCapacity(size)
            buffer.writeBytes((offset..<(offset + size)).lazy.map(GeneratedBody.byte))
            offset += size
            body.onChunk?(offset)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(body: self) }
}

/// Resident memory of this process in bytes (`/proc/self/statm`).
func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE))) : 0
}

/// Uploads `body` streamed, with its length.
func streamUpload(_ client: PigeonTestClient, _ device: TestDevice, name: String, _ body: GeneratedBody, timeout: TimeAmount = .seconds(120))
    async throws -> HTTPAnswer
{
    var request = HTTPClientRequest(url: client.baseURL + "/v1/attachments?name=\(name)")
    request.method = .POST
    request.headers.add(name: "Authorization", value: "Bearer \(device.token)")
    request.headers.add(name: "Content-Type", value: "application/octet-stream")
    request.body = .stream(body, length: .known(Int64(body.count)))
    let response = try await client.http.execute(request, timeout: timeout)
    let bytes = try await response.body.collect(upTo: 1 << 20)
    var headers: [String: String] = [:]
    for header in response.headers { headers[header.name.lowercased()] = header.value }
    return HTTPAnswer(status: Int(response.status.code), headers: headers, body: Data(bytes.readableBytesView))
}

/// The real `pigeon-server` killed in the middle of an upload: nothing of it is left after the restart, and the
/// client's retry completes.
@Suite(.serialized) struct AttachmentCrashTests {
    @Test func aServerKilledMidUploadLeavesNothingAndTheRetryCompletes() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make()
        let admin = ["--admin-token", "crash-admin-token"]
        var server = try await ServerProcess(dataDirectory: directory, backend: backend, arguments: admin)
        let alice = try await server.client.register("alice")
        let sent = NIOLockedValueBox(0)
        let body = GeneratedBody(count: 16 << 20, pace: .milliseconds(2), onChunk: { offset in sent.withLockedValue { $0 = offset } })
        let client = server.client
        let upload = Task { try? await streamUpload(client, alice, name: "video.bin", body) }
        let deadline = ContinuousClock.now + .seconds(60)
        while sent.withLockedValue({ $0 }) < 4 << 20, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(sent.withLockedValue { $0 } >= 4 << 20, "the upload got going")
        try await server.stop(signal: SIGKILL)
        let cut = await upload.value
        #expect(cut == nil || cut?.status != 201, "the killed upload was never answered 201")

        server = try await ServerProcess(dataDirectory: directory, backend: backend, arguments: admin)
        let stats = try await server.client.request(.GET, "/v1/admin/stats", token: "crash-admin-token")
        let attachments = try #require(stats.jsonObject?["attachments"] as? [String: Any], "\(stats.text)")
        #expect(attachments["count"] as? Int == 0 && attachments["bytes"] as? Int == 0, "nothing of the killed upload: \(attachments)")
        let leftovers = Self.files(under: directory + "/attachments")
        #expect(leftovers.isEmpty, "no file of the killed upload: \(leftovers)")

        let retried = try await streamUpload(server.client, alice, name: "video.bin", GeneratedBody(count: 16 << 20))
        #expect(retried.status == 201, "\(retried.text)")
        let stored = try retried.decode(AttachmentUpload.self)
        #expect(stored.size == 16 << 20 && stored.sha256 == body.sha256)
        try await server.stop(signal: SIGTERM)
    }

    /// Regular files under `path` (none when it does not exist).
    static func files(under path: String) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: path) else { return [] }
        var found: [String] = []
        while let name = walker.nextObject() as? String {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory), !isDirectory.boolValue { found.append(name) }
        }
        return found
    }
}
