import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import PigeonProtocol
import PigeonServer

/// Runs a real Pigeon server (embedded mode, live HTTP on a free loopback port, a fresh data directory) for
/// the duration of `body`.
func withTestServer<T: Sendable>(
    dataDirectory: String? = nil,
    configure: (inout ServerConfiguration) -> Void = { _ in },
    _ body: @Sendable (PigeonTestClient) async throws -> T
) async throws -> T {
    let directory = dataDirectory ?? makeTemporaryDirectory()
    defer { if dataDirectory == nil { try? FileManager.default.removeItem(atPath: directory) } }
    var configuration = ServerConfiguration()
    configuration.port = 0
    configuration.dataDirectory = directory
    configuration.durable = false
    configuration.keepAliveInterval = .seconds(1)
    configure(&configuration)
    var logger = Logger(label: "pigeon-test")
    logger.logLevel = .warning
    let app = try PigeonApplication.make(configuration: configuration, logger: logger)
    return try await app.test(.live) { client in
        try await body(PigeonTestClient(port: client.port!))
    }
}

func makeTemporaryDirectory() -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-test-\(UUID().uuidString)").path
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
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
    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Any request; `body` is sent as is (so tests can send malformed JSON).
    func request(_ method: HTTPMethod, _ path: String, token: String? = nil, body: String? = nil, headers: [String: String] = [:])
        async throws -> HTTPAnswer
    {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 16 << 20)
        var responseHeaders: [String: String] = [:]
        for header in response.headers { responseHeaders[header.name.lowercased()] = header.value }
        return HTTPAnswer(status: Int(response.status.code), headers: responseHeaders, body: Data(bytes.readableBytesView))
    }

    func json<T: Encodable>(_ value: T) -> String {
        String(decoding: try! JSONEncoder().encode(value), as: UTF8.self)
    }

    func register(_ userId: String, deviceName: String? = nil) async throws -> TestDevice {
        let answer = try await request(.POST, "/v1/devices", body: json(RegisterDeviceRequest(userId: userId, deviceName: deviceName)))
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
        type: String = "text"
    ) async throws -> HTTPAnswer {
        try await request(
            .POST, "/v1/conversations/\(conversationId)/messages", token: device.token,
            body: json(SendMessageRequest(clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: 1_763_700_000_000)))
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

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
