import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import PigeonServer

/// An app backend's before-send hook on loopback, for tests: a real Hummingbird server that records every call (its
/// raw body, whether its `Pigeon-Signature` verifies with the secret) and answers as the test says, per call.
final class BeforeSendHookServer: Sendable {
    /// One call as received.
    struct Call: Sendable {
        var body: Data
        var signatureValid: Bool
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
        var message: [String: Any] { json["message"] as? [String: Any] ?? [:] }
        var messageBody: String? { message["body"] as? String }
        var clientMessageId: String? { message["clientMessageId"] as? String }
        var isEdit: Bool? { json["edit"] as? Bool }
    }

    /// How the hook answers a call.
    enum Reply: Sendable {
        case allow
        case reject(String)
        case replace(String)
        /// A raw answer: this status and body.
        case raw(Int, String)
        /// Answers `allow` after this long (past the server's timeout: a failure).
        case after(Duration, String)
    }

    static let secret = "hook-secret-for-tests-0123456789"

    private let calls = NIOLockedValueBox([Call]())
    /// Calls held until `count` are held at once (``holdUntil(_:)``), then answered newest first.
    private let held = NIOLockedValueBox((count: 0, waiting: [CheckedContinuation<Void, Never>]()))
    private let rule = NIOLockedValueBox<@Sendable (Call) -> Reply>({ _ in .allow })

    /// Answers every later call with `reply(call)`.
    func respond(_ reply: @escaping @Sendable (Call) -> Reply) {
        rule.withLockedValue { $0 = reply }
    }

    var received: [Call] { calls.withLockedValue { $0 } }

    /// Holds every later call unanswered until `count` calls are held at once, then answers them, the last one first.
    /// A server that asked one call at a time would never get there.
    func holdUntil(_ count: Int) {
        held.withLockedValue { $0 = (count, []) }
    }

    private func hold() async {
        await withCheckedContinuation { continuation in
            let release = held.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                guard state.count > 0 else { return [continuation] }
                state.waiting.append(continuation)
                guard state.waiting.count >= state.count else { return [] }
                defer { state = (0, []) }
                return state.waiting.reversed()
            }
            for waiter in release { waiter.resume() }
        }
    }

    /// Runs a hook server on a free loopback port for the duration of `body`, which gets it and its URL.
    static func with<T: Sendable>(_ body: @Sendable (BeforeSendHookServer, String) async throws -> T) async throws -> T {
        let hook = BeforeSendHookServer()
        let router = Router()
        router.post("/hook") { request, context -> Response in
            let bytes = try await request.body.collect(upTo: 1 << 20)
            let data = Data(bytes.readableBytesView)
            let signature = request.headers[HTTPField.Name("Pigeon-Signature")!] ?? ""
            let call = Call(body: data, signatureValid: RequestSignature.verify(header: signature, secret: secret, body: data))
            hook.calls.withLockedValue { $0.append(call) }
            await hook.hold()
            let reply = hook.rule.withLockedValue { $0 }(call)
            func json(_ status: HTTPResponse.Status, _ text: String) -> Response {
                Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
            }
            func encoded(_ object: [String: String]) -> String {
                String(decoding: try! JSONSerialization.data(withJSONObject: object), as: UTF8.self)
            }
            switch reply {
            case .allow: return json(.ok, #"{"action":"allow"}"#)
            case .reject(let reason): return json(.ok, encoded(["action": "reject", "reason": reason]))
            case .replace(let body): return json(.ok, encoded(["action": "replace", "body": body]))
            case .raw(let status, let text): return json(.init(code: status), text)
            case .after(let delay, let text):
                try? await Task.sleep(for: delay)
                return json(.ok, text)
            }
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        return try await app.test(.live) { client in
            try await body(hook, "http://127.0.0.1:\(client.port!)/hook")
        }
    }
}
