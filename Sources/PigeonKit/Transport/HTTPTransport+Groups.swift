import Foundation
import PigeonProtocol

/// API.md 1.1's member, name and message lifecycle calls.
extension HTTPTransport {
    package func conversation(id: String) async throws -> Conversation {
        try await call(.GET, "/v1/conversations/\(id)", body: Empty?.none)
    }

    package func addMembers(conversationId: String, _ request: AddMembersRequest) async throws -> Conversation {
        try await call(.POST, "/v1/conversations/\(conversationId)/members", body: request)
    }

    package func removeMember(conversationId: String, userId: String) async throws -> Conversation {
        try await call(.DELETE, "/v1/conversations/\(conversationId)/members/\(Self.pathSegment(userId))", body: Empty?.none)
    }

    package func setRole(conversationId: String, userId: String, _ request: SetRoleRequest) async throws -> Conversation {
        try await call(.PATCH, "/v1/conversations/\(conversationId)/members/\(Self.pathSegment(userId))", body: request)
    }

    package func renameConversation(conversationId: String, _ request: RenameConversationRequest) async throws -> Conversation {
        try await call(.PATCH, "/v1/conversations/\(conversationId)", body: request)
    }

    package func editMessage(conversationId: String, serverId: String, _ request: EditMessageRequest) async throws -> SendMessageResponse {
        try await call(.POST, "/v1/conversations/\(conversationId)/messages/\(serverId)/edit", body: request)
    }

    package func deleteMessage(conversationId: String, serverId: String, _ request: DeleteMessageRequest) async throws -> SendMessageResponse {
        try await call(.POST, "/v1/conversations/\(conversationId)/messages/\(serverId)/delete", body: request)
    }

    /// A user id as a path segment (`[A-Za-z0-9._@-]` needs no escaping; anything else is escaped, `/` included).
    static func pathSegment(_ value: String) -> String {
        value.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? value
    }
}
