import Foundation

/// `POST /v1/attachments?name=` answer (`201`): the upload, durable (API.md 1.2).
public struct AttachmentUpload: Codable, Sendable, Equatable {
    public var id: String
    public var name: String
    public var size: Int64
    public var contentType: String
    /// The bytes' SHA-256, lowercase hex: also the download's `ETag`.
    public var sha256: String

    public init(id: String, name: String, size: Int64, contentType: String, sha256: String) {
        self.id = id
        self.name = name
        self.size = size
        self.contentType = contentType
        self.sha256 = sha256
    }
}

/// An upload named by a send: `{"id", "width"?, "height"?, "durationMs"?}`. The dimensions are the client's word,
/// stored as given.
public struct AttachmentReference: Codable, Sendable, Equatable {
    public var id: String
    public var width: Int?
    public var height: Int?
    public var durationMs: Int64?

    public init(id: String, width: Int? = nil, height: Int? = nil, durationMs: Int64? = nil) {
        self.id = id
        self.width = width
        self.height = height
        self.durationMs = durationMs
    }
}

/// An attachment as a message carries it: the upload's metadata and the sender's dimensions. Every field is always
/// on the wire (`null` when absent).
public struct Attachment: Codable, Sendable, Equatable {
    public var id: String
    public var name: String
    public var size: Int64
    public var contentType: String
    public var sha256: String
    @NullEncoded public var width: Int?
    @NullEncoded public var height: Int?
    @NullEncoded public var durationMs: Int64?

    public init(
        id: String, name: String, size: Int64, contentType: String, sha256: String, width: Int? = nil, height: Int? = nil,
        durationMs: Int64? = nil
    ) {
        self.id = id
        self.name = name
        self.size = size
        self.contentType = contentType
        self.sha256 = sha256
        self.width = width
        self.height = height
        self.durationMs = durationMs
    }

    /// The upload `upload` as a message carries it, with the sender's `reference` dimensions.
    public init(_ upload: AttachmentUpload, _ reference: AttachmentReference) {
        self.init(
            id: upload.id, name: upload.name, size: upload.size, contentType: upload.contentType, sha256: upload.sha256,
            width: reference.width, height: reference.height, durationMs: reference.durationMs)
    }
}

/// The limits of API.md 1.2's attachments that are not the operator's to set.
public enum AttachmentLimits {
    /// Attachments one message may carry.
    public static let perMessage = 10
    /// A file name: 1 to 255 bytes of UTF-8.
    public static let maxNameBytes = 255
    /// A media type (`type/subtype` and its parameters).
    public static let maxContentTypeBytes = 255
    /// The largest width, height (pixels) and duration (ms, 7 days) a send may give.
    public static let maxDimension = 1_000_000
    public static let maxDurationMs: Int64 = 7 * 24 * 3_600_000
    /// An upload no message carries is deleted this long after it was made.
    public static let unreferencedLifetimeMillis: Int64 = 24 * 3_600_000
    /// Defaults of the operator's flags.
    public static let defaultMaxBytes: Int64 = 25 * 1024 * 1024
    public static let defaultQuotaBytes: Int64 = 1024 * 1024 * 1024
    public static let defaultUploadsPerMinute = 30

    /// `type/subtype` of a media type, lowercased, without its parameters (or anything else after a `;` or `,`).
    public static func canonicalMediaType(_ contentType: String) -> String {
        let end = contentType.firstIndex { $0 == ";" || $0 == "," } ?? contentType.endIndex
        return contentType[..<end].trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// The media types served `inline` under their own `Content-Type`; every other one is served as
    /// `application/octet-stream` with `Content-Disposition: attachment`, so that an upload can never be run as a page
    /// or a script of the server's origin.
    public static func isInline(_ contentType: String) -> Bool {
        let media = canonicalMediaType(contentType)
        switch media {
        case "image/png", "image/jpeg", "image/gif", "image/webp": return true
        default: return media.hasPrefix("audio/") || media.hasPrefix("video/")
        }
    }
}

extension Validation {
    /// A file name as an upload may give it: 1–255 bytes of UTF-8, no control character (C0, DEL, C1), no `/` or `\`,
    /// not `.` or `..`, and none of the invisible characters that make a name read as another
    /// (``isDeceptiveInvisible(_:)``: `invoice\u{202E}fdp.exe` shows as `invoiceexe.pdf`).
    public static func isValidAttachmentName(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= AttachmentLimits.maxNameBytes, name != ".", name != ".." else { return false }
        return !name.unicodeScalars.contains {
            $0.value < 0x20 || (0x7F...0x9F).contains($0.value) || $0 == "/" || $0 == "\\" || isDeceptiveInvisible($0)
        }
    }

    /// The invisible characters that change how text around them reads: bidirectional marks, embeddings, overrides
    /// and isolates (U+200E–200F, U+202A–202E, U+2066–2069, U+061C), the line and paragraph separators (U+2028–2029),
    /// zero-width characters (U+200B–200D, U+2060–2064, U+FEFF, U+180E) and tag characters (U+E0000–E007F).
    public static func isDeceptiveInvisible(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x200B...0x200F, 0x202A...0x202E, 0x2028, 0x2029, 0x2060...0x2064, 0x2066...0x2069, 0x061C, 0xFEFF, 0x180E, 0xE0000...0xE007F:
            return true
        default:
            return false
        }
    }

    /// A media type as `Content-Type` gives it: `type/subtype` of RFC 9110 tokens, optionally followed by parameters,
    /// printable ASCII, at most 255 bytes.
    public static func isValidContentType(_ value: String) -> Bool {
        guard !value.isEmpty, value.utf8.count <= AttachmentLimits.maxContentTypeBytes,
            value.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F })
        else { return false }
        let media = value.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)[0].trimmingCharacters(in: .whitespaces)
        let parts = media.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return false }
        let token = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
        return parts.allSatisfy { !$0.isEmpty && $0.utf8.allSatisfy(token.contains) }
    }
}
