import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import PigeonBenchSupport
import PigeonProtocol

/// The HTTP calls of the wire contract that the scenarios make, on AsyncHTTPClient.
struct PigeonAPI: Sendable {
    let http: HTTPClient
    /// `http://127.0.0.1:PORT`.
    let baseURL: String

    /// The answer to a send: accepted (the sender's ✓) or refused with an error code of the contract.
    enum SendOutcome: Sendable {
        case accepted
        case refused(code: String)
    }

    /// Whether `GET /readyz` answers 200.
    func isReady() async -> Bool {
        guard let response = try? await http.execute(HTTPClientRequest(url: baseURL + "/readyz"), timeout: .seconds(2)) else {
            return false
        }
        _ = try? await response.body.collect(upTo: 1 << 16)
        return response.status == .ok
    }

    /// `POST /v1/devices`: open registration.
    func registerDevice(userId: String, deviceName: String) async throws -> DeviceRegistration {
        let request = RegisterDeviceRequest(userId: userId, deviceName: deviceName)
        return try await call(
            .POST,
            "/v1/devices",
            token: nil,
            body: JSONEncoder().encodeAsByteBuffer(request, allocator: .init()),
            expecting: .created
        )
    }

    /// `PUT /v1/devices/current/push` as the device owning `token`.
    func registerPush(token: String, pushkey: String) async throws {
        let request = PushRegistrationRequest(kind: .other, appId: "bench.pigeon", pushkey: pushkey)
        let response = try await execute(.PUT, "/v1/devices/current/push", token: token, body: JSONEncoder().encodeAsByteBuffer(request, allocator: .init()))
        let answer = try await response.body.collect(upTo: 1 << 16)
        guard response.status == .noContent else {
            throw BenchError.unexpectedResponse(request: "PUT /v1/devices/current/push", status: response.status.code, body: String(buffer: answer))
        }
    }

    /// `POST /v1/conversations` as the device owning `token`.
    func createConversation(members: [String], token: String) async throws -> Conversation {
        let request = CreateConversationRequest(members: members)
        return try await call(
            .POST,
            "/v1/conversations",
            token: token,
            body: JSONEncoder().encodeAsByteBuffer(request, allocator: .init()),
            expecting: .created
        )
    }

    /// `GET /v1/conversations/{id}`.
    func conversation(id: String, token: String) async throws -> Conversation {
        try await call(.GET, "/v1/conversations/\(id)", token: token, body: nil, expecting: .ok)
    }

    /// `POST /v1/conversations/{id}/messages` with an encoded ``SendMessageRequest``.
    func sendMessage(_ body: ByteBuffer, conversationId: String, token: String) async throws -> SendOutcome {
        let response = try await execute(.POST, "/v1/conversations/\(conversationId)/messages", token: token, body: body)
        let answer = try await response.body.collect(upTo: 1 << 20)
        switch response.status {
        case .accepted, .ok:
            return .accepted
        default:
            let code = (try? JSONDecoder().decode(ErrorBody.self, from: answer))?.error.code.rawValue ?? "http-\(response.status.code)"
            return .refused(code: code)
        }
    }

    /// `POST /v1/conversations/{id}/messages`, answered with its accept answer (`202`).
    func send(_ request: SendMessageRequest, conversationId: String, token: String) async throws -> SendMessageResponse {
        try await call(
            .POST, "/v1/conversations/\(conversationId)/messages", token: token,
            body: JSONEncoder().encodeAsByteBuffer(request, allocator: .init()), expecting: .accepted)
    }

    /// `PUT /v1/conversations/{id}/messages/{serverId}/reactions/{key}` (`key` already percent-encoded).
    func react(conversationId: String, serverId: String, encodedKey: String, token: String) async throws -> ReactionsResponse {
        try await call(.PUT, "/v1/conversations/\(conversationId)/messages/\(serverId)/reactions/\(encodedKey)", token: token, body: nil, expecting: .ok)
    }

    /// `GET /v1/conversations/{id}/messages?…`.
    func history(conversationId: String, query: String, token: String) async throws -> MessagePage {
        try await call(.GET, "/v1/conversations/\(conversationId)/messages?\(query)", token: token, body: nil, expecting: .ok)
    }

    private func call<Response: Decodable>(
        _ method: HTTPMethod,
        _ path: String,
        token: String?,
        body: ByteBuffer?,
        expecting status: HTTPResponseStatus
    ) async throws -> Response {
        let response = try await execute(method, path, token: token, body: body)
        let answer = try await response.body.collect(upTo: 1 << 20)
        guard response.status == status else {
            throw BenchError.unexpectedResponse(request: "\(method) \(path)", status: response.status.code, body: String(buffer: answer))
        }
        do {
            return try JSONDecoder().decode(Response.self, from: answer)
        } catch {
            throw BenchError.unexpectedResponse(
                request: "\(method) \(path)",
                status: response.status.code,
                body: "\(String(buffer: answer)) (not a \(Response.self): \(error))"
            )
        }
    }

    private func execute(_ method: HTTPMethod, _ path: String, token: String?, body: ByteBuffer?) async throws -> HTTPClientResponse {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let token {
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
        }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(body)
        }
        return try await http.execute(request, timeout: .seconds(30))
    }
}

extension SendMessageRequest {
    /// A new `text` message with a fresh, time-ordered `clientMessageId` (as PigeonKit sends them).
    static func benchmark(body: String) -> SendMessageRequest {
        SendMessageRequest(
            clientMessageId: TimeOrderedID.make(),
            type: "text",
            body: body,
            clientTimestamp: Int64(Date().timeIntervalSince1970 * 1000)
        )
    }
}

/// A sender device and a receiver device of two different users, and the 1:1 conversation the sender created.
struct ConversationPair: Sendable {
    let sender: DeviceRegistration
    let receiver: DeviceRegistration
    let conversationId: String
}

extension PigeonAPI {
    /// Registers `count` users named `<prefix>-d<i>` with one device each, `concurrency` at a time.
    func registerDevices(count: Int, prefix: String, concurrency: Int) async throws -> [DeviceRegistration] {
        try await withThrowingTaskGroup(of: DeviceRegistration.self) { group in
            var devices: [DeviceRegistration] = []
            devices.reserveCapacity(count)
            for index in 0..<count {
                if index >= concurrency, let device = try await group.next() {
                    devices.append(device)
                }
                group.addTask { try await registerDevice(userId: "\(prefix)-d\(index)", deviceName: "bench stream") }
            }
            for try await device in group {
                devices.append(device)
            }
            return devices
        }
    }

    /// Registers `count` pairs of users named `<prefix>-s<i>` and `<prefix>-r<i>` and creates each pair's conversation.
    /// With `offlinePushMembers`, each conversation also has that many members `<prefix>-p<i>-<j>` that never connect
    /// and have a push registration: every stored message owes each of them a push.
    func makePairs(count: Int, prefix: String, offlinePushMembers: Int = 0) async throws -> [ConversationPair] {
        try await withThrowingTaskGroup(of: (Int, ConversationPair).self) { group in
            for index in 0..<count {
                group.addTask {
                    let sender = try await registerDevice(userId: "\(prefix)-s\(index)", deviceName: "bench sender")
                    let receiver = try await registerDevice(userId: "\(prefix)-r\(index)", deviceName: "bench receiver")
                    var offline: [String] = []
                    for member in 0..<offlinePushMembers {
                        let device = try await registerDevice(userId: "\(prefix)-p\(index)-\(member)", deviceName: "bench offline")
                        try await registerPush(token: device.token, pushkey: "bench-\(prefix)-\(index)-\(member)")
                        offline.append(device.userId)
                    }
                    let conversation = try await createConversation(members: [receiver.userId] + offline, token: sender.token)
                    return (index, ConversationPair(sender: sender, receiver: receiver, conversationId: conversation.id))
                }
            }
            var pairs: [ConversationPair?] = Array(repeating: nil, count: count)
            for try await (index, pair) in group {
                pairs[index] = pair
            }
            return pairs.compactMap { $0 }
        }
    }

    /// Waits until every conversation's `lastSeq` has reached its expected count of messages (each conversation of
    /// a scenario only holds that scenario's messages). Returns how long that took from now, or `nil` on timeout.
    func waitUntilStored(_ expected: [(pair: ConversationPair, messages: Int)], timeout: Duration) async throws -> Duration? {
        let start = ContinuousClock.now
        var remaining = expected.filter { $0.messages > 0 }
        let done = try await waitUntil(start + timeout, polling: .milliseconds(100)) {
            var stillRemaining: [(pair: ConversationPair, messages: Int)] = []
            for item in remaining {
                let conversation = try await conversation(id: item.pair.conversationId, token: item.pair.sender.token)
                if conversation.lastSeq < Int64(item.messages) {
                    stillRemaining.append(item)
                }
            }
            remaining = stillRemaining
            return remaining.isEmpty
        }
        return done ? .now - start : nil
    }
}
