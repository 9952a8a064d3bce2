import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import PigeonProtocol

/// The real transport: API.md's REST calls through PigeonKit's own HTTP/1.1 client (``HTTP1Client``), the event
/// stream over a WebSocket (``WebSocketConnector``, ``WebSocketSession``) or as server-sent events.
package struct HTTPTransport: PigeonTransport {
    let baseURL: String
    /// The server's address (`nil`: the URL is not `http`/`https` with a host, and every request fails saying so);
    /// requests go to its path (a server behind a path prefix keeps it) plus the API's.
    private let parsedServer: ServerAddress?
    let basePath: String
    let trust: TLSTrust
    let token: String
    let requestTimeout: Duration
    let connectTimeout: Duration
    /// WebSocket: interval of the client's pings (a missing pong closes the connection). SSE: the stream is
    /// closed when nothing (not even the server's keep-alive comment) arrived for twice this long.
    let liveness: Duration
    let logger: Logger
    var http: HTTP1Client { .shared }

    /// `trustedCertificates`: PEM certificates trusted besides the system's roots
    /// (``PigeonClient/Configuration-swift.struct/trustedCertificates``).
    package init(
        baseURL: URL, token: String, requestTimeout: Duration, connectTimeout: Duration, liveness: Duration, logger: Logger,
        trustedCertificates: [String] = []
    ) {
        var base = baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        self.baseURL = base
        self.parsedServer = ServerAddress(base)
        var path = parsedServer?.uri ?? ""
        if let query = path.firstIndex(of: "?") { path = String(path[..<query]) }
        while path.hasSuffix("/") { path.removeLast() }
        self.basePath = path
        self.trust = TLSTrust(additionalCertificatesPEM: trustedCertificates)
        self.token = token
        self.requestTimeout = requestTimeout
        self.connectTimeout = connectTimeout
        self.liveness = liveness
        self.logger = logger
    }

    // MARK: REST

    /// `POST /v1/devices` (open registration): no token for a user's first device, a token of one of its devices
    /// (`existingToken`) for another.
    static func registerDevice(
        baseURL: URL, _ request: RegisterDeviceRequest, existingToken: String?, timeout: Duration, trustedCertificates: [String] = []
    ) async throws -> DeviceRegistration {
        let transport = HTTPTransport(
            baseURL: baseURL, token: existingToken ?? "", requestTimeout: timeout, connectTimeout: timeout, liveness: .seconds(15),
            logger: Logger(label: "PigeonKit"), trustedCertificates: trustedCertificates)
        return try await transport.call(.POST, "/v1/devices", body: request, authorized: existingToken != nil)
    }

    package func sendMessage(conversationId: String, _ request: SendMessageRequest) async throws -> SendMessageResponse {
        try await call(.POST, "/v1/conversations/\(conversationId)/messages", body: request)
    }

    package func postReceipt(conversationId: String, _ request: ReceiptRequest) async throws -> ReceiptResponse {
        try await call(.POST, "/v1/conversations/\(conversationId)/receipts", body: request)
    }

    package func postTyping(conversationId: String, active: Bool) async throws {
        let _: Empty = try await call(.POST, "/v1/conversations/\(conversationId)/typing", body: TypingRequest(active: active))
    }

    package func createConversation(_ request: CreateConversationRequest) async throws -> Conversation {
        try await call(.POST, "/v1/conversations", body: request)
    }

    /// Every conversation of the user, following the server's pages (newest activity first), then its invitations
    /// (API.md 1.2: the default list holds the joined conversations only).
    package func conversations() async throws -> [Conversation] {
        let joined = try await conversationPages(query: "")
        let listed = Set(joined.map(\.id))
        return try await joined + invitedConversations().filter { !listed.contains($0.id) }
    }

    /// Every page of `GET /v1/conversations?<query>limit=500`.
    func conversationPages(query: String) async throws -> [Conversation] {
        var all: [Conversation] = []
        var before: String?
        repeat {
            var path = "/v1/conversations?\(query)limit=500"
            if let before {
                path += "&before=" + (before.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? before)
            }
            let page: ConversationList = try await call(.GET, path, body: Empty?.none)
            all += page.conversations
            // An older server answers one page without `hasMore`; a page without a cursor ends the walk too.
            before = page.hasMore ? page.nextBefore : nil
        } while before != nil
        return all
    }

    package func messages(conversationId: String, after: Int64, limit: Int) async throws -> MessagePage {
        try await call(.GET, "/v1/conversations/\(conversationId)/messages?after=\(after)&limit=\(limit)", body: Empty?.none)
    }

    struct Empty: Codable {}

    func call<Body: Encodable, Response: Decodable>(
        _ method: HTTPMethod, _ path: String, body: Body?, authorized: Bool = true
    ) async throws -> Response {
        var request = HTTP1Request(method: method, uri: basePath + path)
        if authorized { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(data: try JSONEncoder().encode(body)))
        }
        let (head, bytes) = try await execute(request, route: path)
        let status = Int(head.status.code)
        guard (200..<300).contains(status) else {
            throw Self.serverError(status: status, headers: head.headers, body: bytes)
        }
        if Response.self == Empty.self, bytes.readableBytes == 0 { return Empty() as! Response }
        do {
            return try JSONDecoder().decode(Response.self, from: bytes)
        } catch {
            throw PigeonClientError(.server, "\(method) \(path): undecodable answer (\(error))", httpStatus: status)
        }
    }

    /// Sends `request` and collects the answer (16 MiB at most) within the request timeout; a failure to get it is a
    /// ``PigeonClientError`` (network or timeout).
    func execute(_ request: HTTP1Request, route: String, limit: Int = 16 << 20) async throws -> (HTTPResponseHead, ByteBuffer) {
        do {
            return try await http.execute(request, on: address(), trust: trust, connectTimeout: connectTimeout, timeout: requestTimeout) { head, body in
                (head, try await body.collect(upTo: limit))
            }
        } catch {
            throw Self.networkError(error, method: request.method, path: route)
        }
    }

    /// The server's address; throws when the server URL is not `http` or `https` with a host.
    func address() throws -> ServerAddress {
        guard let parsedServer else { throw PigeonClientError(.network, "\(baseURL) is not an http or https URL") }
        return parsedServer
    }

    static func serverError(status: Int, headers: HTTPHeaders, body: ByteBuffer) -> PigeonClientError {
        let detail = (try? JSONDecoder().decode(ErrorBody.self, from: body))?.error
            ?? ErrorDetail(code: status >= 500 ? .internalError : .invalidRequest, message: "HTTP \(status)")
        return PigeonClientError(
            .server, detail.message, serverError: detail, httpStatus: status, retryAfterSeconds: headers.first(name: "Retry-After").flatMap { Int($0) })
    }

    static func networkError(_ error: any Error, method: HTTPMethod, path: String) -> PigeonClientError {
        if let error = error as? PigeonClientError { return error }
        if error is HTTP1Client.TimedOut || Self.isConnectTimeout(error) {
            return PigeonClientError(.timeout, "\(method) \(path): no answer in time")
        }
        return PigeonClientError(.network, "\(method) \(path): \(error)")
    }

    static func isConnectTimeout(_ error: any Error) -> Bool {
        if case ChannelError.connectTimeout = error { return true }
        return false
    }

    // MARK: Event stream

    package func openStream(kind: StreamKind, cursor: String?) async throws -> any EventStreamConnection {
        var query = ""
        if let cursor, let encoded = cursor.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed.subtracting(CharacterSet(charactersIn: "&=+"))) {
            query = "?cursor=" + encoded
        }
        switch kind {
        case .webSocket:
            return try await WebSocketEventStream.open(
                transport: self, url: baseURL + "/v1/ws" + query, timeout: connectTimeout, pingInterval: liveness)
        case .serverSentEvents:
            return try await ServerSentEventStream.open(
                transport: self, uri: basePath + "/v1/events" + query, timeout: connectTimeout, idleTimeout: liveness * 2)
        }
    }
}
