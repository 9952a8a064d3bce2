import Hummingbird
import NIOCore
import PigeonDomain
import PigeonProtocol

/// Authenticates the device behind a request's bearer token (`Authorization: Bearer …`, or `?access_token=` where
/// `allowQuery`: the stream routes, which a browser's `EventSource` cannot give a header) and puts it in the
/// request context; a missing or bad token is answered `401 unauthorized` before the route runs.
struct DeviceAuthenticationMiddleware: RouterMiddleware {
    typealias Context = PigeonRequestContext

    let authenticator: Authenticator
    var allowQuery = false

    func handle(_ request: Request, context: PigeonRequestContext, next: (Request, PigeonRequestContext) async throws -> Response) async throws -> Response {
        var context = context
        let authenticated = try await authenticator.authenticate(request, allowQuery: allowQuery)
        context.device = authenticated.device
        context.tokenIssuedAt = authenticated.issuedAt
        return try await next(request, context)
    }
}

/// The context of a route behind ``DeviceAuthenticationMiddleware``: the authenticated device, never absent.
struct DeviceRequestContext: ChildRequestContext {
    var coreContext: CoreRequestContextStorage
    let device: DeviceIdentity
    /// When the device's token was issued (a JWT's `iat`, seconds; `nil`: opaque or no `iat`).
    let tokenIssuedAt: Int64?
    /// The request's connection (``PigeonRequestContext/channel``).
    let channel: any Channel

    init(context: PigeonRequestContext) throws {
        guard let device = context.device else { throw PigeonError.unauthorized }
        self.coreContext = context.coreContext
        self.device = device
        self.tokenIssuedAt = context.tokenIssuedAt
        self.channel = context.channel
    }
}

extension Authenticator {
    /// The device behind a request's bearer token (`PigeonError.unauthorized` for a missing or bad one).
    func device(_ request: Request, allowQuery: Bool) async throws -> DeviceIdentity {
        try await authenticate(request, allowQuery: allowQuery).device
    }

    /// The device behind a request's bearer token, with the token's issue time.
    func authenticate(_ request: Request, allowQuery: Bool) async throws -> AuthenticatedDevice {
        let token = try Authenticator.token(
            authorization: request.headers[.authorization], queryToken: request.uri.queryParameters.get("access_token"),
            allowQuery: allowQuery)
        return try await authenticate(token: token)
    }
}
