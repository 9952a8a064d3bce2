import NIOCore
import PigeonProtocol

/// Which kind of event stream a connection uses.
public enum StreamKind: String, Sendable, Equatable {
    /// `GET /v1/ws`: events in, operations (send, receipt, typing) out on the same socket.
    case webSocket
    /// `GET /v1/events`: events in; operations go out as HTTP requests. The fallback where WebSockets are blocked.
    case serverSentEvents
}

/// An open event stream, and the way out for the operations that go with it. Delivery contract: ``nextBatch()``
/// returns the frames in the order the server wrote them, each once, and `nil` once the connection is closed (by
/// either side, or because it went silent).
///
/// Operations go out the way the stream allows: a WebSocket queues them on the socket (writing is not success: the
/// answer, an `ack` or `error` frame, arrives on the stream and is the only evidence), a server-sent events stream
/// makes an HTTP request and has the answer at once. Callers never need to know which.
package protocol EventStreamConnection: Sendable {
    /// Every frame that arrived since the last call (at least one), waiting when there is none; `nil` at the end.
    func nextBatch() async throws -> [ServerFrame]?
    /// Hands a message to the server; ``MessageHandover`` says what became of it. Never throws: a failure is an
    /// outcome the outbox acts on.
    func send(_ request: SendMessageRequest, to conversationId: String) async -> MessageHandover
    /// Sends a delivered or read receipt. Returning is not proof it arrived: the server's `receipt` echo is.
    /// Throws when the connection is closed or the server refused it.
    func sendReceipt(_ request: ReceiptRequest, to conversationId: String) async throws
    /// Tells the other members this user is (or stopped) typing. Throws when the connection is closed or the
    /// server refused it.
    func sendTyping(_ active: Bool, in conversationId: String) async throws
    /// Hands an edit of the message `serverId` to the server, like a send (same answers, same idempotency).
    func edit(_ request: EditMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover
    /// Hands a deletion of the message `serverId` to the server, like a send.
    func delete(_ request: DeleteMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover
    /// Hands this user's reaction to the server (API.md 1.2): on a WebSocket the answer is an `ack` or `error` frame;
    /// over HTTP it is at once, the message's reactions after it (``MessageHandover/reacted(_:)``).
    func react(_ request: ReactRequest, in conversationId: String) async -> MessageHandover
    /// Closes the connection; ``nextBatch()`` then returns `nil`.
    func close()
}

/// What became of a message handed to ``EventStreamConnection/send(_:to:)``.
package enum MessageHandover: Sendable {
    /// Queued on the socket. Not success: the answer arrives on the stream as an `ack` or `error` frame, or not at
    /// all (the ACK timeout then counts the try).
    case queued
    /// Sent over HTTP and accepted: the server has the message.
    case accepted(SendMessageResponse)
    /// Sent over HTTP and refused, or no answer came (a network error, a timeout); the error says which, and
    /// whether a retry can help (``PigeonClientError/isTransient``).
    case failed(PigeonClientError)
    /// The connection was already closed: nothing left the device, so the try does not count.
    case connectionClosed
    /// A reaction sent over HTTP and applied: the message's reactions after it, as this user sees them.
    case reacted(ReactionsResponse)
}

/// How PigeonKit talks to the server: the REST calls of API.md and the event stream. ``HTTPTransport`` is the
/// real one; tests wrap it to inject faults (drop an ack, withhold events, fail a fetch).
package protocol PigeonTransport: Sendable {
    /// Opens the device's event stream, resuming after `cursor` (`nil`: live from now).
    func openStream(kind: StreamKind, cursor: String?) async throws -> any EventStreamConnection
    /// `POST /v1/conversations/{id}/messages`: the server's answer once it has the message (202, or 200 for a
    /// clientMessageId it already holds). Throws the server's refusal or a network error.
    func sendMessage(conversationId: String, _ request: SendMessageRequest) async throws -> SendMessageResponse
    /// `POST /v1/conversations/{id}/receipts`.
    func postReceipt(conversationId: String, _ request: ReceiptRequest) async throws -> ReceiptResponse
    /// `POST /v1/conversations/{id}/typing`.
    func postTyping(conversationId: String, active: Bool) async throws
    /// `POST /v1/conversations`: the conversation as the server created it.
    func createConversation(_ request: CreateConversationRequest) async throws -> Conversation
    /// Every conversation of the user, with its members' watermarks, following the server's pages; its invitations
    /// (API.md 1.2) included.
    func conversations() async throws -> [Conversation]
    /// `GET /v1/blocks`: the users this user blocked (API.md 1.2).
    func blockedUsers() async throws -> [BlockedUser]
    /// One page of a conversation's stored messages after seq `after`, ascending.
    func messages(conversationId: String, after: Int64, limit: Int) async throws -> MessagePage
    /// `GET /v1/conversations/{id}`: the conversation with its members now (404 when the caller is not a member).
    func conversation(id: String) async throws -> Conversation
    /// `POST /v1/conversations/{id}/members`: the conversation after the change.
    func addMembers(conversationId: String, _ request: AddMembersRequest) async throws -> Conversation
    /// `DELETE /v1/conversations/{id}/members/{userId}` (leaving, when `userId` is the caller's): the conversation
    /// after the change.
    func removeMember(conversationId: String, userId: String) async throws -> Conversation
    /// `PATCH /v1/conversations/{id}/members/{userId}`: the conversation after the change.
    func setRole(conversationId: String, userId: String, _ request: SetRoleRequest) async throws -> Conversation
    /// `PATCH /v1/conversations/{id}`: the conversation after the change.
    func renameConversation(conversationId: String, _ request: RenameConversationRequest) async throws -> Conversation
    /// `POST /v1/conversations/{id}/messages/{serverId}/edit`: the accept answer, as for a send.
    func editMessage(conversationId: String, serverId: String, _ request: EditMessageRequest) async throws -> SendMessageResponse
    /// `POST /v1/conversations/{id}/messages/{serverId}/delete`: the accept answer, as for a send.
    func deleteMessage(conversationId: String, serverId: String, _ request: DeleteMessageRequest) async throws -> SendMessageResponse
    /// `PUT` (add) or `DELETE` (remove) `/v1/conversations/{id}/messages/{serverId}/reactions/{key}`: the message's
    /// reactions after the change.
    func react(conversationId: String, serverId: String, key: String, action: ReactionAction) async throws -> ReactionsResponse
    /// `GET /v1/conversations/{id}/messages/{serverId}/reactions`: who reacted, a page at a time.
    func reactionUsers(conversationId: String, serverId: String, key: String?, after: String?, limit: Int) async throws -> ReactionUsersPage
    /// `GET /v1/conversations/{id}/threads/{serverId}/messages`: the thread's root and a page of its replies.
    func threadPage(conversationId: String, rootServerId: String, after: Int64?, before: Int64?, limit: Int) async throws -> ThreadPage
    /// `POST /v1/attachments?name=` (API.md 1.2): the `size` bytes of the file at `path`, streamed from it, never read
    /// whole; `onChunk` sees each chunk as it is handed to the connection. The server's answer once the upload is
    /// durable. Throws the server's refusal or a network error.
    func uploadAttachment(
        file path: String, size: Int64, name: String, contentType: String, onChunk: @escaping @Sendable (ByteBuffer) -> Void
    ) async throws -> AttachmentUpload
}
