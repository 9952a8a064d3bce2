import Crypto
import Hummingbird
import NIOCore
import PigeonDomain
import PigeonProtocol

/// The static credentials of the server API (`--service-token`, and `--service-token-previous` during a rotation),
/// kept as SHA-256 digests and compared in constant time: how long a comparison takes tells nothing of the token.
struct ServiceCredential: Sendable {
    private let digests: [[UInt8]]

    init(tokens: [String]) {
        self.digests = tokens.map { Array(SHA256.hash(data: Array($0.utf8))) }
    }

    /// Whether `token` is one of the configured tokens. Every digest is compared in full, whichever matches.
    func matches(_ token: String) -> Bool {
        let digest = Array(SHA256.hash(data: Array(token.utf8)))
        var matched = false
        for candidate in digests {
            var difference: UInt8 = 0
            for (left, right) in zip(candidate, digest) { difference |= left ^ right }
            matched = matched || difference == 0
        }
        return matched
    }
}

extension Authenticator {
    /// Checks that `token` is a service credential of the server API (API.md 1.2): one of the static tokens, or a
    /// valid JWT with `"pigeon_role": "service"` and no device claim. A token of a device (opaque, or a JWT naming a
    /// device) is `403 forbidden`; anything else, `401 unauthorized`.
    func authorizeService(token: String, credential: ServiceCredential) async throws {
        guard !token.isEmpty, token.utf8.count <= 4096 else { throw PigeonError.unauthorized }
        if credential.matches(token) { return }
        if let jwt, !token.hasPrefix("pgn_"), (try? await jwt.isService(token)) == true { return }
        do {
            _ = try await authenticate(token: token)
        } catch {
            throw PigeonError.unauthorized
        }
        throw PigeonError(.forbidden, "a device's token cannot call the server API; use the service credential")
    }
}

/// Answers `401` or `403` before a server API route runs unless the request's `Authorization: Bearer` is a service
/// credential (``Authenticator/authorizeService(token:credential:)``). Never `access_token`: the server API is
/// called by the app's backend, which can set headers.
struct ServiceAuthenticationMiddleware: RouterMiddleware {
    typealias Context = ServiceRequestContext

    let authenticator: Authenticator
    let credential: ServiceCredential

    func handle(_ request: Request, context: ServiceRequestContext, next: (Request, ServiceRequestContext) async throws -> Response) async throws
        -> Response
    {
        let token = try Authenticator.token(authorization: request.headers[.authorization], queryToken: nil, allowQuery: false)
        try await authenticator.authorizeService(token: token, credential: credential)
        return try await next(request, context)
    }
}

/// The context of a server API route; its routes are reached only through ``ServiceAuthenticationMiddleware``.
struct ServiceRequestContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage

    init(context: PigeonRequestContext) throws {
        self.coreContext = context.coreContext
    }
}
