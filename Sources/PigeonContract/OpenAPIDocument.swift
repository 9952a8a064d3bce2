import HTTPTypes
import PigeonProtocol

/// The OpenAPI 3.1 document of the HTTP routes, built from ``ContractRoute/all`` and ``ContractSchemas``: of every
/// route (`pigeon-server contract openapi`, docs/openapi.json; routes that need an option say which, in
/// `x-pigeon-requires`), or of those a server's options turn on (its `GET /openapi.json`), so that a contract tester
/// pointed at a server meets no documented route that answers `404` there.
package enum OpenAPIDocument {
    package static let version = "1.2"

    /// The document of every route.
    package static var json: JSONNode { json(serving: Set(ContractRoute.Availability.allCases)) }

    /// The document of the routes registered when the options behind `availabilities` are on.
    package static func json(serving availabilities: Set<ContractRoute.Availability>) -> JSONNode {
        [
            "openapi": "3.1.0",
            "info": [
                "title": "Pigeon",
                "version": .string(version),
                "description": .string(description),
                "license": ["name": "See the project's repository"],
            ],
            "tags": .array(tags.map { ["name": .string($0.0), "description": .string($0.1)] }),
            "paths": paths(ContractRoute.all.filter { availabilities.contains($0.availability) }),
            "components": [
                "schemas": .object(ContractSchemas.components.map { .init(key: $0.0, value: $0.1) }),
                "responses": .object(ContractError.allCases.map { .init(key: $0.responseName, value: response(of: $0)) }),
                "securitySchemes": securitySchemes,
            ],
        ]
    }

    /// The document's text, as served and committed.
    package static let text = json.prettyPrinted

    /// The text of ``json(serving:)``.
    package static func text(serving availabilities: Set<ContractRoute.Availability>) -> String {
        availabilities == Set(ContractRoute.Availability.allCases) ? text : json(serving: availabilities).prettyPrinted
    }

    private static let description = """
        Pigeon's HTTP API (API.md and docs/API.md are the prose). JSON bodies in UTF-8; times are integers, milliseconds \
        since the Unix epoch; unknown JSON fields are ignored, a key given twice is 400. Every error is \
        {"error": {"code", "message"}} with the status of its code. Every route may also answer 500 internal and \
        503 overloaded (with Retry-After); a known path with another method answers 405 method_not_allowed with Allow \
        (components.responses.MethodNotAllowed) before any authentication; before any route, the connection limits \
        answer 408 request_timeout, 414 and 431 invalid_request, and 503 overloaded (docs/API.md, "Limits every client \
        meets"). With --cors-origin every /v1 route and these documents answer CORS preflights and carry \
        Access-Control-Allow-Origin (docs/API.md, "From a browser"). The WebSocket's and the SSE stream's messages are \
        described by /asyncapi.json. Routes marked x-pigeon-requires exist only with that option (else 404): a server's \
        own /openapi.json lists only the routes its options turn on (without --web, no GET /), the committed copy \
        (pigeon-server contract openapi) all of them. Parameters of which a request gives at most one (after and \
        before) are listed in the operation's x-pigeon-exclusive-parameters; giving more is 400.
        """

    private static let tags: [(String, String)] = [
        ("devices", "Registration, the user's devices, push registration."),
        ("conversations", "Conversations, members, roles and names, invitations."),
        ("blocks", "Blocking users: what they send never reaches the caller."),
        ("messages", "Sending (replies and thread replies too), history, thread pages, edits and deletes, receipts, typing."),
        ("attachments", "Uploads (photos, voice notes, files) that messages carry, and reading them back."),
        ("reactions", "Reactions to messages: adding, removing, who reacted."),
        ("events", "The device's event log: pulled (/v1/sync) or streamed (/v1/events, /v1/ws)."),
        ("service", "The server API: the app's backend creates conversations, changes members, posts and moderates messages, manages devices."),
        ("operations", "Health, readiness, metrics."),
        ("admin", "Operators: dead letters (only with --admin-token)."),
        ("contract", "The machine-readable contract."),
    ]

    private static func paths(_ routes: [ContractRoute]) -> JSONNode {
        var order: [String] = []
        var byPath: [String: [ContractRoute]] = [:]
        for route in routes {
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
        // Refusals of one status with different codes (403 forbidden and 403 rejected) share one answer: either body.
        var byStatus: [(key: String, refusals: [ContractRoute.Refusal])] = []
        for refusal in refusals {
            let key = String(refusal.error.status)
            if let index = byStatus.firstIndex(where: { $0.key == key }) {
                if !byStatus[index].refusals.contains(where: { $0.error == refusal.error }) { byStatus[index].refusals.append(refusal) }
            } else {
                byStatus.append((key, [refusal]))
            }
        }
        for (key, shared) in byStatus where !responses.contains(where: { $0.key == key }) {
            if shared.count == 1, let refusal = shared.first {
                let reference: JSONNode = [
                    "$ref": .string("#/components/responses/\(refusal.error.responseName)"), "description": .string(refusal.when),
                ]
                responses.append(.init(key: key, value: reference))
            } else {
                let description = shared.map { "\($0.error.code.rawValue): \($0.when)" }.joined(separator: " ")
                let schema: JSONNode = ["anyOf": .array(shared.map { errorSchema($0.error) })]
                responses.append(.init(key: key, value: ["description": .string(description), "content": ["application/json": ["schema": schema]]]))
            }
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
            ("x-pigeon-exclusive-parameters", route.exclusive.isEmpty ? nil : .array(route.exclusive.map { .array($0.map(JSONNode.string)) })),
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
        case .eventStream(let item):
            // The schema of each event (what OpenAPI 3.2 calls itemSchema): tools that check server-sent events read a
            // 3.1 document's text/event-stream schema that way.
            let schema = Schema.ref(item)
            return ["description": .string(answer.description), "content": ["text/event-stream": ["schema": schema]]]
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
        let schema = errorSchema(error)
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

    /// The error body with its code fixed.
    private static func errorSchema(_ error: ContractError) -> JSONNode {
        [
            "allOf": [
                Schema.ref("Error"),
                ["properties": ["error": ["properties": ["code": ["const": .string(error.code.rawValue)]]]]],
            ]
        ]
    }

    private static func security(_ security: ContractRoute.Security) -> JSONNode {
        switch security {
        case .none: []
        case .optionalDevice: [[:], ["deviceToken": []]]
        case .device: [["deviceToken": []]]
        case .deviceOrAccessToken: [["deviceToken": []], ["accessToken": []]]
        case .adminToken: [["adminToken": []]]
        case .optionalMetricsToken: [[:], ["metricsToken": []]]
        case .service: [["serviceToken": []]]
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
            "serviceToken": [
                "type": "http", "scheme": "bearer",
                "description":
                    "The server API's credential, for the app's backend only: --service-token (PIGEON_SERVICE_TOKEN; --service-token-previous during a rotation), or a JWT signed with the configured keys carrying \"pigeon_role\": \"service\" and no device claim. A device's token is 403.",
            ],
        ]
    }
}
