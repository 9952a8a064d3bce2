import Foundation
import PigeonProtocol

/// A file a message carries (API.md 1.2): a photo, a voice note, a document. Read with the message from the local
/// database; the bytes come from ``PigeonClient/attachmentData(id:)`` or ``PigeonClient/attachmentFile(id:)``.
public struct PigeonAttachment: Sendable, Equatable, Codable {
    /// The server's id of the upload; `nil` while this device has not uploaded it yet (the message is then ⏰).
    public var id: String?
    /// The file name, as the sender gave it (1–255 bytes of UTF-8, no `/`).
    public var name: String
    /// Its size in bytes.
    public var size: Int64
    /// Its media type, e.g. `image/jpeg`.
    public var contentType: String
    /// The SHA-256 of its bytes, lowercase hex; `nil` until the server has them. Downloads are checked against it.
    public var sha256: String?
    /// Pixels, as the sender gave them (the server stores them as given).
    public var width: Int?
    public var height: Int?
    /// Milliseconds of a voice note or a video, as the sender gave them.
    public var durationMs: Int64?
    /// For an attachment this device sent: where its own copy is (in the client's storage beside the database), so a
    /// chat can show it at once, before and after it is uploaded. `nil` for the others'.
    public var localPath: String?

    /// An attachment as given; PigeonKit makes them from what was sent or received.
    public init(
        id: String?, name: String, size: Int64, contentType: String, sha256: String? = nil, width: Int? = nil, height: Int? = nil,
        durationMs: Int64? = nil, localPath: String? = nil
    ) {
        self.id = id
        self.name = name
        self.size = size
        self.contentType = contentType
        self.sha256 = sha256
        self.width = width
        self.height = height
        self.durationMs = durationMs
        self.localPath = localPath
    }
}

/// What ``PigeonClient/send(_:type:to:replyTo:threadRoot:attachments:)`` attaches: a file or bytes in memory, with
/// its name, media type and the dimensions the app knows (a photo's pixels, a voice note's length).
///
/// `send` copies it into the client's own storage at once: the app may delete or change its file afterwards.
public struct PigeonAttachmentSource: Sendable, Equatable {
    /// Where the bytes are.
    public enum Content: Sendable, Equatable {
        /// A file on this device.
        case file(URL)
        /// Bytes in memory.
        case data(Data)
    }

    public var content: Content
    /// The file name the others see (1–255 bytes of UTF-8, no `/`, `\` or control character).
    public var name: String
    /// The media type (`type/subtype`); the file name's extension decides when none is given.
    public var contentType: String
    /// Pixels of a photo or a video.
    public var width: Int?
    public var height: Int?
    /// Milliseconds of a voice note or a video.
    public var durationMs: Int64?

    /// The file at `url`, named `name` (default: the file's own name).
    public static func file(
        _ url: URL, name: String? = nil, contentType: String? = nil, width: Int? = nil, height: Int? = nil, durationMs: Int64? = nil
    ) -> PigeonAttachmentSource {
        let name = name ?? url.lastPathComponent
        return PigeonAttachmentSource(
            content: .file(url), name: name, contentType: contentType ?? Self.contentType(forName: name), width: width, height: height,
            durationMs: durationMs)
    }

    /// `data`, named `name`.
    public static func data(
        _ data: Data, name: String, contentType: String? = nil, width: Int? = nil, height: Int? = nil, durationMs: Int64? = nil
    ) -> PigeonAttachmentSource {
        PigeonAttachmentSource(
            content: .data(data), name: name, contentType: contentType ?? Self.contentType(forName: name), width: width, height: height,
            durationMs: durationMs)
    }

    /// The media type of a file name's extension among the common ones (photos, audio, video, documents);
    /// `application/octet-stream` for any other.
    public static func contentType(forName name: String) -> String {
        let ext = (name as NSString).pathExtension.lowercased()
        return Self.mediaTypes[ext] ?? "application/octet-stream"
    }

    private static let mediaTypes: [String: String] = [
        "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp",
        "heic": "image/heic", "heif": "image/heif", "svg": "image/svg+xml",
        "m4a": "audio/mp4", "aac": "audio/aac", "mp3": "audio/mpeg", "ogg": "audio/ogg", "oga": "audio/ogg", "opus": "audio/opus",
        "wav": "audio/wav", "flac": "audio/flac",
        "mp4": "video/mp4", "m4v": "video/mp4", "mov": "video/quicktime", "webm": "video/webm",
        "pdf": "application/pdf", "zip": "application/zip", "json": "application/json",
        "txt": "text/plain", "md": "text/markdown", "csv": "text/csv", "html": "text/html",
    ]
}

/// An attachment as the local database keeps it, in a message's `attachments` column: the fields of
/// ``PigeonAttachment``, with this device's copy by its file name in the client's `sent` directory (the directory
/// may move with the app's container; the name does not).
struct LocalAttachment: Codable, Sendable, Equatable {
    var id: String?
    var name: String
    var size: Int64
    var contentType: String
    var sha256: String?
    var width: Int?
    var height: Int?
    var durationMs: Int64?
    /// The copy's file name in the `sent` directory, for what this device sent.
    var file: String?

    init(_ attachment: Attachment) {
        id = attachment.id
        name = attachment.name
        size = attachment.size
        contentType = attachment.contentType
        sha256 = attachment.sha256
        width = attachment.width
        height = attachment.height
        durationMs = attachment.durationMs
    }

    init(name: String, size: Int64, contentType: String, width: Int?, height: Int?, durationMs: Int64?, file: String) {
        self.name = name
        self.size = size
        self.contentType = contentType
        self.width = width
        self.height = height
        self.durationMs = durationMs
        self.file = file
    }

    /// What a send names it by (once uploaded).
    var reference: AttachmentReference? {
        id.map { AttachmentReference(id: $0, width: width, height: height, durationMs: durationMs) }
    }

    func attachment(sentDirectory: URL) -> PigeonAttachment {
        PigeonAttachment(
            id: id, name: name, size: size, contentType: contentType, sha256: sha256, width: width, height: height, durationMs: durationMs,
            localPath: file.map { sentDirectory.appendingPathComponent($0).path })
    }
}
