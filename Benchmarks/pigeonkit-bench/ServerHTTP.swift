import Foundation
import PigeonBenchSupport

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The few raw API.md calls the benchmark makes beside PigeonKit, through Foundation's URLSession: filling a
/// conversation fast (PigeonKit sends one message per conversation at a time) and reading what the server stored.
struct ServerHTTP: Sendable {
    let baseURL: URL
    private let session: URLSession

    init(baseURL: URL, connections: Int) {
        self.baseURL = baseURL
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = connections
        configuration.timeoutIntervalForRequest = 30
        session = URLSession(configuration: configuration)
    }

    func invalidate() {
        session.invalidateAndCancel()
    }

    /// Polls `GET /readyz` until it answers 200.
    static func waitUntilReady(_ baseURL: URL, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        while true {
            if let (_, response) = try? await session.data(from: baseURL.appendingPathComponent("readyz")),
                (response as? HTTPURLResponse)?.statusCode == 200
            {
                return
            }
            guard ContinuousClock.now < deadline else { throw BenchError("the server at \(baseURL) did not become ready") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    private struct SendMessage: Encodable {
        var clientMessageId: String
        var type: String
        var body: String
        var clientTimestamp: Int64
    }

    private struct ConversationSummary: Decodable {
        var lastSeq: Int64
    }

    /// Sends `count` text messages into a conversation with `POST …/messages`, `concurrency` requests in flight;
    /// every one must be accepted (202).
    func send(count: Int, bodyBytes: Int, to conversationId: String, token: String, concurrency: Int) async throws {
        let url = baseURL.appendingPathComponent("v1/conversations/\(conversationId)/messages")
        let encoder = JSONEncoder()
        func request(_ index: Int) throws -> URLRequest {
            var request = URLRequest(url: url)
            request.httpMethod = "POST"
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = try encoder.encode(SendMessage(
                clientMessageId: UUID().uuidString.lowercased(), type: "text", body: MessageBody.text(index: index, bytes: bodyBytes),
                clientTimestamp: Int64(Date().timeIntervalSince1970 * 1000)))
            return request
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            var next = 0
            func addSend(_ group: inout ThrowingTaskGroup<Void, any Error>) throws {
                let request = try request(next)
                next += 1
                group.addTask {
                    let (data, response) = try await session.data(for: request)
                    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                    guard status == 202 else {
                        throw BenchError("POST \(url.path): HTTP \(status) \(String(decoding: data, as: UTF8.self))")
                    }
                }
            }
            while next < min(concurrency, count) { try addSend(&group) }
            while try await group.next() != nil {
                if next < count { try addSend(&group) }
            }
        }
    }

    /// The conversation's last stored seq (`GET /v1/conversations/{id}`).
    func lastSeq(of conversationId: String, token: String) async throws -> Int64 {
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/conversations/\(conversationId)"))
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let (data, response) = try await session.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard status == 200 else { throw BenchError("GET conversation: HTTP \(status) \(String(decoding: data, as: UTF8.self))") }
        return try JSONDecoder().decode(ConversationSummary.self, from: data).lastSeq
    }

    /// Polls until the server has stored `count` messages in the conversation.
    func waitUntilStored(_ count: Int, in conversationId: String, token: String, timeout: Duration) async throws {
        let deadline = ContinuousClock.now + timeout
        while try await lastSeq(of: conversationId, token: token) < count {
            guard ContinuousClock.now < deadline else { throw BenchError("the server did not store \(count) messages in time") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}
