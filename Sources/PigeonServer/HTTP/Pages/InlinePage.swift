import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A self-contained HTML page the server answers (the operator's page, the web demo), assembled from its files in
/// Sources/PigeonServer/Pages, which the build embeds in the binary (`.embedInCode` in Package.swift: each file is a
/// `PackageResources.<name>_<extension>` of bytes, so the server stays one executable with nothing beside it). The
/// document's empty `<style></style>` and `<script></script>` are filled with its style sheet and script: nothing is
/// fetched from elsewhere, so its Content-Security-Policy can allow exactly that inline style and script by their
/// SHA-256 hashes, computed once from the very bytes served, and nothing else.
struct InlinePage: Sendable {
    /// The whole document, UTF-8.
    let html: ByteBuffer
    /// `sha256-<base64>` of the inline script and style, as CSP names them.
    private let scriptHash: String
    private let styleHash: String

    init(document: [UInt8], style: [UInt8], script: [UInt8]) {
        var html = document
        Self.fill("<style>", "</style>", with: style, in: &html)
        Self.fill("<script>", "</script>", with: script, in: &html)
        self.html = ByteBuffer(bytes: html)
        scriptHash = Self.hashSource(script)
        styleHash = Self.hashSource(style)
    }

    /// Nothing but the page's own inline script (and the scripts of `scripts`, CSP sources of modules it imports) and
    /// style, connections to `connect` (CSP sources), images from `images` when given; no base URI, forms or framing.
    func contentSecurityPolicy(connect: [String], images: [String] = [], scripts: [String] = []) -> String {
        var directives = [
            "default-src 'none'", (["script-src", "'\(scriptHash)'"] + scripts).joined(separator: " "), "style-src '\(styleHash)'",
            "connect-src \(connect.joined(separator: " "))",
        ]
        if !images.isEmpty { directives.append("img-src \(images.joined(separator: " "))") }
        directives += ["base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"]
        return directives.joined(separator: "; ")
    }

    /// `200` with the page: never cached (a reload gets the page of the server that runs now), never framed, no
    /// referrer, no content sniffing.
    func response(contentSecurityPolicy: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[Self.xFrameOptions] = "DENY"
        headers[.cacheControl] = "no-store"
        headers[Self.referrerPolicy] = "no-referrer"
        headers[.xContentTypeOptions] = "nosniff"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: html))
    }

    private static let xFrameOptions = HTTPField.Name("X-Frame-Options")!
    private static let referrerPolicy = HTTPField.Name("Referrer-Policy")!

    /// Puts `content` between `open` and `close` where they stand together, empty, exactly once in `document`;
    /// `content` may not hold the element's end tag (the browser would end it there, and its hash would not match).
    private static func fill(_ open: String, _ close: String, with content: [UInt8], in document: inout [UInt8]) {
        let element = Array((open + close).utf8)
        let starts = document.indices.filter { document[$0...].starts(with: element) }
        precondition(starts.count == 1, "a page must hold \(open)\(close) once, it holds it \(starts.count) times")
        let closing = Array(close.dropLast().utf8)
        precondition(!content.indices.contains { content[$0...].starts(with: closing) }, "the content of \(open) holds \(close.dropLast())")
        document.insert(contentsOf: content, at: starts[0] + open.utf8.count)
    }

    /// `sha256-<base64>` of an inline element's exact bytes.
    private static func hashSource(_ bytes: [UInt8]) -> String {
        "sha256-" + Data(SHA256.hash(data: bytes)).base64EncodedString()
    }
}
