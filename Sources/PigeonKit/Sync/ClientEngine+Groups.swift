import PigeonProtocol

extension ClientEngine {
    /// Reads again the conversations the database asks for (``LocalStore/conversationsToFetch()``): one a message
    /// arrived in before it was known (this user was added to it), or whose member changes came out of order.
    func fetchConversations() async throws {
        for id in try await store.conversationsToFetch() { try await refreshConversation(id) }
    }

    /// `GET /v1/conversations/{id}`, applied; a `404` means this user is no longer a member: the conversation is
    /// kept, marked left. Whether it is still a member.
    @discardableResult
    func refreshConversation(_ id: String) async throws -> Bool {
        do {
            try await apply([.conversations([try await transport.conversation(id: id)])])
            return true
        } catch let error as PigeonClientError where error.serverError?.code == .notFound {
            try await markLeft(id)
            return false
        }
    }

    /// The server answered `404` for a conversation on this device.
    func markLeft(_ id: String) async throws {
        if let conversation = try await store.markLeft(conversationId: id) { hub.emit(.conversationUpdated(conversation)) }
    }

    /// Conversations this device takes itself to be a member of but the server's list leaves out: asked one by one
    /// (a conversation created while the list was read is there; one this user was removed from answers `404`).
    func confirmMemberships(listed: [Conversation]) async throws {
        let listedIds = Set(listed.map(\.id))
        for id in try await store.memberConversationIds() where !listedIds.contains(id) { try await refreshConversation(id) }
    }

    /// A member or name call: the server's answer (the conversation after the change) is applied before it returns.
    /// Errors say what went wrong in the terms of the call: `403` ``PigeonClientError/Code-swift.struct/forbidden``,
    /// `400` ``PigeonClientError/Code-swift.struct/invalidArgument``, and for a `404` the conversation is read again:
    /// ``PigeonClientError/Code-swift.struct/notMember`` when this user is no longer a member, else
    /// ``PigeonClientError/Code-swift.struct/invalidArgument`` (the user named is not a member).
    func changeConversation(_ id: String, _ call: () async throws -> Conversation) async throws -> Conversation {
        do {
            let conversation = try await call()
            try await apply([.conversations([conversation])])
            return conversation
        } catch let error as PigeonClientError where error.code == .server && error.serverError != nil {
            let detail = error.serverError!
            switch detail.code {
            case .forbidden:
                throw PigeonClientError(.forbidden, detail.message, serverError: detail, httpStatus: error.httpStatus)
            case .invalidRequest:
                throw PigeonClientError(.invalidArgument, detail.message, serverError: detail, httpStatus: error.httpStatus)
            case .notFound:
                guard try await refreshConversation(id) else {
                    throw PigeonClientError(
                        .notMember, "\(settings.credentials.userId) is not a member of conversation \(id)", serverError: detail, httpStatus: error.httpStatus)
                }
                throw PigeonClientError(.invalidArgument, detail.message, serverError: detail, httpStatus: error.httpStatus)
            default:
                throw error
            }
        }
    }
}
