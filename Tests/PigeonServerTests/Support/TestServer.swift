import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import PigeonDomain
import PigeonProtocol
@testable import PigeonServer
import PigeonTestSupport
import Testing

/// Runs a real Pigeon server (live HTTP on a free loopback port, a fresh data directory; the store and buffer of
/// ``TestBackend/current``, each test with a fresh database and key prefix) for the duration of `body`. With
/// `instance`, on those services instead (a restart on the same database), which the caller tears down.
func withTestServer<T: Sendable>(
    dataDirectory: String? = nil,
    backend kind: TestBackend = .current,
    instance: TestBackendInstance? = nil,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: @Sendable (PigeonTestClient) async throws -> T
) async throws -> T {
    let directory = dataDirectory ?? makeTemporaryDirectory()
    defer { if dataDirectory == nil { try? FileManager.default.removeItem(atPath: directory) } }
    let backend: TestBackendInstance
    if let instance { backend = instance } else { backend = try await TestBackendInstance.make(kind) }
    var configuration = ServerConfiguration()
    configuration.port = 0
    configuration.dataDirectory = directory
    configuration.durable = false
    configuration.keepAliveInterval = .seconds(1)
    backend.apply(to: &configuration)
    configure(&configuration)
    var logger = Logger(label: "pigeon-test")
    logger.logLevel = .warning
    let outcome: Result<T, any Error>
    do {
        outcome = .success(try await runTestServer(configuration: configuration, logger: logger, body))
    } catch {
        outcome = .failure(error)
    }
    if instance == nil { await backend.tearDown() }
    return try outcome.get()
}

private func runTestServer<T: Sendable>(
    configuration: ServerConfiguration, logger: Logger, _ body: @Sendable (PigeonTestClient) async throws -> T
) async throws -> T {
    let app = try await PigeonApplication.make(configuration: configuration, logger: logger)
    return try await app.test(.live) { client in
        // An HTTP client of its own, shut down before the server stops: a pooled connection that was opened but
        // never carried a request would otherwise keep the server's graceful shutdown waiting forever (the
        // upgradable HTTP/1 pipeline only reacts to shutdown once a connection has sent its first request).
        let port = client.port!
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        TestHTTPClients.register(http, port: port)
        let result: Result<T, any Error>
        do {
            result = .success(try await body(PigeonTestClient(port: port, http: http)))
        } catch {
            result = .failure(error)
        }
        TestHTTPClients.unregister(port: port)
        try? await http.shutdown()
        return try result.get()
    }
}

/// The HTTP client of each running test server, by port (the SSE test client finds it here).
enum TestHTTPClients {
    private static let clients = NIOLockedValueBox([Int: HTTPClient]())
    static func register(_ client: HTTPClient, port: Int) { clients.withLockedValue { $0[port] = client } }
    static func unregister(port: Int) { _ = clients.withLockedValue { $0.removeValue(forKey: port) } }
    /// The client for a server's port, or the shared one.
    static func client(for port: Int) -> HTTPClient { clients.withLockedValue { $0[port] } ?? .shared }
}

/// A raw HTTP answer.
struct HTTPAnswer: Sendable {
    var status: Int
    var headers: [String: String]
    var body: Data

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONDecoder().decode(T.self, from: body)
    }

    /// The error body's code, if this is an error answer.
    var errorCode: ErrorCode? { (try? decode(ErrorBody.self))?.error.code }
    var text: String { String(decoding: body, as: UTF8.self) }
    /// The body as a JSON object (to check which keys are present), or `nil`.
    var jsonObject: [String: Any]? { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] }
}

/// Expects an error answer of API.md: this status, `{"error": {"code": code, "message": <non-empty>}}` and a JSON
/// content type (and, for 429 and 503, a `Retry-After` of whole seconds ≥ 1).
func expectError(
    _ answer: HTTPAnswer, _ status: Int, _ code: ErrorCode, _ context: String = "",
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(answer.status == status, "\(context): status \(answer.status), body \(answer.text)", sourceLocation: sourceLocation)
    guard let body = try? answer.decode(ErrorBody.self) else {
        Issue.record("\(context): not an error body: \(answer.text)", sourceLocation: sourceLocation)
        return
    }
    #expect(body.error.code == code, "\(context): \(answer.text)", sourceLocation: sourceLocation)
    #expect(!body.error.message.isEmpty, "\(context): empty message", sourceLocation: sourceLocation)
    let keys = answer.jsonObject.map { Set($0.keys) }
    #expect(keys == ["error"], "\(context): \(answer.text)", sourceLocation: sourceLocation)
    #expect(answer.headers["content-type"]?.hasPrefix("application/json") == true, "\(context)", sourceLocation: sourceLocation)
    if status == 429 || status == 503 {
        let retryAfter = answer.headers["retry-after"].flatMap { Int($0) }
        #expect(retryAfter.map { $0 >= 1 } == true, "\(context): Retry-After \(answer.headers["retry-after"] ?? "missing")", sourceLocation: sourceLocation)
    }
}

/// A new lowercase UUID string.
func newId() -> String { UUID().uuidString.lowercased() }

/// Milliseconds since the epoch, now.
func nowMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// Whether `value` is a lowercase UUID string.
func isLowercaseUUID(_ value: String) -> Bool {
    value.count == 36 && UUID(uuidString: value) != nil && value == value.lowercased()
}

/// A registered device as the tests use it.
struct TestDevice: Sendable {
    var userId: String
    var deviceId: String
    var token: String
}

/// Talks to a test server over real HTTP, WebSocket and SSE.
struct PigeonTestClient: Sendable {
    let port: Int
    /// The client the requests go through (shut down when the test server stops).
    var http: HTTPClient = .shared
    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Any request; `body` is sent as is (so tests can send malformed JSON).
    func request(
        _ method: HTTPMethod, _ path: String, token: String? = nil, body: String? = nil, headers: [String: String] = [:],
        timeout: TimeAmount = .seconds(30)
    ) async throws -> HTTPAnswer {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await http.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 16 << 20)
        var responseHeaders: [String: String] = [:]
        for header in response.headers { responseHeaders[header.name.lowercased()] = header.value }
        return HTTPAnswer(status: Int(response.status.code), headers: responseHeaders, body: Data(bytes.readableBytesView))
    }

    func json<T: Encodable>(_ value: T) -> String {
        String(decoding: try! JSONEncoder().encode(value), as: UTF8.self)
    }

    /// Registers a device of `userId`; a user that has devices needs the token of one of them (`existing`).
    func register(_ userId: String, deviceName: String? = nil, existing: TestDevice? = nil) async throws -> TestDevice {
        let answer = try await request(
            .POST, "/v1/devices", token: existing?.token, body: json(RegisterDeviceRequest(userId: userId, deviceName: deviceName)))
        guard answer.status == 201 else { throw TestFailure("register \(userId): \(answer.status) \(answer.text)") }
        let registration = try answer.decode(DeviceRegistration.self)
        return TestDevice(userId: registration.userId, deviceId: registration.deviceId, token: registration.token)
    }

    func createConversation(_ device: TestDevice, members: [String], name: String? = nil) async throws -> Conversation {
        let answer = try await request(
            .POST, "/v1/conversations", token: device.token, body: json(CreateConversationRequest(members: members, name: name)))
        guard answer.status == 201 else { throw TestFailure("create conversation: \(answer.status) \(answer.text)") }
        return try answer.decode(Conversation.self)
    }

    /// Sends over HTTP; returns the raw answer.
    func send(
        _ device: TestDevice, to conversationId: String, body: String, clientMessageId: String = UUID().uuidString.lowercased(),
        type: String = "text", timeout: TimeAmount = .seconds(30)
    ) async throws -> HTTPAnswer {
        try await request(
            .POST, "/v1/conversations/\(conversationId)/messages", token: device.token,
            body: json(SendMessageRequest(clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: 1_763_700_000_000)),
            timeout: timeout)
    }

    /// Sends a raw JSON text as a message (malformed or unusual bodies).
    func sendRaw(_ device: TestDevice, to conversationId: String, json: String) async throws -> HTTPAnswer {
        try await request(.POST, "/v1/conversations/\(conversationId)/messages", token: device.token, body: json)
    }

    /// Sends and requires `202`; returns the accept answer.
    @discardableResult
    func sendAccepted(
        _ device: TestDevice, to conversationId: String, body: String, clientMessageId: String = UUID().uuidString.lowercased(),
        type: String = "text"
    ) async throws -> SendMessageResponse {
        let answer = try await send(device, to: conversationId, body: body, clientMessageId: clientMessageId, type: type)
        guard answer.status == 202 else { throw TestFailure("send \(body): \(answer.status) \(answer.text)") }
        return try answer.decode(SendMessageResponse.self)
    }

    /// `GET /v1/conversations/{id}`, required to be `200`.
    func conversation(_ device: TestDevice, _ conversationId: String) async throws -> Conversation {
        let answer = try await request(.GET, "/v1/conversations/\(conversationId)", token: device.token)
        guard answer.status == 200 else { throw TestFailure("get conversation: \(answer.status) \(answer.text)") }
        return try answer.decode(Conversation.self)
    }

    /// `GET /v1/conversations`, required to be `200`.
    func conversations(_ device: TestDevice) async throws -> [Conversation] {
        let answer = try await request(.GET, "/v1/conversations", token: device.token)
        guard answer.status == 200 else { throw TestFailure("list conversations: \(answer.status) \(answer.text)") }
        return try answer.decode(ConversationList.self).conversations
    }

    func typing(_ device: TestDevice, _ conversationId: String, active: Bool) async throws -> HTTPAnswer {
        try await request(.POST, "/v1/conversations/\(conversationId)/typing", token: device.token, body: json(TypingRequest(active: active)))
    }

    /// Polls until `count` messages are stored, and returns them (all of them, in seq order).
    func waitForCount(_ device: TestDevice, _ conversationId: String, _ count: Int, timeout: Duration = .seconds(20)) async throws -> [Message] {
        try await waitForMessages(device, conversationId, timeout: timeout) { $0.count >= count }
    }

    /// The `/metrics` text.
    func metricsText() async throws -> String {
        let answer = try await request(.GET, "/metrics")
        guard answer.status == 200 else { throw TestFailure("metrics: \(answer.status)") }
        return answer.text
    }

    /// The value of a Prometheus sample, `name` including any labels as written (e.g. `x{transport="ws"}`).
    func metric(_ name: String) async throws -> Double? {
        metricValue(name, in: try await metricsText())
    }

    func history(_ device: TestDevice, _ conversationId: String, query: String = "after=0&limit=500") async throws -> MessagePage {
        let answer = try await request(.GET, "/v1/conversations/\(conversationId)/messages?\(query)", token: device.token)
        guard answer.status == 200 else { throw TestFailure("history: \(answer.status) \(answer.text)") }
        return try answer.decode(MessagePage.self)
    }

    /// All stored messages of a conversation, following `hasMore`.
    func allMessages(_ device: TestDevice, _ conversationId: String) async throws -> [Message] {
        var messages: [Message] = []
        while true {
            let page = try await history(device, conversationId, query: "after=\(messages.last?.seq ?? 0)&limit=500")
            messages += page.messages
            if !page.hasMore { return messages }
        }
    }

    /// Polls until `condition` holds for the conversation's messages (processing is asynchronous).
    func waitForMessages(
        _ device: TestDevice, _ conversationId: String, timeout: Duration = .seconds(10), until condition: ([Message]) -> Bool
    ) async throws -> [Message] {
        let deadline = ContinuousClock.now + timeout
        while true {
            let messages = try await allMessages(device, conversationId)
            if condition(messages) || ContinuousClock.now > deadline { return messages }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func receipt(_ device: TestDevice, _ conversationId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> HTTPAnswer {
        try await request(
            .POST, "/v1/conversations/\(conversationId)/receipts", token: device.token,
            body: json(ReceiptRequest(kind: kind, upToSeq: upToSeq)))
    }

    func sync(_ device: TestDevice, cursor: String?, limit: Int = 100) async throws -> SyncResponse {
        var path = "/v1/sync?limit=\(limit)"
        if let cursor { path += "&cursor=\(cursor)" }
        let answer = try await request(.GET, path, token: device.token)
        guard answer.status == 200 else { throw TestFailure("sync: \(answer.status) \(answer.text)") }
        return try answer.decode(SyncResponse.self)
    }

    /// The device's current head cursor (a sync without cursor starts now).
    func headCursor(_ device: TestDevice) async throws -> String {
        try await sync(device, cursor: nil).cursor
    }
}

/// Cursors made from a real one (tests only: clients treat cursors as opaque).
enum TestCursor {
    /// `cursor` (either form) with every partition's offset changed by `change`.
    static func moved(_ cursor: String, _ change: (Int64) -> Int64) throws -> String {
        let partitions: Int
        if let dot = cursor.firstIndex(of: ".") {
            guard let bytes = Base64URL.decode(cursor[cursor.index(after: dot)...]) else { throw TestFailure("cursor \(cursor)") }
            partitions = bytes.count { $0 & 0x80 == 0 }
        } else {
            partitions = 1
        }
        guard var parsed = EventCursor(cursor, partitions: partitions) else { throw TestFailure("cursor \(cursor)") }
        parsed.position.offsets = parsed.position.offsets.map(change)
        return parsed.string
    }
}

/// The value of a Prometheus sample in exposition text; `name` includes labels as written, if any.
func metricValue(_ name: String, in text: String) -> Double? {
    for line in text.split(separator: "\n") where !line.hasPrefix("#") {
        guard line.hasPrefix(name) else { continue }
        let rest = line.dropFirst(name.count)
        guard rest.first == " " else { continue }
        return Double(rest.dropFirst().split(separator: " ").first ?? "")
    }
    return nil
}
