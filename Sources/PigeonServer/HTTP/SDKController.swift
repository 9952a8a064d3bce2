import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PigeonContract
import PigeonDomain
import PigeonJS

/// `GET /sdk/pigeon.js`, `GET /sdk/{module}` and `GET /sdk/pigeon.d.ts`: PigeonJS, the browser SDK (`Clients/PigeonJS`:
/// ES modules, dependency-free), and its TypeScript declarations, served by every server, with or without `--web`, so
/// that a web app imports the SDK of the very server it talks to. The entry, `pigeon.js`, imports the other modules by
/// relative URL: the browser fetches each from here. docs/SDK-JS.md describes the SDK.
///
/// A web app usually lives on another origin than the server, and a module script is fetched in CORS mode: every file
/// is answered with `Access-Control-Allow-Origin: *` (they are public and carry no credentials) and
/// `Cross-Origin-Resource-Policy: cross-origin`, whatever `--cors-origin` says (which governs the `/v1` API only).
/// `Cache-Control: no-cache` with a strong `ETag` (the SHA-256 of the bytes served): a browser keeps its copy and asks
/// each time whether it is still the server's (`If-None-Match` → `304`), so an upgraded server is picked up at the next
/// load, without a `?v=` in the URL.
struct SDKController: Sendable {
    func addRoutes(to router: Router<PigeonRequestContext>) {
        router.get("/sdk/pigeon.js") { request, _ in SDKFile.entry.response(to: request) }
        router.get("/sdk/pigeon.d.ts") { request, _ in SDKFile.declarations.response(to: request) }
        router.get("/sdk/:module") { request, context in
            guard let name = context.parameters.get("module"), let file = SDKFile.modules[name] else {
                throw PigeonError(.notFound, "no such module of PigeonJS")
            }
            return file.response(to: request)
        }
    }
}

/// One served file of the SDK: its bytes, media type and entity tag, computed once.
struct SDKFile: Sendable {
    let bytes: ByteBuffer
    let contentType: String
    let etag: String

    /// The entry module, with its `VERSION` filled in (``version(of:)``, over every module).
    static let entry: SDKFile = {
        let source = PigeonJSFiles.modules[0].bytes
        let text = String(decoding: source, as: UTF8.self)
        precondition(text.contains(versionPlaceholder), "PigeonJS's pigeon.js must hold \(versionPlaceholder) once")
        let filled = text.replacingOccurrences(of: versionPlaceholder, with: version(of: PigeonJSFiles.modules.flatMap(\.bytes)))
        return SDKFile(bytes: Array(filled.utf8), contentType: "text/javascript; charset=utf-8")
    }()

    /// The other modules, by file name.
    static let modules: [String: SDKFile] = Dictionary(
        uniqueKeysWithValues: PigeonJSFiles.modules.dropFirst().map { ($0.name, SDKFile(bytes: $0.bytes, contentType: "text/javascript; charset=utf-8")) })

    static let declarations = SDKFile(bytes: PigeonJSFiles.declarations, contentType: "application/typescript; charset=utf-8")

    /// The text in the entry that the server replaces with the SDK's version.
    static let versionPlaceholder = "0.0.0-unserved"

    /// `<contract version>+<the first 12 hex digits of the sources' SHA-256>`, e.g. `1.2+3f9a0c1d2e4b`: the wire contract
    /// the SDK speaks, and which build of it this is (any change to any of its modules changes it).
    static func version(of source: [UInt8]) -> String {
        let digest = SHA256.hash(data: source).map { String(format: "%02x", $0) }.joined()
        return "\(OpenAPIDocument.version)+\(digest.prefix(12))"
    }

    init(bytes: [UInt8], contentType: String) {
        self.bytes = ByteBuffer(bytes: bytes)
        self.contentType = contentType
        etag = "\"" + SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined() + "\""
    }

    /// `200` with the file, or `304` when the request's `If-None-Match` names this version.
    func response(to request: Request) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = contentType
        headers[.eTag] = etag
        headers[.cacheControl] = "no-cache"
        headers[.accessControlAllowOrigin] = "*"
        headers[.xContentTypeOptions] = "nosniff"
        headers[Self.crossOriginResourcePolicy] = "cross-origin"
        if let match = request.headers[.ifNoneMatch], AttachmentController.matches(match, etag: etag) {
            return Response(status: .notModified, headers: headers)
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: bytes))
    }

    private static let crossOriginResourcePolicy = HTTPField.Name("Cross-Origin-Resource-Policy")!
}
