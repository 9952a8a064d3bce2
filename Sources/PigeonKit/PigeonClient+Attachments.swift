import Foundation
import PigeonProtocol

/// Attachments (API.md 1.2): photos, voice notes and files a message carries.
///
/// Sending goes through the outbox (``send(_:type:to:replyTo:threadRoot:attachments:)``): the files are copied into the
/// client's storage beside its database at once, uploaded when online, and the message goes once the server has
/// them all. Receiving brings each attachment's metadata with its message (``PigeonMessage/attachments``); the bytes
/// come on demand with ``attachmentData(id:)`` or ``attachmentFile(id:)``: this device's own copy of what it sent, or
/// a download kept in a cache of at most ``Configuration-swift.struct/attachmentCacheLimit`` bytes (least recently used
/// first out), checked against the attachment's SHA-256 before it is handed over.
extension PigeonClient {
    /// The bytes of the attachment `id`, read whole (``attachmentFile(id:)`` for a file to stream or show).
    ///
    /// Needs the network unless this device sent it or has it in its cache. Throws the server's `not_found` (`404`)
    /// for an attachment this user cannot see, ``PigeonClientError/Code-swift.struct/network`` when the bytes did not
    /// arrive intact (their SHA-256 differs: nothing is kept), or a network error.
    public func attachmentData(id: String) async throws -> Data {
        let (url, temporary) = try await attachmentCache.file(id: id, download: downloader)
        defer { if temporary { try? FileManager.default.removeItem(at: url) } }
        do {
            return try Data(contentsOf: url)
        } catch {
            throw PigeonClientError(.localDatabase, "cannot read \(url.path): \(error)")
        }
    }

    /// A file holding the attachment `id`: this device's own copy of what it sent, else its download in the cache
    /// (fetched first when it is not there). A cached file stays until newer downloads push it out of the cache:
    /// read or copy it soon. Throws like ``attachmentData(id:)``, and
    /// ``PigeonClientError/Code-swift.struct/invalidArgument`` for a download larger than the whole cache (read it with
    /// ``attachmentData(id:)``).
    public func attachmentFile(id: String) async throws -> URL {
        let (url, temporary) = try await attachmentCache.file(id: id, download: downloader)
        guard !temporary else {
            try? FileManager.default.removeItem(at: url)
            throw PigeonClientError.invalid(
                "attachment \(id) is larger than the attachment cache (\(configuration.attachmentCacheLimit) bytes); read it with attachmentData(id:)")
        }
        return url
    }

    /// The bytes the attachment cache holds now (at most ``Configuration-swift.struct/attachmentCacheLimit``).
    public func attachmentCacheBytes() async throws -> Int64 {
        try await store.cachedBytes()
    }

    private var downloader: @Sendable (String, URL) async throws -> DownloadedAttachment {
        let transport = accountTransport
        return { id, file in try await transport.downloadAttachment(id: id, to: file.path) }
    }

    /// Refuses what a send cannot carry (API.md 1.2's limits), before anything is written.
    static func validate(_ attachments: [PigeonAttachmentSource]) throws {
        guard attachments.count <= AttachmentLimits.perMessage else {
            throw PigeonClientError.invalid("\(attachments.count) attachments; a message carries at most \(AttachmentLimits.perMessage)")
        }
        for attachment in attachments {
            guard Validation.isValidAttachmentName(attachment.name) else {
                throw PigeonClientError.invalid(
                    "\"\(attachment.name)\" is not a file name (1–\(AttachmentLimits.maxNameBytes) bytes, no /, \\ or control character, not . or ..)")
            }
            guard Validation.isValidContentType(attachment.contentType) else {
                throw PigeonClientError.invalid("\"\(attachment.contentType)\" is not a media type (type/subtype)")
            }
            for (label, value) in [("width", attachment.width), ("height", attachment.height)] {
                if let value, !(0...AttachmentLimits.maxDimension).contains(value) {
                    throw PigeonClientError.invalid("\(label) must be 0–\(AttachmentLimits.maxDimension) pixels")
                }
            }
            if let duration = attachment.durationMs, !(0...AttachmentLimits.maxDurationMs).contains(duration) {
                throw PigeonClientError.invalid("durationMs must be 0–\(AttachmentLimits.maxDurationMs)")
            }
        }
    }
}
