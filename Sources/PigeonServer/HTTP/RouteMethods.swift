import HTTPTypes
import Hummingbird

/// The methods the router serves on each of its paths, read from the router once every route is added: what a
/// request of another method on a known path is told (`405 method_not_allowed` with `Allow`), and what a CORS
/// preflight of the path lists.
///
/// A path is known when one of the router's route patterns matches it segment by segment (a literal segment
/// itself, a captured one any segment; empty segments are ignored, as the router does). Its methods are those of
/// every matching pattern, so a request the router would serve is never refused here.
struct RouteMethods: Sendable {
    private struct Route: Sendable {
        var components: [RouterPath.Element]
        var methods: Set<HTTPRequest.Method>
    }

    private let routes: [Route]
    /// Every registered route as (path pattern, method), the pattern as the router prints it
    /// (`/v1/conversations/{id}`): what the contract tests compare with the documented routes.
    let registered: [(path: String, method: HTTPRequest.Method)]

    /// The table of `routes` (`Router.routes`). Pigeon's routes have literal and captured segments only: a pattern
    /// with a recursive wildcard (`**`) would be matched as one segment.
    init(_ routes: [(path: RouterPath, method: HTTPRequest.Method)]) {
        registered = routes.map { ($0.path.description, $0.method) }
        var byPath: [String: Route] = [:]
        for route in routes {
            byPath[route.path.description, default: Route(components: route.path.components, methods: [])].methods.insert(route.method)
        }
        self.routes = byPath.keys.sorted().compactMap { byPath[$0] }
    }

    /// The methods served on `path`, sorted by name, or `nil` when no route matches it (an unknown path).
    func methods(for path: String) -> [HTTPRequest.Method]? {
        let segments = path.split(separator: "/")
        var methods = Set<HTTPRequest.Method>()
        var known = false
        for route in routes where route.components.count == segments.count {
            guard zip(route.components, segments).allSatisfy({ $0 ~= $1 }) else { continue }
            known = true
            methods.formUnion(route.methods)
        }
        return known ? methods.sorted { $0.rawValue < $1.rawValue } : nil
    }
}
