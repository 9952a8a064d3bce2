/// The server's machine-readable contract: two JSON documents built from one table of routes (``ContractRoute``) and
/// one set of schemas (``ContractSchemas``). The server serves them (`GET /openapi.json`, `GET /asyncapi.json`),
/// `pigeon-server contract <name>` prints them, and docs/openapi.json and docs/asyncapi.json are committed copies
/// that the tests require to be byte-identical.
public enum ContractDocument: String, Sendable, CaseIterable {
    /// OpenAPI 3.1: every HTTP route, with its parameters, bodies, answers and errors.
    case openapi
    /// AsyncAPI 3.0: the WebSocket's operations and frames, and the server-sent events.
    case asyncapi

    /// The document, pretty-printed JSON ending in a newline, of every route (what is committed and printed).
    public var text: String {
        switch self {
        case .openapi: OpenAPIDocument.text
        case .asyncapi: AsyncAPIDocument.text
        }
    }

    /// The document a server serves when the options behind `availabilities` are on: the OpenAPI one lists only the
    /// routes registered then; the AsyncAPI one is the same whatever the configuration.
    package func text(serving availabilities: Set<ContractRoute.Availability>) -> String {
        switch self {
        case .openapi: OpenAPIDocument.text(serving: availabilities)
        case .asyncapi: AsyncAPIDocument.text
        }
    }

    /// Where the server serves it.
    public var path: String { "/\(rawValue).json" }

    /// Whether `path` is one of the documents' paths.
    package static func isDocumentPath(_ path: String) -> Bool {
        allCases.contains { $0.path == path }
    }
}
