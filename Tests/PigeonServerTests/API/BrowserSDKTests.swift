import Crypto
import Foundation
import NIOHTTP1
import PigeonContract
import PigeonJS
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// PigeonJS as the server serves it: `GET /sdk/pigeon.js` and `GET /sdk/pigeon.d.ts` (docs/SDK-JS.md, "Serving and
/// versions"). What the module does in a browser is Tests/Web/test_pigeonjs.py's.
@Suite struct BrowserSDKTests {
    static func sha256(_ bytes: some Sequence<UInt8>) -> String {
        SHA256.hash(data: Array(bytes)).map { String(format: "%02x", $0) }.joined()
    }

    /// With and without `--web`, and with `--cors-origin` (which governs the API only): importable from any origin.
    @Test func theModuleAndItsTypesAreServedToEveryOrigin() async throws {
        let configurations: [(String, @Sendable (inout ServerConfiguration) -> Void)] = [
            ("default", { _ in }), ("--web", { $0.webDemo = true }), ("--cors-origin", { $0.corsOrigins = ["https://app.example.com"] }),
        ]
        for (name, configure) in configurations {
            try await withTestServer(configure: configure) { client in
                let module = try await client.request(.GET, "/sdk/pigeon.js", headers: ["Origin": "https://elsewhere.example.org"])
                #expect(module.status == 200, "\(name): \(module.status)")
                #expect(module.headers["content-type"] == "text/javascript; charset=utf-8", "\(name)")
                #expect(module.headers["access-control-allow-origin"] == "*", "\(name): \(module.headers)")
                #expect(module.headers["cross-origin-resource-policy"] == "cross-origin", "\(name)")
                #expect(module.headers["cache-control"] == "no-cache", "\(name)")
                #expect(module.headers["x-content-type-options"] == "nosniff", "\(name)")
                #expect(module.headers["etag"] == "\"\(Self.sha256(module.text.utf8))\"", "\(name): \(module.headers)")
                let types = try await client.request(.GET, "/sdk/pigeon.d.ts")
                #expect(types.status == 200 && types.text.contains("export declare class PigeonClient"), "\(name)")
                #expect(types.headers["content-type"] == "application/typescript; charset=utf-8", "\(name)")
                #expect(types.headers["access-control-allow-origin"] == "*", "\(name)")
            }
        }
    }

    /// Every module the entry imports is served as it is, like the entry; the contract lists exactly those; any other
    /// name under /sdk/ is 404.
    @Test func everyModuleTheEntryImportsIsServed() async throws {
        try await withTestServer { client in
            let entry = try await client.request(.GET, "/sdk/pigeon.js").text
            var imported = Set(entry.matches(of: /from "\.\/([a-z]+\.js)"/).map { String($0.output.1) })
            for (name, bytes) in PigeonJSFiles.modules.dropFirst() {
                let module = try await client.request(.GET, "/sdk/\(name)", headers: ["Origin": "https://elsewhere.example.org"])
                #expect(module.status == 200, "\(name): \(module.status)")
                #expect(module.text == String(decoding: bytes, as: UTF8.self), "\(name) is served as it is")
                #expect(module.headers["content-type"] == "text/javascript; charset=utf-8", "\(name)")
                #expect(module.headers["access-control-allow-origin"] == "*", "\(name)")
                #expect(module.headers["etag"] == "\"\(Self.sha256(module.text.utf8))\"", "\(name)")
                imported.formUnion(module.text.matches(of: /from "\.\/([a-z]+\.js)"/).map { String($0.output.1) })
            }
            #expect(imported == Set(PigeonJSFiles.modules.dropFirst().map(\.name)), "the module graph is what is served: \(imported.sorted())")
            #expect(Set(ContractRoute.sdkModules) == Set(PigeonJSFiles.modules.dropFirst().map(\.name)))
            for name in ["nothing.js", "pigeon.js.map", "..%2Fpigeon.js"] {
                #expect(try await client.request(.GET, "/sdk/\(name)").status == 404, "\(name)")
            }
        }
    }

    /// `VERSION` is the contract's version and the sources' hash; the served text differs from the source only there.
    @Test func theModuleCarriesItsVersion() async throws {
        try await withTestServer { client in
            let served = try await client.request(.GET, "/sdk/pigeon.js").text
            let source = String(decoding: PigeonJSFiles.modules[0].bytes, as: UTF8.self)
            let version = SDKFile.version(of: PigeonJSFiles.modules.flatMap(\.bytes))
            #expect(version.wholeMatch(of: /1\.2\+[0-9a-f]{12}/) != nil, "\(version)")
            #expect(served.contains("export const VERSION = \"\(version)\";"))
            #expect(source.contains("export const VERSION = \"\(SDKFile.versionPlaceholder)\";"))
            #expect(served == source.replacingOccurrences(of: SDKFile.versionPlaceholder, with: version))
        }
    }

    @Test func aCopyStillCurrentIsAnswered304() async throws {
        try await withTestServer { client in
            let first = try await client.request(.GET, "/sdk/pigeon.js")
            let etag = try #require(first.headers["etag"])
            let again = try await client.request(.GET, "/sdk/pigeon.js", headers: ["If-None-Match": etag])
            #expect(again.status == 304 && again.body.isEmpty, "\(again.status)")
            #expect(again.headers["etag"] == etag && again.headers["access-control-allow-origin"] == "*")
            let stale = try await client.request(.GET, "/sdk/pigeon.js", headers: ["If-None-Match": "\"0000\""])
            #expect(stale.status == 200 && stale.text == first.text)
        }
    }

    @Test func otherMethodsAndPathsAreRefused() async throws {
        try await withTestServer { client in
            for method: HTTPMethod in [.POST, .PUT, .DELETE] {
                let answer = try await client.request(method, "/sdk/pigeon.js")
                expectError(answer, 405, .methodNotAllowed, "\(method) /sdk/pigeon.js")
                #expect(answer.headers["allow"] == "GET")
            }
            for path in ["/sdk", "/sdk/", "/sdk/other.js", "/sdk/pigeon.js/x"] {
                #expect(try await client.request(.GET, path).status == 404, "\(path)")
            }
        }
    }
}
