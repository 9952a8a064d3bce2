import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A self-contained HTML page the server answers (the operator's page, the web demo): its style, body and script
/// inline, nothing fetched from elsewhere, so that its Content-Security-Policy can allow exactly its own inline style
/// and script by their SHA-256 hashes and nothing else.
struct InlinePage: Sendable {
    /// The whole document, UTF-8.
    let html: String
    /// `sha256-<base64>` of the inline script and style, as CSP names them.
    private let scriptHash: String
    private let styleHash: String

    init(title: String, style: String, body: String, script: String) {
        html = """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="referrer" content="no-referrer">
            <title>\(title)</title>
            <style>\(style)</style>
            </head>
            <body>
            \(body)
            <script>\(script)</script>
            </body>
            </html>

            """
        scriptHash = Self.hashSource(script)
        styleHash = Self.hashSource(style)
    }

    /// Nothing but the page's own inline script and style, connections to `connect` (CSP sources), images from
    /// `images` when given; no base URI, forms or framing.
    func contentSecurityPolicy(connect: [String], images: [String] = []) -> String {
        var directives = [
            "default-src 'none'", "script-src '\(scriptHash)'", "style-src '\(styleHash)'", "connect-src \(connect.joined(separator: " "))",
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
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    private static let xFrameOptions = HTTPField.Name("X-Frame-Options")!
    private static let referrerPolicy = HTTPField.Name("Referrer-Policy")!

    /// `sha256-<base64>` of an inline element's exact text.
    private static func hashSource(_ text: String) -> String {
        "sha256-" + Data(SHA256.hash(data: Data(text.utf8))).base64EncodedString()
    }
}
