import HTTPTypes
import PigeonProtocol

/// The OpenAPI 3.1 document of every HTTP route (`GET /openapi.json`, `pigeon-server contract openapi`,
/// docs/openapi.json): built from ``ContractRoute/all`` and ``ContractSchemas``, the same whatever the server's
/// configuration (routes that need an option say which, in `x-pigeon-requires`).
package enum OpenAPIDocument {
    package static let version = "1.2"

    package static var json: JSONNode {
        [
            "openapi": "3.1.0",
            "info": [
                "title": "Pigeon",
                "version": .string(version),
                "description": .string(description),
                "license": ["name": "See the project's repository"],
            ],
            "tags": .array(tags.map { ["name": .string($0.0), "description": .string($0.1)] }),
            "paths": paths,
            "components": [
                "schemas": .object(ContractSchemas.components.map { .init(key: $0.0, value: $0.1) }),
                "responses": .object(ContractError.allCases.map { .init(key: $0.responseName, value: response(of: $0)) }),
                "securitySchemes": securitySchemes,
            ],
        ]
    }

    /// The document's text, as served and committed.
    package static let text = json.prettyPrinted

    private static let description = """
        Pigeon's HTTP API (API.md and docs/API.md are the prose). JSON bodies in UTF-8; times are integers, milliseconds \
        since the Unix epoch; unknown JSON fields are ignored, a key given twice is 400. Every error is \
        {"error": {"code", "message"}} with the status of its code. Every route may also answer 500 internal and \
        503 overloaded (with Retry-After); a known path with another method answers 405 method_not_allowed with Allow \
        (components.responses.MethodNotAllowed) before any authentication; before any route, the connection limits \
        answer 408 request_timeout, 414 and 431 invalid_request, and 503 overloaded (docs/API.md, "Limits every client \
        meets"). With --cors-origin every /v1 route and these documents answer CORS preflights and carry \
        Access-Control-Allow-Origin (docs/API.md, "From a browser"). The WebSocket's and the SSE stream's messages are \
        described by /asyncapi.json. Routes marked x-pigeon-requires exist only with that option (else 404).
        """

    private static let tags: [(String, String)] = [
        ("devices", "Registration, the user's devices, push registration."),
        ("conversations", "Conversations, members, roles and names, invitations."),
        ("blocks", "Blocking users: what they send never reaches the caller."),
        ("messages", "Sending (replies and thread replies too), history, thread pages, edits and deletes, receipts, typing."),
        ("attachments", "Uploads (photos, voice notes, files) that messages carry, and reading them back."),
        ("reactions", "Reactions to messages: adding, removing, who reacted."),
        ("events", "The device's event log: pulled (/v1/sync) or streamed (/v1/events, /v1/ws)."),
        ("operations", "Health, readiness, metrics."),
        ("admin", "Operators: dead letters (only with --admin-token)."),
        ("contract", "The machine-readable contract."),
    ]

    private static var paths: JSONNode {
        var order: [String] = []
        var byPath: [String: [ContractRoute]] = [:]
        for route in ContractRoute.all {
            if byPath[route.path] == nil { order.append(route.path) }
            byPath[route.path, default: []].append(route)
        }
        return .object(
            order.map { path in
                .init(key: path, value: .object(byPath[path]!.map { .init(key: $0.method.rawValue.lowercased(), value: operation($0)) }))
            })
    }

    private static func operation(_ route: ContractRoute) -> JSONNode {
        var responses: [JSONNode.Member] = route.answers.map { .init(key: String($0.status), value: answer($0)) }
        let refusals = route.refusals + [
            .init(error: .internalError, when: ContractError.internalError.meaning), .init(error: .overloaded, when: ContractError.overloaded.meaning),
        ]
        for refusal in refusals {
            let key = String(refusal.error.status)
            let reference: JSONNode = [
                "$ref": .string("#/components/responses/\(refusal.error.responseName)"), "description": .string(refusal.when),
            ]
            if !responses.contains(where: { $0.key == key }) { responses.append(.init(key: key, value: reference)) }
        }
        responses.sort { $0.key < $1.key }
        var description = route.description
        if let option = route.availability.option {
            description = [description, "Only with \(option); otherwise the path is 404."].compactMap { $0 }.joined(separator: " ")
        }
        return .fields([
            ("operationId", .string(route.operationId)),
            ("tags", [.string(route.tag)]),
            ("summary", .string(route.summary)),
            ("description", description.map(JSONNode.string)),
            ("x-pigeon-requires", route.availability.option.map(JSONNode.string)),
            ("security", security(route.security)),
            ("parameters", route.parameters.isEmpty ? nil : .array(route.parameters.map(parameter))),
            (
                "requestBody",
                route.request.map { ["required": true, "content": ["application/json": ["schema": Schema.ref($0)]]] }
                    ?? route.binaryRequest.map {
                        [
                            "required": true, "description": .string($0),
                            "content": ["application/octet-stream": ["schema": ["type": "string", "format": "binary", "minLength": 1]]],
                        ]
                    }
            ),
            ("responses", .object(responses)),
        ])
    }

    private static func parameter(_ parameter: ContractRoute.Parameter) -> JSONNode {
        [
            "name": .string(parameter.name),
            "in": .string(parameter.location.rawValue),
            "required": .bool(parameter.required),
            "description": .string(parameter.description),
            "schema": parameter.schema,
        ]
    }

    private static func answer(_ answer: ContractRoute.Answer) -> JSONNode {
        switch answer.body {
        case .none:
            return ["description": .string(answer.description)]
        case .json(let schema):
            return ["description": .string(answer.description), "content": ["application/json": ["schema": Schema.ref(schema)]]]
        case .text(let mediaType):
            let schema: JSONNode = mediaType == "application/json" ? ["type": "object"] : ["type": "string"]
            return ["description": .string(answer.description), "content": [mediaType: ["schema": schema]]]
        case .binary(let headers):
            return .fields([
                ("description", .string(answer.description)),
                ("headers", headers.isEmpty ? nil : .object(headers.map { .init(key: $0.name, value: ["description": .string($0.description), "schema": ["type": "string"]]) })),
                ("content", ["*/*": ["schema": ["type": "string", "format": "binary"]]]),
            ])
        case .headersOnly(let headers):
            return .fields([
                ("description", .string(answer.description)),
                ("headers", .object(headers.map { .init(key: $0.name, value: ["description": .string($0.description), "schema": ["type": "string"]]) })),
            ])
        }
    }

    /// The reusable answer of `error`: the error body with its code fixed, and its headers.
    private static func response(of error: ContractError) -> JSONNode {
        let schema: JSONNode = [
            "allOf": [
                Schema.ref("Error"),
                ["properties": ["error": ["properties": ["code": ["const": .string(error.code.rawValue)]]]]],
            ]
        ]
        return .fields([
            ("description", .string("\(error.status) \(error.code.rawValue): \(error.meaning)")),
            (
                "headers",
                error.headers.isEmpty
                    ? nil
                    : .object(
                        error.headers.map {
                            .init(key: $0.name, value: ["required": true, "description": .string($0.description), "schema": $0.schema])
                        })
            ),
            ("content", ["application/json": ["schema": schema]]),
        ])
    }

    private static func security(_ security: ContractRoute.Security) -> JSONNode {
        switch security {
        case .none: []
        case .optionalDevice: [[:], ["deviceToken": []]]
        case .device: [["deviceToken": []]]
        case .deviceOrAccessToken: [["deviceToken": []], ["accessToken": []]]
        case .adminToken: [["adminToken": []]]
        case .optionalMetricsToken: [[:], ["metricsToken": []]]
        }
    }

    private static var securitySchemes: JSONNode {
        [
            "deviceToken": [
                "type": "http", "scheme": "bearer",
                "description": "A device's token: pgn_... from POST /v1/devices, or a JWT minted by the app's backend (docs/SECURITY.md).",
            ],
            "accessToken": [
                "type": "apiKey", "in": "query", "name": "access_token",
                "description": "The device token in the query, for the streams only (a browser's EventSource and WebSocket cannot send headers).",
            ],
            "adminToken": ["type": "http", "scheme": "bearer", "description": "The operator's --admin-token (PIGEON_ADMIN_TOKEN)."],
            "metricsToken": ["type": "http", "scheme": "bearer", "description": "The operator's --metrics-token (PIGEON_METRICS_TOKEN), when set."],
        ]
    }
}
