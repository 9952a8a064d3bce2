import Foundation
import PigeonProtocol

/// API.md 1.2's reactions and threads.
extension HTTPTransport {
    package func react(conversationId: String, serverId: String, key: String, action: ReactionAction) async throws -> ReactionsResponse {
        let path = "/v1/conversations/\(conversationId)/messages/\(serverId)/reactions/\(Self.keySegment(key))"
        return try await call(action == .add ? .PUT : .DELETE, path, body: Empty?.none)
    }

    package func reactionUsers(conversationId: String, serverId: String, key: String?, after: String?, limit: Int) async throws -> ReactionUsersPage {
        var path = "/v1/conversations/\(conversationId)/messages/\(serverId)/reactions?limit=\(limit)"
        if let key { path += "&key=" + Self.keySegment(key) }
        if let after { path += "&after=" + Self.keySegment(after) }
        return try await call(.GET, path, body: Empty?.none)
    }

    package func threadPage(conversationId: String, rootServerId: String, after: Int64?, before: Int64?, limit: Int) async throws -> ThreadPage {
        var path = "/v1/conversations/\(conversationId)/threads/\(rootServerId)/messages?limit=\(limit)"
        if let after { path += "&after=\(after)" }
        if let before { path += "&before=\(before)" }
        return try await call(.GET, path, body: Empty?.none)
    }

    /// A reaction key (an emoji, or a token with `:` and `+`) percent-encoded: everything but RFC 3986's unreserved
    /// characters is escaped, so the key is one path segment or query value whatever it holds.
    static func keySegment(_ key: String) -> String {
        key.addingPercentEncoding(withAllowedCharacters: unreserved) ?? key
    }

    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
