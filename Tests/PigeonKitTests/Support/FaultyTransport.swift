import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PigeonKit
import PigeonProtocol
import PigeonTestSupport

/// The real transport with faults a server cannot make on demand: frames dropped or withheld on the way in,
/// history fetches that fail, and the current stream closed at will.
final class FaultyTransport: PigeonTransport {
    let base: any PigeonTransport
    /// Returns `false` for a frame to drop.
    private let frameFilter = NIOLockedValueBox<@Sendable (ServerFrame) -> Bool>({ _ in true })
    private let failingFetches = NIOLockedValueBox(0)
    private let fetchCount = NIOLockedValueBox(0)
    private let connections = NIOLockedValueBox<[any EventStreamConnection]>([])
    private let listingCount = NIOLockedValueBox(0)
    private let conversationFetchCount = NIOLockedValueBox(0)
    private let operationObserver = NIOLockedValueBox<@Sendable (ClientOperation) -> Void>({ _ in })
    private let uploadFaults = NIOLockedValueBox<[String: [UploadFault]]>([:])
    private let uploadCounts = NIOLockedValueBox<[String: Int]>([:])
    /// The kinds of answer held back now (the server has applied them; they wait), and how many of each wait.
    private let heldAnswers = NIOLockedValueBox((holding: Set<HeldAnswer>(), held: [HeldAnswer: Int]()))

    /// Answers a test can hold back while the stream's events overtake them.
    enum HeldAnswer: Hashable, Sendable {
        case reaction
        case edit
    }

    init(base: any PigeonTransport) {
        self.base = base
    }

    func setFrameFilter(_ filter: @escaping @Sendable (ServerFrame) -> Bool) {
        frameFilter.withLockedValue { $0 = filter }
    }

    /// Calls `observer` with each operation (send, receipt, typing) as it is handed to a stream connection,
    /// whichever way it then goes out.
    func setOperationObserver(_ observer: @escaping @Sendable (ClientOperation) -> Void) {
        operationObserver.withLockedValue { $0 = observer }
    }

    fileprivate func record(_ operation: ClientOperation) {
        operationObserver.withLockedValue { $0 }(operation)
    }

    /// From now on a reaction's answer is held back once the server has given it, until ``releaseReactionAnswers()``:
    /// the stream's events overtake it.
    func holdReactionAnswers() { holdAnswers(.reaction) }
    func releaseReactionAnswers() { releaseAnswers(.reaction) }
    /// Reactions' answers the server gave that are held back now.
    var heldReactionAnswers: Int { heldAnswerCount(.reaction) }

    /// From now on an answer of `kind` is held back once the server has given it, until ``releaseAnswers(_:)``.
    func holdAnswers(_ kind: HeldAnswer) {
        heldAnswers.withLockedValue { _ = $0.holding.insert(kind) }
    }

    func releaseAnswers(_ kind: HeldAnswer) {
        heldAnswers.withLockedValue { _ = $0.holding.remove(kind) }
    }

    /// Answers of `kind` the server gave that are held back now.
    func heldAnswerCount(_ kind: HeldAnswer) -> Int { heldAnswers.withLockedValue { $0.held[kind] ?? 0 } }

    fileprivate func answered(_ kind: HeldAnswer) async {
        guard heldAnswers.withLockedValue({ state in
            guard state.holding.contains(kind) else { return false }
            state.held[kind, default: 0] += 1
            return true
        }) else { return }
        while heldAnswers.withLockedValue({ $0.holding.contains(kind) }) { try? await Task.sleep(for: .milliseconds(10)) }
        heldAnswers.withLockedValue { $0.held[kind, default: 0] -= 1 }
    }

    /// The next `count` history fetches fail with a network error.
    func failNextFetches(_ count: Int) {
        failingFetches.withLockedValue { $0 = count }
    }

    var fetches: Int { fetchCount.withLockedValue { $0 } }

    /// How often the conversation list was fetched (catch-ups).
    var conversationListings: Int { listingCount.withLockedValue { $0 } }

    /// Closes the open stream (the client sees the connection drop).
    func dropConnection() {
        for connection in connections.withLockedValue({ $0 }) { connection.close() }
    }

    /// Makes the open stream dead without closing it, like a suspended app's socket: nothing arrives on it any more
    /// and what the client writes on it is lost, while the client still takes it for open. Later streams work.
    func deafenConnection() {
        for case let connection as FilteredConnection in connections.withLockedValue({ $0 }) { connection.deafen() }
    }

    func openStream(kind: StreamKind, cursor: String?) async throws -> any EventStreamConnection {
        let connection = FilteredConnection(base: try await base.openStream(kind: kind, cursor: cursor), transport: self)
        connections.withLockedValue { $0 = [connection] }
        return connection
    }

    fileprivate func keep(_ frame: ServerFrame) -> Bool { frameFilter.withLockedValue { $0 }(frame) }

    func sendMessage(conversationId: String, _ request: SendMessageRequest) async throws -> SendMessageResponse {
        try await base.sendMessage(conversationId: conversationId, request)
    }

    func postReceipt(conversationId: String, _ request: ReceiptRequest) async throws -> ReceiptResponse {
        try await base.postReceipt(conversationId: conversationId, request)
    }

    func postTyping(conversationId: String, active: Bool) async throws {
        try await base.postTyping(conversationId: conversationId, active: active)
    }

    func createConversation(_ request: CreateConversationRequest) async throws -> Conversation {
        try await base.createConversation(request)
    }

    func conversations() async throws -> [Conversation] {
        listingCount.withLockedValue { $0 += 1 }
        return try await base.conversations()
    }

    func blockedUsers() async throws -> [BlockedUser] {
        try await base.blockedUsers()
    }

    func conversation(id: String) async throws -> Conversation {
        conversationFetchCount.withLockedValue { $0 += 1 }
        return try await base.conversation(id: id)
    }

    /// How often one conversation was read (`GET /v1/conversations/{id}`).
    var conversationFetches: Int { conversationFetchCount.withLockedValue { $0 } }

    func addMembers(conversationId: String, _ request: AddMembersRequest) async throws -> Conversation {
        try await base.addMembers(conversationId: conversationId, request)
    }

    func removeMember(conversationId: String, userId: String) async throws -> Conversation {
        try await base.removeMember(conversationId: conversationId, userId: userId)
    }

    func setRole(conversationId: String, userId: String, _ request: SetRoleRequest) async throws -> Conversation {
        try await base.setRole(conversationId: conversationId, userId: userId, request)
    }

    func renameConversation(conversationId: String, _ request: RenameConversationRequest) async throws -> Conversation {
        try await base.renameConversation(conversationId: conversationId, request)
    }

    func editMessage(conversationId: String, serverId: String, _ request: EditMessageRequest) async throws -> SendMessageResponse {
        let answer = try await base.editMessage(conversationId: conversationId, serverId: serverId, request)
        await answered(.edit)
        return answer
    }

    func deleteMessage(conversationId: String, serverId: String, _ request: DeleteMessageRequest) async throws -> SendMessageResponse {
        try await base.deleteMessage(conversationId: conversationId, serverId: serverId, request)
    }

    func react(conversationId: String, serverId: String, key: String, action: ReactionAction) async throws -> ReactionsResponse {
        let answer = try await base.react(conversationId: conversationId, serverId: serverId, key: key, action: action)
        await answered(.reaction)
        return answer
    }

    func reactionUsers(conversationId: String, serverId: String, key: String?, after: String?, limit: Int) async throws -> ReactionUsersPage {
        try await base.reactionUsers(conversationId: conversationId, serverId: serverId, key: key, after: after, limit: limit)
    }

    func threadPage(conversationId: String, rootServerId: String, after: Int64?, before: Int64?, limit: Int) async throws -> ThreadPage {
        try await base.threadPage(conversationId: conversationId, rootServerId: rootServerId, after: after, before: before, limit: limit)
    }

    /// What an upload of an attachment meets, in place of the server.
    enum UploadFault: Sendable {
        /// The connection breaks before the server answers (the upload is not made).
        case networkError
        /// The server answers with `status` and this error (`Retry-After: retryAfter` seconds, when given).
        case refused(status: Int, ErrorDetail, retryAfter: Int? = nil)
    }

    /// The next uploads of the attachment named `name` meet `faults`, one each, before the real ones go through.
    func failUploads(of name: String, _ faults: [UploadFault]) {
        uploadFaults.withLockedValue { $0[name, default: []] += faults }
    }

    /// How many uploads of the attachment named `name` were started (faulted ones included).
    func uploads(of name: String) -> Int {
        uploadCounts.withLockedValue { $0[name] ?? 0 }
    }

    func uploadAttachment(
        file path: String, size: Int64, name: String, contentType: String, onChunk: @escaping @Sendable (ByteBuffer) -> Void
    ) async throws -> AttachmentUpload {
        uploadCounts.withLockedValue { $0[name, default: 0] += 1 }
        let fault = uploadFaults.withLockedValue { faults -> UploadFault? in
            guard var pending = faults[name], !pending.isEmpty else { return nil }
            let first = pending.removeFirst()
            faults[name] = pending
            return first
        }
        switch fault {
        case .networkError?:
            throw PigeonClientError(.network, "injected: the connection broke during the upload")
        case .refused(let status, let error, let retryAfter)?:
            throw PigeonClientError(.server, error.message, serverError: error, httpStatus: status, retryAfterSeconds: retryAfter)
        case nil:
            return try await base.uploadAttachment(file: path, size: size, name: name, contentType: contentType, onChunk: onChunk)
        }
    }

    func messages(conversationId: String, after: Int64, limit: Int) async throws -> MessagePage {
        fetchCount.withLockedValue { $0 += 1 }
        let fail = failingFetches.withLockedValue { remaining -> Bool in
            guard remaining > 0 else { return false }
            remaining -= 1
            return true
        }
        if fail { throw PigeonClientError(.network, "injected fetch failure") }
        return try await base.messages(conversationId: conversationId, after: after, limit: limit)
    }
}

private final class FilteredConnection: EventStreamConnection {
    let base: any EventStreamConnection
    let transport: FaultyTransport
    private let deaf = NIOLockedValueBox(false)

    func deafen() { deaf.withLockedValue { $0 = true } }
    private var isDeaf: Bool { deaf.withLockedValue { $0 } }

    init(base: any EventStreamConnection, transport: FaultyTransport) {
        self.base = base
        self.transport = transport
    }

    func nextBatch() async throws -> [ServerFrame]? {
        while let batch = try await base.nextBatch() {
            let kept = isDeaf ? [] : batch.filter { transport.keep($0) }
            if !kept.isEmpty { return kept }
        }
        return nil
    }

    func send(_ request: SendMessageRequest, to conversationId: String) async -> MessageHandover {
        transport.record(.send(conversationId: conversationId, request))
        if isDeaf { return .queued }
        return await base.send(request, to: conversationId)
    }

    func edit(_ request: EditMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover {
        transport.record(.edit(conversationId: conversationId, serverId: serverId, request))
        if isDeaf { return .queued }
        let handover = await base.edit(request, of: serverId, in: conversationId)
        await transport.answered(.edit)
        return handover
    }

    func delete(_ request: DeleteMessageRequest, of serverId: String, in conversationId: String) async -> MessageHandover {
        transport.record(.delete(conversationId: conversationId, serverId: serverId, request))
        if isDeaf { return .queued }
        return await base.delete(request, of: serverId, in: conversationId)
    }

    func react(_ request: ReactRequest, in conversationId: String) async -> MessageHandover {
        transport.record(.react(conversationId: conversationId, request))
        if isDeaf { return .queued }
        let handover = await base.react(request, in: conversationId)
        await transport.answered(.reaction)
        return handover
    }

    func sendReceipt(_ request: ReceiptRequest, to conversationId: String) async throws {
        transport.record(.receipt(conversationId: conversationId, request))
        if isDeaf { return }
        try await base.sendReceipt(request, to: conversationId)
    }

    func sendTyping(_ active: Bool, in conversationId: String) async throws {
        transport.record(.typing(conversationId: conversationId, active: active))
        if isDeaf { return }
        try await base.sendTyping(active, in: conversationId)
    }

    func close() { base.close() }
}

extension PigeonClient.Configuration {
    /// The real transport for this configuration, as `PigeonClient(configuration:)` makes it.
    var realTransport: HTTPTransport {
        HTTPTransport(
            baseURL: serverURL, token: credentials.token, requestTimeout: requestTimeout, connectTimeout: connectTimeout,
            liveness: livenessInterval, logger: logger)
    }
}
