import PigeonProtocol

/// Which kind of event stream a connection uses.
public enum StreamKind: String, Sendable, Equatable {
    /// `GET /v1/ws`: events in, operations (send, receipt, typing) out on the same socket.
    case webSocket
    /// `GET /v1/events`: events in; operations go out as HTTP requests. The fallback where WebSockets are blocked.
    case serverSentEvents
}

/// An open event stream. Delivery contract: ``nextBatch()`` returns the frames in the order the server wrote
/// them, each once, and `nil` once the connection is closed (by either side, or because it went silent).
/// ``send(_:)`` only queues the operation for the socket: writing is not success, an operation's answer (an `ack`
/// or `error` frame) is the only evidence it arrived.
package protocol EventStreamConnection: Sendable {
    var kind: StreamKind { get }
    /// Every frame that arrived since the last call (at least one), waiting when there is none; `nil` at the end.
    func nextBatch() async throws -> [ServerFrame]?
    /// Queues an operation on the socket (WebSocket only; an SSE connection throws).
    func send(_ operation: ClientOperation) throws
    /// Closes the connection; ``nextBatch()`` then returns `nil`.
    func close()
}

/// How PigeonKit talks to the server: the REST calls of API.md and the event stream. ``HTTPTransport`` is the
/// real one; tests wrap it to inject faults (drop an ack, withhold events, fail a fetch).
package protocol PigeonTransport: Sendable {
    /// Opens the device's event stream, resuming after `cursor` (`nil`: live from now).
    func openStream(kind: StreamKind, cursor: String?) async throws -> any EventStreamConnection
    func sendMessage(conversationId: String, _ request: SendMessageRequest) async throws -> SendMessageResponse
    func postReceipt(conversationId: String, _ request: ReceiptRequest) async throws -> ReceiptResponse
    func postTyping(conversationId: String, active: Bool) async throws
    func createConversation(_ request: CreateConversationRequest) async throws -> Conversation
    func conversations() async throws -> [Conversation]
    func messages(conversationId: String, after: Int64, limit: Int) async throws -> MessagePage
}
