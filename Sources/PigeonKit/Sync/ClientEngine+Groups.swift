import Foundation
import PigeonProtocol

extension ClientEngine {
    /// Reads again the conversations the database asks for (``LocalStore/conversationsToFetch()``): one a message
    /// arrived in before it was known (this user was added to it), or whose member changes came out of order.
    func fetchConversations() async throws {
        for id in try await store.conversationsToFetch() { try await refreshConversation(id) }
        try await learnInvitationSenders()
    }

    /// Invitations whose sender this device did not see (the change that added this user came before a `reset`, or
    /// before this database): the change is the message at the seq this user joined at, readable by an invited user.
    func learnInvitationSenders() async throws {
        for (id, joinedSeq) in try await store.invitationsWithoutSender() where joinedSeq > 0 {
            let page: MessagePage
            do {
                page = try await transport.messages(conversationId: id, after: joinedSeq - 1, limit: 1)
            } catch let error as PigeonClientError where error.serverError?.code == .notFound {
                try await markLeft(id)
                continue
            }
            var sender: String?
            if let message = page.messages.first, message.seq == joinedSeq, message.type == ServerMessageType.members,
                let change = try? JSONDecoder().decode(MembersChange.self, from: Data(message.body.utf8)), change.action == .added
            {
                sender = change.by
            }
            // Not found where it should be: its owner speaks for the conversation (and it is not asked again).
            if sender == nil { sender = try await store.conversation(id: id)?.members.first { $0.role == .owner }?.userId }
            guard let sender else { continue }
            if let conversation = try await store.setInvitationSender(conversationId: id, userId: sender) {
                hub.emit(.conversationUpdated(conversation))
            }
        }
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

    /// The server answered `404` for a conversation on this device: left, or, for an invitation, gone (declined on
    /// another device, or withdrawn).
    func markLeft(_ id: String) async throws {
        if try await store.removeInvitation(conversationId: id) {
            hub.emit(.invitationRemoved(conversationId: id))
        } else if let conversation = try await store.markLeft(conversationId: id) {
            hub.emit(.conversationUpdated(conversation))
        }
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
