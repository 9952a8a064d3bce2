/// How devices authenticate: opaque tokens issued at registration, and JWTs minted by the app's backend or an
/// identity provider.
///
/// JWT keys come from any combination of an HMAC secret, PEM public key files and a JWKS (file or URL). A token is
/// accepted when its `alg` is one of HS256/384/512, RS256/384/512, PS256/384/512, ES256, ES384 or EdDSA, a key of
/// that algorithm (the one its `kid` names, when it names one) verifies its signature, and its claims pass the
/// checks below; anything else is `401 unauthorized`.
public struct AuthConfiguration: Sendable {
    /// HMAC key (HS256/384/512) of the backend's JWTs; `nil`: none.
    public var jwtSecret: String?
    /// PEM files of public keys (RSA of 2048 bits or more, EC P-256 or P-384, Ed25519) that sign JWTs.
    public var jwtPublicKeyFiles: [String] = []
    /// A JWKS document: a file path or an `http(s)` URL (an identity provider's `jwks_uri`); `nil`: none.
    public var jwtJWKS: String?
    /// How often the JWKS is fetched again (a failed fetch keeps the last good key set).
    public var jwtJWKSRefreshInterval = Duration.seconds(300)
    /// A token naming a `kid` the key set does not hold makes the JWKS be fetched at once, at most once this
    /// often (so unknown kids cannot make the server hammer the identity provider).
    public var jwtJWKSMinimumRefreshInterval = Duration.seconds(30)
    /// How long one JWKS fetch may take.
    public var jwtJWKSFetchTimeout = Duration.seconds(10)
    /// The largest JWKS document accepted, in bytes.
    public var jwtJWKSMaxBytes = 1 << 20
    /// The claim holding the userId (a valid userId of API.md).
    public var jwtUserClaim = "sub"
    /// The claim holding the deviceId (1-128 printable ASCII characters without spaces).
    public var jwtDeviceClaim = "did"
    /// When set, a token's `iss` must equal it.
    public var jwtIssuer: String?
    /// When not empty, a token's `aud` (a string or an array) must contain one of these.
    public var jwtAudiences: [String] = []
    /// The longest a token may be valid: `exp - iat` (without `iat`: `exp - now`) above it is refused.
    public var jwtMaxLifetime = Duration.seconds(24 * 3600)
    /// Clock skew tolerated on `exp`, `nbf` and `iat`.
    public var jwtLeeway = Duration.seconds(30)

    public init() {}

    /// Whether any JWT key source is configured (JWTs are accepted, open registration defaults to off).
    public var hasJWTKeys: Bool { jwtSecret != nil || !jwtPublicKeyFiles.isEmpty || jwtJWKS != nil }
}
