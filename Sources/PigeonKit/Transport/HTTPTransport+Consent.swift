import Foundation
import PigeonProtocol

/// API.md 1.2's consent and blocking calls.
extension HTTPTransport {
    /// `GET /v1/conversations?membership=invited`, every page: the conversations this user is invited to. (A server
    /// before API 1.2 ignores the filter and lists the joined conversations again.)
    func invitedConversations() async throws -> [Conversation] {
        try await conversationPages(query: "membership=invited&")
    }

    /// `POST /v1/conversations/{id}/accept`: the conversation with this user joined.
    func acceptInvitation(conversationId: String) async throws -> Conversation {
        try await call(.POST, "/v1/conversations/\(conversationId)/accept", body: Empty?.none)
    }

    /// `POST /v1/conversations/{id}/decline` (`204`): this user leaves it.
    func declineInvitation(conversationId: String) async throws {
        let _: Empty = try await call(.POST, "/v1/conversations/\(conversationId)/decline", body: Empty?.none)
    }

    package func blockedUsers() async throws -> [BlockedUser] {
        let list: BlockList = try await call(.GET, "/v1/blocks", body: Empty?.none)
        return list.blocks.map { BlockedUser(userId: $0.userId, blockedAt: $0.at) }
    }

    /// `PUT /v1/blocks/{userId}` (`204`; blocking twice changes nothing).
    func block(_ userId: String) async throws {
        let _: Empty = try await call(.PUT, "/v1/blocks/\(Self.pathSegment(userId))", body: Empty?.none)
    }

    /// `DELETE /v1/blocks/{userId}` (`204`).
    func unblock(_ userId: String) async throws {
        let _: Empty = try await call(.DELETE, "/v1/blocks/\(Self.pathSegment(userId))", body: Empty?.none)
    }
}
