import HTTPTypes
import Hummingbird
import Logging
import PigeonContract
import PigeonDomain
import PigeonProtocol

/// The server's HTTP responder: the router, behind the answers a router cannot give, because it only knows the
/// routes a request matches.
///
/// - A known path with a method it does not serve is answered `405 method_not_allowed` with `Allow` listing the
///   path's methods (``RouteMethods``), before any authentication. An unknown path stays the router's `404`.
/// - With CORS configured (``CORSPolicy``), a preflight of a known `/v1` path or contract document
///   (``ContractDocument``) is answered here (`204`, or `403` for an origin not allowed), and every answer of such a
///   path gets its CORS headers (errors and the SSE stream included). Without CORS `OPTIONS` is a method like any other: `405`. (A request for the WebSocket from an origin
///   not allowed never gets here: ``ConnectionExchangeObserver`` refuses it.)
public struct PigeonResponder: HTTPResponder {
    public typealias Context = PigeonRequestContext

    let router: RouterResponder<PigeonRequestContext>
    let routeMethods: RouteMethods
    let cors: CORSPolicy?

    /// Every route the router serves, as (path pattern, method).
    var registeredRoutes: [(path: String, method: HTTPRequest.Method)] { routeMethods.registered }

    public func respond(to request: Request, context: PigeonRequestContext) async throws -> Response {
        let path = request.uri.path
        guard let cors, path == "/v1" || path.hasPrefix("/v1/") || ContractDocument.isDocumentPath(path) else {
            return try await answer(request, context: context, path: path)
        }
        let origin = request.headers[.origin]
        if request.method == .options, let origin, request.headers[.accessControlRequestMethod] != nil,
            let methods = routeMethods.methods(for: path)
        {
            return cors.preflight(methods: methods, origin: origin)
        }
        var response = try await answer(request, context: context, path: path)
        cors.decorate(&response, origin: origin)
        return response
    }

    /// The answer without CORS: `405` for a known path's other methods, else the router's.
    private func answer(_ request: Request, context: PigeonRequestContext, path: String) async throws -> Response {
        guard let methods = routeMethods.methods(for: path), !methods.contains(request.method) else {
            do {
                return try await router.respond(to: request, context: context)
            } catch {
                // The router's error middleware answers every route's errors; this is for what escapes it.
                return JSONBody.errorResponse(WireError.of(error, logger: context.logger, what: "request \(request.method) \(path)"))
            }
        }
        let allow = methods.map(\.rawValue).joined(separator: ", ")
        var response = JSONBody.errorResponse(
            PigeonError(.methodNotAllowed, "\(request.method.rawValue.prefix(32)) is not allowed on \(path.prefix(200)); allowed: \(allow)"))
        response.headers[.allow] = allow
        // An answer to HEAD has no body (its Content-Length still tells the body's).
        return request.method == .head ? response.createHeadResponse() : response
    }
}
