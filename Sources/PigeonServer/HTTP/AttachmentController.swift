import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol

/// Attachments (API.md 1.2): `POST /v1/attachments` streams an upload into the ``AttachmentStore``;
/// `GET /v1/attachments/{id}` streams it back to whoever may read it, in ranges, with the headers that keep a browser
/// from running an upload as a page of this origin.
struct AttachmentController: Sendable {
    let store: any AttachmentStore
    let configuration: AttachmentConfiguration
    let uploads: RateLimiter?
    /// Uploads per user: ``AbuseLimits/devicesPerUserBudget`` devices' worth (a user churning devices gets no more).
    let userUploads: RateLimiter?
    let metrics: PigeonMetrics
    let logger: Logger

    init(store: any AttachmentStore, configuration: AttachmentConfiguration, metrics: PigeonMetrics, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.uploads =
            configuration.uploadsPerMinute > 0 ? RateLimiter(rate: configuration.uploadsPerMinute / 60, burst: configuration.uploadsPerMinute) : nil
        let perUser = configuration.uploadsPerMinute * AbuseLimits.devicesPerUserBudget
        self.userUploads = perUser > 0 ? RateLimiter(rate: perUser / 60, burst: perUser) : nil
        self.metrics = metrics
        self.logger = logger
    }

    /// The upload route takes the token from the header only; the download route also from `?access_token=`, for
    /// `<img src>`, which cannot send a header.
    func addRoutes(upload group: RouterGroup<DeviceRequestContext>, download queryGroup: RouterGroup<DeviceRequestContext>) {
        group.post("/attachments", use: upload)
        queryGroup.get("/attachments/:id", use: download)
    }

    // MARK: Upload

    /// Checks everything the head says before reading a byte of the body (size, name, type, rate, quota), so a refused
    /// upload is answered at once (and, its body unread, the connection closes after the answer); then streams the
    /// body into the store, which answers once the bytes are durable.
    @Sendable func upload(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        let device = context.device
        guard let rawLength = request.headers[.contentLength] else {
            throw PigeonError.invalid("an upload needs a Content-Length header (its exact size in bytes; chunked bodies are not taken)")
        }
        guard let length = Int64(rawLength), length >= 0 else { throw PigeonError.invalid("Content-Length must be a number of bytes") }
        guard length <= configuration.maxBytes else {
            throw PigeonError(.payloadTooLarge, "an attachment is at most \(configuration.maxBytes) bytes; this one is \(length)")
        }
        guard length > 0 else { throw PigeonError.invalid("an attachment must not be empty") }
        // The query's values arrive percent-decoded: a name is never decoded twice ("100%.png" is a valid name).
        guard let name: String = request.uri.queryParameters.get("name") else {
            throw PigeonError.invalid("name (the file name, ?name=) is required")
        }
        guard Validation.isValidAttachmentName(name) else {
            throw PigeonError.invalid("name must be 1-\(AttachmentLimits.maxNameBytes) bytes with no control character, / or \\")
        }
        let contentType = try Self.contentType(request.headers[.contentType])
        if let userUploads, let wait = userUploads.check(device.userId) {
            metrics.limitHit("attachment_uploads_per_user")
            throw PigeonError(.rateLimited, "too many uploads from this user's devices; retry in \(wait) s", retryAfter: wait)
        }
        if let uploads, let wait = uploads.take(device.userId + "\u{0}" + device.deviceId) {
            metrics.limitHit("attachment_uploads_per_device")
            throw PigeonError(.rateLimited, "too many uploads from this device; retry in \(wait) s", retryAfter: wait)
        }
        _ = userUploads?.take(device.userId)
        let used = try await store.storedBytes(of: device.userId)
        guard used + length <= configuration.quotaBytes else { throw Self.quotaRefusal(used: used, quota: configuration.quotaBytes) }
        let uploadRequest = AttachmentUploadRequest(
            id: Identifiers.uuidV7(), ownerId: device.userId, name: name, contentType: contentType, length: length,
            quotaBytes: configuration.quotaBytes, at: WallClock.nowMillis())
        let stored: StoredAttachment
        do {
            stored = try await store.upload(uploadRequest, body: request.body)
        } catch let error as AttachmentUploadError {
            switch error {
            case .quotaExceeded(let used, let quota): throw Self.quotaRefusal(used: used, quota: quota)
            case .truncated, .tooLong: throw PigeonError.invalid("\(error); nothing was stored")
            }
        }
        metrics.attachmentUploaded(bytes: stored.size)
        var response = try JSONBody.response(stored.upload, status: .created)
        response.headers[.location] = "/v1/attachments/\(stored.id)"
        return response
    }

    private static func quotaRefusal(used: Int64, quota: Int64) -> PigeonError {
        PigeonError(.forbidden, "this user's attachments would pass their quota of \(quota) stored bytes (\(used) in use); nothing was stored")
    }

    /// The upload's canonical media type: its type and subtype, lowercased, without parameters (`application/octet-stream`
    /// when none). Parameters are dropped, never stored or served: a header such as `image/png;x=y, text/html` would
    /// otherwise be served as given, and a browser reads the last type in it.
    static func contentType(_ header: String?) throws -> String {
        guard let header = header?.trimmingCharacters(in: .whitespaces), !header.isEmpty else { return "application/octet-stream" }
        guard Validation.isValidContentType(header) else { throw PigeonError.invalid("Content-Type must be a media type (type/subtype)") }
        return AttachmentLimits.canonicalMediaType(header)
    }

    // MARK: Download

    @Sendable func download(_ request: Request, context: DeviceRequestContext) async throws -> Response {
        // An id that is not a UUID is as unknown as any other.
        guard let id = context.parameters.decoded("id").flatMap(Validation.canonicalUUID),
            let attachment = try await store.readable(id: id, by: context.device.userId)
        else { throw PigeonError(.notFound, "attachment not found") }
        var headers = Self.headers(for: attachment)
        if let match = request.headers[.ifNoneMatch], Self.matches(match, etag: Self.etag(attachment)) {
            return Response(status: .notModified, headers: headers)
        }
        var range: ClosedRange<Int64>?
        if let header = request.headers[.range], Self.ifRangeHolds(request.headers[.ifRange], attachment) {
            switch ByteRange.parse(header, size: attachment.size) {
            case .whole: break
            case .range(let asked): range = asked
            case .unsatisfiable:
                var response = JSONBody.errorResponse(
                    PigeonError(.rangeNotSatisfiable, "the range \(header) lies outside the attachment's \(attachment.size) bytes"))
                response.headers[HTTPField.Name.contentRange] = "bytes */\(attachment.size)"
                return response
            }
        }
        let bytes = try await store.read(attachment, range: range)
        if let range {
            headers[.contentLength] = String(range.count)
            headers[.contentRange] = "bytes \(range.lowerBound)-\(range.upperBound)/\(attachment.size)"
            return Response(status: .partialContent, headers: headers, body: ResponseBody(asyncSequence: bytes))
        }
        headers[.contentLength] = String(attachment.size)
        return Response(status: .ok, headers: headers, body: ResponseBody(asyncSequence: bytes))
    }

    static func etag(_ attachment: StoredAttachment) -> String { "\"\(attachment.sha256)\"" }

    /// The headers of every answer about `attachment`. Only images a browser decodes safely, audio and video are
    /// served `inline` under their own type; everything else is `application/octet-stream` and a download, so an
    /// uploaded page or script never runs as this origin. `nosniff` keeps a browser from guessing otherwise, and the
    /// sandboxing policy covers a file opened directly.
    static func headers(for attachment: StoredAttachment) -> HTTPFields {
        var headers = HTTPFields()
        headers[.eTag] = etag(attachment)
        headers[.cacheControl] = "private, max-age=31536000, immutable"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[.contentSecurityPolicy] = "default-src 'none'; sandbox"
        headers[.acceptRanges] = "bytes"
        let encodedName = attachment.name.addingPercentEncoding(withAllowedCharacters: rfc5987) ?? "attachment"
        // Canonical at serving too: an upload stored before types were canonical may carry parameters.
        let media = AttachmentLimits.canonicalMediaType(attachment.contentType)
        if AttachmentLimits.isInline(media) {
            headers[.contentType] = media
            headers[.contentDisposition] = "inline; filename*=UTF-8''\(encodedName)"
        } else {
            headers[.contentType] = "application/octet-stream"
            headers[.contentDisposition] = "attachment; filename*=UTF-8''\(encodedName)"
        }
        return headers
    }

    /// RFC 5987's `attr-char`: what may stay unencoded in `filename*`.
    private static let rfc5987 = CharacterSet(charactersIn: "!#$&+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

    /// `If-None-Match`: `*` or a list of entity tags, weak ones compared weakly (RFC 9110 13.1.2).
    static func matches(_ header: String, etag: String) -> Bool {
        header.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || tag == etag || tag == "W/" + etag
        }
    }

    /// `If-Range`: the range applies only if the client's copy is this one (by entity tag); a date is not kept, so a
    /// date never matches and the whole attachment is sent.
    static func ifRangeHolds(_ header: String?, _ attachment: StoredAttachment) -> Bool {
        guard let header = header?.trimmingCharacters(in: .whitespaces) else { return true }
        return header == etag(attachment)
    }
}

/// One `Range: bytes=…` request (RFC 9110 14.2) against a representation of `size` bytes.
enum ByteRange: Equatable {
    /// No usable range (another unit, several ranges, malformed): the whole representation, `200`.
    case whole
    case range(ClosedRange<Int64>)
    /// A well-formed range that starts past the end: `416`.
    case unsatisfiable

    static func parse(_ header: String, size: Int64) -> ByteRange {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes=") else { return .whole }
        let spec = trimmed.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        // Several ranges would need a multipart answer: serving the whole is what RFC 9110 allows instead.
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        let digits = { (text: String) in !text.isEmpty && text.count <= 18 && text.allSatisfy { $0.isASCII && $0.isNumber } }
        if first.isEmpty {
            // `bytes=-N`: the last N bytes.
            guard digits(last), let suffix = Int64(last) else { return .whole }
            guard suffix > 0, size > 0 else { return .unsatisfiable }
            return .range(max(0, size - suffix)...(size - 1))
        }
        guard digits(first), let start = Int64(first) else { return .whole }
        var end = size - 1
        if !last.isEmpty {
            guard digits(last), let asked = Int64(last) else { return .whole }
            guard asked >= start else { return .whole }
            end = min(asked, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .range(start...end)
    }
}
