import Foundation
import NIOHTTP1
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// API.md 1.1 "The web" and docs/API.md "From a browser": CORS on the `/v1` routes (preflight, every actual answer,
/// the SSE stream) and the WebSocket upgrade's `Origin` check, all off by default.
@Suite struct BrowserTests {
    static let page = "https://chat.example.com"
    static let localPage = "http://localhost:3000"
    static let stranger = "https://elsewhere.example.net"
    static let allowedHeaders: Set<String> = ["Authorization", "Content-Type", "Last-Event-ID"]

    /// The `access-control-*` headers of an answer.
    static func corsHeaders(_ headers: [String: String]) -> [String: String] {
        headers.filter { $0.key.hasPrefix("access-control-") }
    }

    static func preflight(_ client: PigeonTestClient, _ path: String, origin: String, method: String = "POST") async throws -> HTTPAnswer {
        try await client.request(
            .OPTIONS, path,
            headers: ["Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": "authorization, content-type"])
    }

    /// Expects a `204` preflight answer allowing `origin` (as `allowOrigin`) to use `methods`.
    static func expectPreflightAllowed(
        _ answer: HTTPAnswer, allowOrigin: String, methods: String, _ context: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(answer.status == 204, "\(context): \(answer.status) \(answer.text)", sourceLocation: sourceLocation)
        #expect(answer.headers["access-control-allow-origin"] == allowOrigin, "\(context): \(answer.headers)", sourceLocation: sourceLocation)
        #expect(answer.headers["access-control-allow-methods"] == methods, "\(context): \(answer.headers)", sourceLocation: sourceLocation)
        let headers = Set((answer.headers["access-control-allow-headers"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        #expect(headers == allowedHeaders, "\(context): \(answer.headers)", sourceLocation: sourceLocation)
        #expect(answer.headers["access-control-max-age"].flatMap { Int($0) }.map { $0 > 0 } == true, "\(context)", sourceLocation: sourceLocation)
        #expect(answer.headers["vary"]?.contains("Origin") == true, "\(context): \(answer.headers)", sourceLocation: sourceLocation)
        #expect(answer.headers["access-control-allow-credentials"] == nil, "\(context)", sourceLocation: sourceLocation)
        #expect(answer.body.isEmpty, "\(context): \(answer.text)", sourceLocation: sourceLocation)
    }

    /// The status of a WebSocket upgrade request with these extra headers, and the error body when it is refused.
    static func upgrade(
        _ client: PigeonTestClient, token: String, cursor: String? = nil, headers: [String: String]
    ) async throws -> (status: Int, error: ErrorBody?, head: String) {
        try await onOwnThread { [port = client.port] in
            let (socket, head) = try RawStreamSocket.webSocketUpgradeBlocking(
                port: port, token: token, cursor: cursor, headers: headers, receiveBuffer: 4_096)
            let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
            guard status != 101 else { return (status, nil, head) }
            let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            return (status, try? JSONDecoder().decode(ErrorBody.self, from: Data(socket.read(count: length))), head)
        }
    }

    // MARK: Off by default

    @Test func withoutCORSNoCORSHeaderIsEverSent() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let origin = ["Origin": Self.page]
            let preflight = try await Self.preflight(client, "/v1/conversations", origin: Self.page)
            expectError(preflight, 405, .methodNotAllowed, "a preflight without CORS")
            let answers: [(String, HTTPAnswer)] = [
                ("preflight", preflight),
                ("list", try await client.request(.GET, "/v1/conversations", token: alice.token, headers: origin)),
                ("send", try await client.request(
                    .POST, "/v1/conversations/\(conversation.id)/messages", token: alice.token,
                    body: client.json(SendMessageRequest(clientMessageId: newId(), type: "text", body: "hi", clientTimestamp: 1)), headers: origin)),
                ("401", try await client.request(.GET, "/v1/conversations", headers: origin)),
                ("404", try await client.request(.GET, "/v1/nothing", token: alice.token, headers: origin)),
            ]
            #expect(answers.map(\.1.status) == [405, 200, 202, 401, 404])
            for (name, answer) in answers {
                #expect(Self.corsHeaders(answer.headers).isEmpty, "\(name): \(answer.headers)")
                #expect(answer.headers["vary"] == nil, "\(name): \(answer.headers)")
            }
            let sse = try await TestSSE.open(port: client.port, token: nil, query: "access_token=\(bob.token)", headers: origin)
            #expect(sse.status.withLockedValue { $0 } == 200)
            #expect(Self.corsHeaders(sse.headers.withLockedValue { $0 }).isEmpty)
            await sse.close()
            // The WebSocket takes a page of any origin.
            #expect(try await Self.upgrade(client, token: bob.token, headers: origin).status == 101)
            #expect(try await Self.upgrade(client, token: bob.token, headers: ["Origin": Self.stranger]).status == 101)
        }
    }

    // MARK: Preflight

    @Test func aPreflightFromAnAllowedOriginIs204WithTheAllowHeaders() async throws {
        try await withTestServer(configure: { $0.corsOrigins = [Self.page, Self.localPage] }) { client in
            let id = newId()
            let paths: [(path: String, method: String, methods: String)] = [
                ("/v1/devices", "POST", "GET, POST"),
                ("/v1/devices/\(id)", "DELETE", "DELETE"),
                ("/v1/conversations", "POST", "GET, POST"),
                ("/v1/conversations/\(id)", "PATCH", "GET, PATCH"),
                ("/v1/conversations/\(id)/messages", "POST", "GET, POST"),
                ("/v1/conversations/\(id)/members/bob", "DELETE", "DELETE, PATCH"),
                ("/v1/sync", "GET", "GET"),
                ("/v1/events", "GET", "GET"),
            ]
            for origin in [Self.page, Self.localPage] {
                for (path, method, methods) in paths {
                    let answer = try await Self.preflight(client, path, origin: origin, method: method)
                    Self.expectPreflightAllowed(answer, allowOrigin: origin, methods: methods, "\(origin) \(method) \(path)")
                }
            }
            // A preflight from any other origin is refused, without a CORS header: the browser blocks the call.
            for origin in [Self.stranger, "https://chat.example.com.elsewhere.net", "http://chat.example.com", "https://chat.example.com:8443", "null"] {
                let answer = try await Self.preflight(client, "/v1/conversations", origin: origin)
                expectError(answer, 403, .forbidden, "preflight from \(origin)")
                #expect(Self.corsHeaders(answer.headers).isEmpty, "\(origin): \(answer.headers)")
            }
            // An unknown path stays 404; an OPTIONS that is not a preflight is a method like another: 405.
            expectError(try await Self.preflight(client, "/v1/nothing", origin: Self.page), 404, .notFound, "unknown path")
            let notPreflight = try await client.request(.OPTIONS, "/v1/conversations", headers: ["Origin": Self.page])
            expectError(notPreflight, 405, .methodNotAllowed, "OPTIONS without Access-Control-Request-Method")
            #expect(notPreflight.headers["allow"] == "GET, POST")
            #expect(notPreflight.headers["access-control-allow-origin"] == Self.page)
            let withoutOrigin = try await client.request(.OPTIONS, "/v1/conversations", headers: ["Access-Control-Request-Method": "POST"])
            expectError(withoutOrigin, 405, .methodNotAllowed, "OPTIONS without Origin")
            #expect(Self.corsHeaders(withoutOrigin.headers).isEmpty)
            // Outside /v1 there is no CORS.
            let health = try await Self.preflight(client, "/healthz", origin: Self.page, method: "GET")
            expectError(health, 405, .methodNotAllowed, "preflight of /healthz")
            #expect(Self.corsHeaders(health.headers).isEmpty)
        }
    }

    // MARK: Actual answers

    @Test func everyAnswerToAnAllowedOriginCarriesItAndExposesRetryAfter() async throws {
        try await withTestServer(configure: {
            $0.corsOrigins = [Self.page]
            $0.rateLimitPerDevice = 0.001
            $0.rateLimitBurst = 1
        }) { client in
            let alice = try await client.register("alice")
            _ = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            func send(_ headers: [String: String]) async throws -> HTTPAnswer {
                try await client.request(
                    .POST, "/v1/conversations/\(conversation.id)/messages", token: alice.token,
                    body: client.json(SendMessageRequest(clientMessageId: newId(), type: "text", body: "hi", clientTimestamp: 1)), headers: headers)
            }
            #expect(try await send([:]).status == 202)
            func answers(_ origin: String?) async throws -> [(String, HTTPAnswer)] {
                let headers = origin.map { ["Origin": $0] } ?? [:]
                return [
                    ("register", try await client.request(
                        .POST, "/v1/devices", body: "{\"userId\":\"u\(Int.random(in: 0..<1_000_000_000))\"}", headers: headers)),
                    ("list", try await client.request(.GET, "/v1/conversations", token: alice.token, headers: headers)),
                    ("429", try await send(headers)),
                    ("400", try await client.request(.POST, "/v1/conversations", token: alice.token, body: "{", headers: headers)),
                    ("401", try await client.request(.GET, "/v1/conversations", headers: headers)),
                    ("404", try await client.request(.GET, "/v1/conversations/\(newId())", token: alice.token, headers: headers)),
                    ("404 path", try await client.request(.GET, "/v1/nothing", token: alice.token, headers: headers)),
                    ("405", try await client.request(.DELETE, "/v1/conversations", token: alice.token, headers: headers)),
                ]
            }
            let statuses = [201, 200, 429, 400, 401, 404, 404, 405]
            let allowed = try await answers(Self.page)
            #expect(allowed.map(\.1.status) == statuses)
            for (name, answer) in allowed {
                #expect(answer.headers["access-control-allow-origin"] == Self.page, "\(name): \(answer.headers)")
                #expect(answer.headers["access-control-expose-headers"] == "Retry-After", "\(name): \(answer.headers)")
                #expect(answer.headers["vary"]?.contains("Origin") == true, "\(name): \(answer.headers)")
                #expect(answer.headers["access-control-allow-methods"] == nil, "\(name): only a preflight lists methods")
            }
            #expect(allowed[2].1.headers["retry-after"] != nil)
            // Another origin, and a request without Origin (not from a browser), are served alike, without CORS headers.
            for origin in [Self.stranger, nil] {
                let answers = try await answers(origin)
                #expect(answers.map(\.1.status) == statuses, "\(origin ?? "no origin")")
                for (name, answer) in answers {
                    #expect(Self.corsHeaders(answer.headers).isEmpty, "\(origin ?? "no origin") \(name): \(answer.headers)")
                    #expect(answer.headers["vary"]?.contains("Origin") == true, "\(origin ?? "no origin") \(name)")
                }
            }
            // Outside /v1 there is no CORS.
            let health = try await client.request(.GET, "/healthz", headers: ["Origin": Self.page])
            #expect(health.status == 200)
            #expect(Self.corsHeaders(health.headers).isEmpty)
        }
    }

    @Test func theEventStreamCarriesCORSHeaders() async throws {
        try await withTestServer(configure: { $0.corsOrigins = [Self.page] }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            // As an EventSource opens it: the token in the query, the page's Origin.
            let sse = try await TestSSE.open(port: client.port, token: nil, query: "access_token=\(bob.token)", headers: ["Origin": Self.page])
            let headers = sse.headers.withLockedValue { $0 }
            #expect(sse.status.withLockedValue { $0 } == 200)
            #expect(headers["content-type"]?.hasPrefix("text/event-stream") == true)
            #expect(headers["access-control-allow-origin"] == Self.page)
            #expect(headers["access-control-expose-headers"] == "Retry-After")
            let accepted = try await client.sendAccepted(alice, to: conversation.id, body: "to the page")
            #expect(await sse.first { $0.serverEvent?.newMessage != nil }?.serverEvent?.newMessage?.serverId == accepted.serverId)
            await sse.close()
            // Its errors too.
            let refused = try await client.request(.GET, "/v1/events?access_token=nope", headers: ["Origin": Self.page])
            expectError(refused, 401, .unauthorized, "SSE with a bad token")
            #expect(refused.headers["access-control-allow-origin"] == Self.page)
            // Another origin's stream is served without them.
            let other = try await TestSSE.open(port: client.port, token: nil, query: "access_token=\(bob.token)", headers: ["Origin": Self.stranger])
            #expect(other.status.withLockedValue { $0 } == 200)
            #expect(Self.corsHeaders(other.headers.withLockedValue { $0 }).isEmpty)
            await other.close()
        }
    }

    // MARK: WebSocket

    @Test func theWebSocketUpgradeChecksTheOriginAgainstTheSameList() async throws {
        try await withTestServer(configure: { $0.corsOrigins = [Self.page] }) { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            // The page's origin, and a client that sends no Origin (not a browser), are upgraded.
            #expect(try await Self.upgrade(client, token: bob.token, headers: ["Origin": Self.page]).status == 101)
            #expect(try await Self.upgrade(client, token: bob.token, headers: [:]).status == 101)
            // Another origin is refused with 403 and the error body, a good token or not, without CORS headers.
            for token in [bob.token, "not-a-token"] {
                for origin in [Self.stranger, "null", "http://chat.example.com"] {
                    let refused = try await Self.upgrade(client, token: token, headers: ["Origin": origin])
                    #expect(refused.status == 403, "\(origin): \(refused.head)")
                    #expect(refused.error?.error.code == .forbidden, "\(origin): \(refused.head)")
                    #expect(!refused.head.lowercased().contains("access-control-"), "\(origin): \(refused.head)")
                }
            }
            // An allowed origin's upgrade refused for its token is answered 401, as an HTTP call.
            let badToken = try await Self.upgrade(client, token: "not-a-token", headers: ["Origin": Self.page])
            #expect(badToken.status == 401 && badToken.error?.error.code == .unauthorized, "\(badToken.head)")
            // A plain request for it (no upgrade) from another origin is refused too.
            expectError(
                try await client.request(.GET, "/v1/ws?access_token=\(bob.token)", headers: ["Origin": Self.stranger]), 403, .forbidden,
                "GET /v1/ws from another origin")
            // A refused upgrade opened no stream: bob is offline to alice's next message.
            let cursor = try await client.headCursor(alice)
            try await client.sendAccepted(alice, to: conversation.id, body: "anyone?")
            let deadline = ContinuousClock.now + .seconds(10)
            var stored: MessageStoredEvent?
            while stored == nil, ContinuousClock.now < deadline {
                stored = try await client.sync(alice, cursor: cursor).events.compactMap(\.stored).first
                if stored == nil { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(stored?.recipientsOnline == 0)
        }
    }

    @Test func aPageOfTheServersOwnOriginOpensTheWebSocket() async throws {
        try await withTestServer(configure: { $0.corsOrigins = [Self.page] }) { client in
            let bob = try await client.register("bob")
            // A page the server serves itself (the web demo at `/`) is of the origin whose host and port are the
            // request's Host: never refused, whatever the list (http or https: behind a TLS proxy; any case).
            let own = "127.0.0.1:\(client.port)"
            for origin in ["http://\(own)", "https://\(own)", "HTTP://\(own)"] {
                let upgrade = try await Self.upgrade(client, token: bob.token, headers: ["Origin": origin])
                #expect(upgrade.status == 101, "\(origin): \(upgrade.head)")
            }
            // Another port or another name of the host is another origin.
            for origin in ["http://127.0.0.1:\(client.port + 1)", "http://127.0.0.1", "http://localhost:\(client.port)", "http://\(own)/"] {
                #expect(try await Self.upgrade(client, token: bob.token, headers: ["Origin": origin]).status == 403, "\(origin)")
            }
        }
    }

    // MARK: `*`

    @Test func aStarAllowsEveryOriginWithAStar() async throws {
        try await withTestServer(configure: { $0.corsOrigins = ["*"] }) { client in
            let bob = try await client.register("bob")
            for origin in [Self.page, Self.stranger, "null"] {
                Self.expectPreflightAllowed(
                    try await Self.preflight(client, "/v1/conversations", origin: origin), allowOrigin: "*", methods: "GET, POST", origin)
                let answer = try await client.request(.GET, "/v1/conversations", token: bob.token, headers: ["Origin": origin])
                #expect(answer.status == 200)
                #expect(answer.headers["access-control-allow-origin"] == "*", "\(origin)")
                #expect(answer.headers["access-control-expose-headers"] == "Retry-After", "\(origin)")
                #expect(try await Self.upgrade(client, token: bob.token, headers: ["Origin": origin]).status == 101, "\(origin)")
            }
            let noOrigin = try await client.request(.GET, "/v1/conversations", token: bob.token)
            #expect(Self.corsHeaders(noOrigin.headers).isEmpty)
        }
    }

    // MARK: Configuration

    @Test func aCORSOriginThatIsNotAnOriginIsRefusedAtStart() async throws {
        for origin in ["*", "https://chat.example.com", "http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173", "app+x.y-z://host"] {
            #expect(CORSPolicy.isValidOrigin(origin), "\(origin)")
        }
        let invalid = [
            "", "chat.example.com", "https://chat.example.com/", "https://chat.example.com/app", "https://user@chat.example.com",
            "https://chat.example.com:port", "https://chat.example.com:", "https://", "*.example.com", "https://chat example.com",
            "https://chat.example.com?x", "1http://chat.example.com", "null",
        ]
        for origin in invalid {
            #expect(!CORSPolicy.isValidOrigin(origin), "\(origin)")
            let directory = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            var configuration = ServerConfiguration()
            configuration.port = 0
            configuration.dataDirectory = directory
            configuration.corsOrigins = [Self.page, origin]
            do {
                _ = try await PigeonApplication.make(configuration: configuration, logger: .init(label: "test"))
                Issue.record("\(origin): the server started")
            } catch {
                #expect("\(error)".contains("is not an origin"), "\(origin): \(error)")
            }
        }
    }

}

/// The `pigeon-server` binary's CORS flags and environment. It starts child processes: it runs in the backends pass
/// (scripts/test.sh), apart from the suites that hold many sockets open, because Foundation's `Process.run` is not safe
/// in a process past 1,024 descriptors (seen: a crash in its memcpy during the embedded pass, a hang in `select()`).
@Suite struct BrowserServerProcessTests {
    @Test func pigeonServerTakesCORSOriginsFromItsFlagsOrTheEnvironment() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let starts: [(String, [String], [String: String])] = [
            ("flags", ["--cors-origin", BrowserTests.page, "--cors-origin", BrowserTests.localPage], [:]),
            ("environment", [], ["PIGEON_CORS_ORIGINS": "\(BrowserTests.page), \(BrowserTests.localPage)"]),
        ]
        for (name, arguments, environment) in starts {
            let server = try await ServerProcess(dataDirectory: directory, arguments: arguments, environment: environment)
            for origin in [BrowserTests.page, BrowserTests.localPage] {
                BrowserTests.expectPreflightAllowed(
                    try await BrowserTests.preflight(server.client, "/v1/conversations", origin: origin), allowOrigin: origin, methods: "GET, POST",
                    "\(name) \(origin)")
            }
            expectError(try await BrowserTests.preflight(server.client, "/v1/conversations", origin: BrowserTests.stranger), 403, .forbidden, name)
            try await server.stop(signal: SIGTERM)
        }
        // Neither: no CORS.
        let plain = try await ServerProcess(dataDirectory: directory, environment: ["PIGEON_CORS_ORIGINS": ""])
        expectError(try await BrowserTests.preflight(plain.client, "/v1/conversations", origin: BrowserTests.page), 405, .methodNotAllowed, "no CORS")
        try await plain.stop(signal: SIGTERM)
        // Not an origin: the server does not start, and says why.
        for (arguments, environment) in [(["--cors-origin", "https://chat.example.com/"], [String: String]()), ([], ["PIGEON_CORS_ORIGINS": "https://chat.example.com/app"])] {
            let exit = try await Self.runUntilExit(arguments: arguments, environment: environment, dataDirectory: directory)
            #expect(exit != nil && exit?.status != 0, "\(arguments) \(environment): \(String(describing: exit))")
            #expect(exit?.output.contains("is not an origin") == true, "\(String(describing: exit))")
        }
    }

    /// Runs `pigeon-server serve` with `arguments` (and `environment` beside this process's) until it exits: its exit
    /// status and output, or `nil` when it still runs after 30 s (then it is killed).
    static func runUntilExit(arguments: [String], environment: [String: String], dataDirectory: String) async throws -> (status: Int32, output: String)? {
        let logPath = dataDirectory + "/refused-\(UUID().uuidString.prefix(8)).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let process = try ChildProcess(
            [ServerProcess.binaryPath, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", dataDirectory] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, stdout: logPath)
        guard let status = try? await process.waitForExit(timeout: .seconds(30), what: "pigeon-server serve") else { return nil }
        return (status, (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
    }
}
