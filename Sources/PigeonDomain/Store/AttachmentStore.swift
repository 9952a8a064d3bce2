import Foundation
import NIOCore
import PigeonProtocol

/// An upload as the store keeps it.
public struct StoredAttachment: Sendable, Equatable {
    public var id: String
    /// The user whose device uploaded it: only that user's sends may carry it, and its size counts in that user's quota.
    public var ownerId: String
    public var name: String
    public var contentType: String
    public var size: Int64
    /// Lowercase hex SHA-256 of the bytes: the content address (equal bytes are stored once) and the `ETag`.
    public var sha256: String
    public var createdAt: Int64
    /// Whether a stored message has carried it. A linked upload that no message carries any more (every one deleted
    /// for everyone) is deleted at the next sweep; an unlinked one after ``AttachmentLimits/unreferencedLifetimeMillis``.
    public var linked: Bool

    public init(
        id: String, ownerId: String, name: String, contentType: String, size: Int64, sha256: String, createdAt: Int64, linked: Bool = false
    ) {
        self.id = id
        self.ownerId = ownerId
        self.name = name
        self.contentType = contentType
        self.size = size
        self.sha256 = sha256
        self.createdAt = createdAt
        self.linked = linked
    }

    /// The `201` answer.
    public var upload: AttachmentUpload {
        AttachmentUpload(id: id, name: name, size: size, contentType: contentType, sha256: sha256)
    }
}

/// What an upload asks for; the body comes beside it as a stream.
public struct AttachmentUploadRequest: Sendable, Equatable {
    /// A fresh UUIDv7 chosen by the server.
    public var id: String
    public var ownerId: String
    public var name: String
    public var contentType: String
    /// The request's `Content-Length`: the body must be exactly this long (shorter: ``AttachmentUploadError/truncated``;
    /// the stream cannot be longer in HTTP/1.1).
    public var length: Int64
    /// The owner's quota of stored bytes, counted over every upload the owner has.
    public var quotaBytes: Int64
    public var at: Int64

    public init(id: String, ownerId: String, name: String, contentType: String, length: Int64, quotaBytes: Int64, at: Int64) {
        self.id = id
        self.ownerId = ownerId
        self.name = name
        self.contentType = contentType
        self.length = length
        self.quotaBytes = quotaBytes
        self.at = at
    }
}

/// Why an upload stored nothing.
public enum AttachmentUploadError: Error, Equatable, CustomStringConvertible {
    /// The body ended before `length` bytes (the client went away or closed early).
    case truncated(received: Int64, expected: Int64)
    /// The body went past `length` bytes.
    case tooLong(expected: Int64)
    /// The owner's stored bytes plus this upload would pass the quota.
    case quotaExceeded(used: Int64, quota: Int64)

    public var description: String {
        switch self {
        case .truncated(let received, let expected): "the body ended after \(received) of its \(expected) bytes"
        case .tooLong(let expected): "the body is longer than its Content-Length of \(expected) bytes"
        case .quotaExceeded(let used, let quota): "the upload would pass the quota of \(quota) stored bytes (\(used) in use)"
        }
    }
}

/// What a sweep removed.
public struct AttachmentSweep: Sendable, Equatable {
    /// Uploads removed (their metadata rows).
    public var attachments: Int
    /// Stored bytes erased (content stored once for several equal uploads counts once, when its last upload goes).
    public var bytes: Int64

    public init(attachments: Int = 0, bytes: Int64 = 0) {
        self.attachments = attachments
        self.bytes = bytes
    }
}

/// The operator's view of attachment storage.
public struct AttachmentStats: Sendable, Equatable, Codable {
    /// Uploads kept, and the bytes they take once stored (equal contents counted once).
    public var count: Int
    public var bytes: Int64
    /// Uploads no stored message carries (waiting to be linked by a send, or for the sweep).
    public var orphans: Int
    public var orphanBytes: Int64

    public init(count: Int = 0, bytes: Int64 = 0, orphans: Int = 0, orphanBytes: Int64 = 0) {
        self.count = count
        self.bytes = bytes
        self.orphans = orphans
        self.orphanBytes = orphanBytes
    }
}

/// The bytes of an attachment being read: `range` of the whole, streamed in chunks.
public typealias AttachmentBytes = AsyncThrowingStream<ByteBuffer, any Error>

/// Attachment storage (API.md 1.2): uploads streamed to durable storage, content-addressed, read back in ranges, and
/// their lifecycle. The message stores of the same backend link a stored message to the uploads it carries (in the
/// message's commit), unlink them when it is deleted for everyone, and that is what ``readable(id:by:)`` and
/// ``sweep(now:)`` read. `AttachmentStoreContractTests` is the behaviour every implementation must pass; an
/// implementation that keeps the bytes elsewhere (an S3-compatible bucket) passes the same suite.
public protocol AttachmentStore: Sendable {
    /// Streams `body` into storage and answers only once the bytes and the upload's row are durable. The body is never
    /// held whole in memory. Refused (``AttachmentUploadError``) and interrupted uploads (`body` throws, the task is
    /// cancelled, the process dies) leave nothing behind: no row, no bytes, nothing counted in the quota.
    func upload<Body: AsyncSequence & Sendable>(_ request: AttachmentUploadRequest, body: Body) async throws -> StoredAttachment
    where Body.Element == ByteBuffer

    /// The uploads with these ids that exist, in any order.
    func attachments(ids: [String]) async throws -> [StoredAttachment]

    /// The upload `id` if `userId` may read it: its owner, or a member of a conversation with a message carrying it
    /// that the member can see (stored at or after the member joined, not deleted). `nil` otherwise, as for an unknown id.
    func readable(id: String, by userId: String) async throws -> StoredAttachment?

    /// The bytes `range` (offsets, both ends included, within `0..<size`) of `attachment`, or all of them.
    func read(_ attachment: StoredAttachment, range: ClosedRange<Int64>?) async throws -> AttachmentBytes

    /// The bytes `ownerId`'s uploads take (each upload counted at its size, whatever it shares).
    func storedBytes(of ownerId: String) async throws -> Int64

    /// Removes the uploads no stored message carries: at once when one did (every such message was deleted for
    /// everyone), else once older than ``AttachmentLimits/unreferencedLifetimeMillis`` at `now`; erases bytes no
    /// remaining upload shares.
    func sweep(now: Int64) async throws -> AttachmentSweep

    func attachmentStats() async throws -> AttachmentStats
}

/// The column a message store keeps a message's attachments in: their wire JSON, `nil` when there are none.
package enum AttachmentColumn {
    package static func encode(_ attachments: [Attachment]) -> String? {
        guard !attachments.isEmpty else { return nil }
        var json = JSONText(capacity: 160 * attachments.count)
        EventPayload.attachments(attachments, into: &json)
        return json.string
    }

    package static func decode(_ text: String?) -> [Attachment] {
        guard let text, !text.isEmpty else { return [] }
        return (try? JSONDecoder().decode([Attachment].self, from: Data(text.utf8))) ?? []
    }
}
