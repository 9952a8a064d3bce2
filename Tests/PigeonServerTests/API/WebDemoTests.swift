import Crypto
import Foundation
import NIOHTTP1
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// The web demo page, `GET /` with `--web` (docs/API.md "From a browser"): absent by default, served with its
/// headers when on. What it does in a browser is Tests/Web/test_demo.py's.
@Suite struct WebDemoTests {
    /// The `Content-Security-Policy` of an answer, as directive name → sources.
    static func policy(_ answer: HTTPAnswer) -> [String: [String]] {
        var directives: [String: [String]] = [:]
        for directive in (answer.headers["content-security-policy"] ?? "").split(separator: ";") {
            let words = directive.split(separator: " ").map(String.init)
            guard let name = words.first else { continue }
            directives[name] = Array(words.dropFirst())
        }
        return directives
    }

    /// The text of the page's one `<tag>` element.
    static func element(_ tag: String, in page: String) -> String? {
        guard let open = page.range(of: "<\(tag)>"), let close = page.range(of: "</\(tag)>", range: open.upperBound..<page.endIndex) else { return nil }
        return String(page[open.upperBound..<close.lowerBound])
    }

    static func hashSource(_ text: String) -> String {
        "'sha256-" + Data(SHA256.hash(data: Data(text.utf8))).base64EncodedString() + "'"
    }

    @Test func withoutWebThereIsNoPage() async throws {
        try await withTestServer { client in
            for method: HTTPMethod in [.GET, .HEAD, .POST] {
                let answer = try await client.request(method, "/")
                #expect(answer.status == 404, "\(method) /: \(answer.status) \(answer.text)")
                if method != .HEAD { expectError(answer, 404, .notFound, "\(method) /") }
            }
            #expect(try await client.request(.GET, "/?api=http://127.0.0.1:1").status == 404)
        }
    }

    @Test func withWebTheDemoPageIsServed() async throws {
        try await withTestServer(configure: { $0.webDemo = true }) { client in
            let answer = try await client.request(.GET, "/")
            #expect(answer.status == 200, "\(answer.status) \(answer.text)")
            #expect(answer.headers["content-type"] == "text/html; charset=utf-8")
            #expect(answer.headers["cache-control"] == "no-store")
            #expect(answer.headers["x-content-type-options"] == "nosniff")
            #expect(answer.headers["referrer-policy"] == "no-referrer")
            #expect(Self.corsHeaders(answer).isEmpty, "\(answer.headers)")
            let page = answer.text
            #expect(page.lowercased().hasPrefix("<!doctype html>"))
            #expect(answer.headers["x-frame-options"] == "DENY")
            #expect(page.contains("<main id=\"chats\">"))
            // Self-contained: nothing loaded from anywhere.
            for reference in ["src=", "href=", "@import", "url("] {
                #expect(!page.contains(reference), "the page refers to another resource: \(reference)")
            }
            // The policy allows exactly the page's own inline style and script, and connections to its origin.
            let script = try #require(Self.element("script", in: page))
            let style = try #require(Self.element("style", in: page))
            // The page is built on PigeonJS, which it imports from the server it talks to (its own origin here).
            #expect(script.contains("import(API + \"/sdk/pigeon.js\")") && script.contains("new SDK.PigeonClient("))
            let policy = Self.policy(answer)
            #expect(policy["default-src"] == ["'none'"])
            #expect(policy["script-src"] == [Self.hashSource(script), "'self'"], "\(policy)")
            #expect(policy["style-src"] == [Self.hashSource(style)], "\(policy)")
            #expect(policy["connect-src"] == ["'self'"], "\(policy)")
            // Images only from blob: URLs, the attachments the page fetched with its token.
            #expect(policy["img-src"] == ["blob:"], "\(policy)")
            #expect(policy["base-uri"] == ["'none'"] && policy["form-action"] == ["'none'"] && policy["frame-ancestors"] == ["'none'"])
            // An empty api is the page's own origin.
            #expect(Self.policy(try await client.request(.GET, "/?api="))["connect-src"] == ["'self'"])
        }
    }

    @Test func theApiParameterOpensConnectionsToThatOriginOnly() async throws {
        try await withTestServer(configure: { $0.webDemo = true }) { client in
            // connect-src, and the script sources beside the page's own hash (the SDK is imported from the api origin).
            let cases: [(String, [String], [String])] = [
                ("http://127.0.0.1:9000", ["'self'", "http://127.0.0.1:9000", "ws://127.0.0.1:9000"], ["'self'", "http://127.0.0.1:9000"]),
                ("http://127.0.0.1:9000/", ["'self'", "http://127.0.0.1:9000", "ws://127.0.0.1:9000"], ["'self'", "http://127.0.0.1:9000"]),
                ("HTTPS://Chat.Example.com", ["'self'", "https://chat.example.com", "wss://chat.example.com"], ["'self'", "https://chat.example.com"]),
                ("http://[::1]:8080", ["'self'", "http:", "ws:"], ["'self'", "http:"]),
            ]
            for (api, connect, scripts) in cases {
                let query = api.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let answer = try await client.request(.GET, "/?api=\(query)")
                #expect(answer.status == 200, "\(api): \(answer.status) \(answer.text)")
                #expect(Self.policy(answer)["connect-src"] == connect, "\(api): \(Self.policy(answer))")
                #expect(Self.policy(answer)["script-src"]?.dropFirst().map { $0 } == scripts, "\(api): \(Self.policy(answer))")
                #expect(Self.policy(answer)["img-src"] == ["blob:"], "\(api): \(Self.policy(answer))")
            }
            for api in ["ftp://example.com", "http://example.com/app", "http://example.com?x=1", "*", "example.com:80", "javascript:alert(1)", "http://user@example.com"] {
                let query = api.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let answer = try await client.request(.GET, "/?api=\(query)")
                expectError(answer, 400, .invalidRequest, api)
                #expect(answer.headers["content-security-policy"] == nil, "\(api)")
            }
        }
    }

    @Test func otherMethodsAreAnsweredLikeEveryRoutesOthers() async throws {
        try await withTestServer(configure: { $0.webDemo = true; $0.corsOrigins = ["https://chat.example.com"] }) { client in
            let head = try await client.request(.HEAD, "/")
            #expect(head.status == 405 && head.headers["allow"] == "GET" && head.body.isEmpty, "\(head.status) \(head.headers)")
            for method: HTTPMethod in [.POST, .PUT, .DELETE] {
                let answer = try await client.request(method, "/")
                expectError(answer, 405, .methodNotAllowed, "\(method) /")
                #expect(answer.headers["allow"] == "GET", "\(method) /: \(answer.headers)")
            }
            // `/` is not an API path: a preflight of it is refused like any method it does not serve, without CORS.
            let preflight = try await client.request(
                .OPTIONS, "/", headers: ["Origin": "https://chat.example.com", "Access-Control-Request-Method": "GET"])
            expectError(preflight, 405, .methodNotAllowed, "OPTIONS /")
            #expect(Self.corsHeaders(preflight).isEmpty)
            // Only `/` is the page.
            for path in ["/index.html", "/demo", "/v1"] {
                #expect(try await client.request(.GET, path).status == 404, "\(path)")
            }
        }
    }

    static func corsHeaders(_ answer: HTTPAnswer) -> [String: String] {
        answer.headers.filter { $0.key.hasPrefix("access-control-") }
    }
}

/// `--web` and `PIGEON_WEB` of the binary (child processes: the backends pass of scripts/test.sh, with the other
/// binary tests of BrowserServerProcessTests).
extension BrowserServerProcessTests {
    @Test func pigeonServerServesTheDemoPageWithWebOrPigeonWeb() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let starts: [(String, [String], [String: String], Int)] = [
            ("default", [], [:], 404),
            ("--web", ["--web"], [:], 200),
            ("PIGEON_WEB=1", [], ["PIGEON_WEB": "1"], 200),
            ("PIGEON_WEB=true", [], ["PIGEON_WEB": "true"], 200),
            ("PIGEON_WEB=0", [], ["PIGEON_WEB": "0"], 404),
        ]
        for (name, arguments, environment, status) in starts {
            let server = try await ServerProcess(dataDirectory: directory, arguments: arguments, environment: environment)
            let answer = try await server.client.request(.GET, "/")
            #expect(answer.status == status, "\(name): \(answer.status)")
            if status == 200 { #expect(answer.headers["content-type"] == "text/html; charset=utf-8", "\(name)") }
            try await server.stop(signal: SIGTERM)
        }
        let exit = try await Self.runUntilExit(arguments: [], environment: ["PIGEON_WEB": "maybe"], dataDirectory: directory)
        #expect(exit != nil && exit?.status != 0, "\(String(describing: exit))")
        #expect(exit?.output.contains("PIGEON_WEB must be 1 or 0") == true, "\(String(describing: exit))")
    }
}
