/// How devices authenticate: opaque tokens issued at registration, and JWTs minted by the app's backend.
public struct AuthConfiguration: Sendable {
    /// HMAC key (HS256/384/512) of the backend's JWTs; `nil`: none.
    public var jwtSecret: String?

    public init() {}

    /// Whether any JWT key source is configured (JWTs are accepted, open registration defaults to off).
    public var hasJWTKeys: Bool { jwtSecret != nil }
}
