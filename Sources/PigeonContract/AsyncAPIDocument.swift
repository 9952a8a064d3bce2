import PigeonProtocol

/// The AsyncAPI 3.0 document of the device's streams (`GET /asyncapi.json`, `pigeon-server contract asyncapi`,
/// docs/asyncapi.json): the WebSocket at `/v1/ws` (every client operation, every server frame, the close codes) and
/// the server-sent events at `/v1/events`. It describes the server: it receives the client's operations and sends
/// events and answers. Its schemas are ``ContractSchemas``, the ones the OpenAPI document's `/v1/sync` uses.
package enum AsyncAPIDocument {
    /// The close codes a client sees from the server: those it chooses (``StreamEndReason``), the WebSocket
    /// protocol's (a text frame that is not UTF-8, a frame over 1 MiB: the upgrade's configuration in
    /// ``PigeonApplication``), and the normal end.
    package static var closeCodes: [(code: Int, reason: String?, when: String)] {
        var codes: [(code: Int, reason: String?, when: String)] = [
            (1000, nil, "The stream ended normally (the client closed it, or the server is shutting down): reconnect with the last cursor.")
        ]
        var seen = Set<Int>()
        for reason in StreamEndReason.allCases {
            let close = reason.webSocketClose
            guard seen.insert(close.code).inserted else { continue }
            codes.append((close.code, close.reason, closeMeaning(close.code)))
        }
        codes += [
            (1007, nil, "A text frame that is not UTF-8; nothing of it was stored."),
            (1009, nil, "A frame over 1 MiB."),
        ]
        return codes.sorted { $0.code < $1.code }
    }

    private static func closeMeaning(_ code: Int) -> String {
        switch code {
        case 4001: "The device was revoked (DELETE /v1/devices/{deviceId}): its token no longer works; do not reconnect with it."
        case 4008:
            "The client did not read fast enough (over --stream-outbound-bytes held for it, or one write stuck for --stream-write-timeout-seconds): reconnect with the last cursor, nothing is lost."
        case 4009: "A newer stream of this device replaced this one (over --max-streams-per-device)."
        default: "See docs/API.md."
        }
    }

    package static var json: JSONNode {
        [
            "asyncapi": "3.0.0",
            "info": [
                "title": "Pigeon streams",
                "version": .string(OpenAPIDocument.version),
                "description": .string(description),
            ],
            "defaultContentType": "application/json",
            "channels": [
                "webSocket": webSocketChannel,
                "serverSentEvents": serverSentEventsChannel,
            ],
            "operations": operations,
            "components": [
                "schemas": .object(ContractSchemas.components.map { .init(key: $0.0, value: $0.1) }),
                "messages": .object(messages.map { .init(key: $0.name, value: $0.message) }),
                "securitySchemes": [
                    "deviceToken": ["type": "http", "scheme": "bearer", "description": "A device's token in Authorization: Bearer."],
                    "accessToken": [
                        "type": "httpApiKey", "name": "access_token", "in": "query",
                        "description": "The device's token in the query (a browser's WebSocket and EventSource cannot send headers).",
                    ],
                ],
            ],
        ]
    }

    /// The document's text, as served and committed.
    package static let text = json.prettyPrinted

    private static let description = """
        The device's event log as a stream, over a WebSocket (which also carries the device's operations) or as \
        server-sent events. Every event but typing carries a cursor: a client that reconnects with the last cursor it \
        processed gets every later event exactly once, in order, then the live ones; without a cursor the stream \
        starts now; an unknown or expired cursor gets a reset event first. The same events, pulled, are GET /v1/sync \
        of /openapi.json, with the same schemas. The HTTP side of both endpoints (authentication, 400 and 401 \
        answers) is in /openapi.json.
        """

    // MARK: Messages

    private struct NamedMessage {
        var name: String
        var message: JSONNode
    }

    private static func eventMessage(_ kind: ServerEvent.Kind) -> NamedMessage {
        let name = ContractSchemas.eventName(kind)
        return NamedMessage(
            name: name,
            message: [
                "name": .string(kind.rawValue), "title": .string(kind.rawValue), "summary": .string(ContractSchemas.eventSummary(kind)),
                "payload": Schema.ref(name),
            ])
    }

    private static func operationMessage(_ op: ClientOperation.Op) -> NamedMessage {
        let name = ContractSchemas.operationName(op)
        return NamedMessage(
            name: name,
            message: [
                "name": .string(op.rawValue), "title": .string("op \(op.rawValue)"), "summary": .string(ContractSchemas.operationSummary(op)),
                "payload": Schema.ref(name),
            ])
    }

    private static let frameMessages: [NamedMessage] = [
        NamedMessage(
            name: "AckFrame",
            message: ["name": "ack", "title": "ack", "summary": "A send, edit or delete was accepted (the sender's ✓), or a reaction stored.", "payload": Schema.ref("AckFrame")]),
        NamedMessage(
            name: "ErrorFrame",
            message: ["name": "error", "title": "error", "summary": "An operation was refused, or a frame could not be read.", "payload": Schema.ref("ErrorFrame")]),
    ]

    private static var messages: [NamedMessage] {
        ServerEvent.Kind.allCases.map(eventMessage) + frameMessages + ClientOperation.Op.allCases.map(operationMessage)
    }

    private static func messageReferences(_ names: [String]) -> JSONNode {
        .object(names.map { .init(key: $0, value: ["$ref": .string("#/components/messages/\($0)")]) })
    }

    private static func channelMessages(_ channel: String, _ names: [String]) -> JSONNode {
        .array(names.map { ["$ref": .string("#/channels/\(channel)/messages/\($0)")] })
    }

    private static var eventNames: [String] { ServerEvent.Kind.allCases.map(ContractSchemas.eventName) }

    // MARK: Channels

    private static let streamQuery: JSONNode = Schema.object(
        required: [],
        [
            ("cursor", Schema.described(ContractSchemas.cursor, "The cursor of the last event processed; without it the stream starts now.")),
            ("access_token", Schema.string("The device's token, when it is not in Authorization.")),
        ])

    private static var webSocketChannel: JSONNode {
        let closes = closeCodes
        let closeText = closes.map { "\($0.code)\($0.reason.map { " \"\($0)\"" } ?? ""): \($0.when)" }.joined(separator: " ")
        return [
            "address": "/v1/ws",
            "title": "The device's WebSocket",
            "description": .string(
                "GET /v1/ws?cursor=<c> with the token in Authorization or access_token, upgraded to a WebSocket. Text frames of JSON only (a binary frame gets an error frame). From the server: the device's events, and the answers to its operations (ack, error). From the client: operations (op). With --cors-origin, an upgrade from a page's Origin that is not allowed is refused 403. Close codes: \(closeText)"
            ),
            "messages": messageReferences(eventNames + frameMessages.map(\.name) + ClientOperation.Op.allCases.map(ContractSchemas.operationName)),
            "bindings": ["ws": ["method": "GET", "query": streamQuery, "bindingVersion": "0.1.0"]],
            "x-pigeon-close-codes": .array(
                closes.map { .fields([("code", .integer(Int64($0.code))), ("reason", $0.reason.map(JSONNode.string)), ("when", .string($0.when))]) }),
        ]
    }

    private static var serverSentEventsChannel: JSONNode {
        [
            "address": "/v1/events",
            "title": "The device's server-sent events",
            "description":
                "GET /v1/events?cursor=<c> (or the Last-Event-ID header, which wins) with the token in Authorization or access_token; Content-Type text/event-stream. The answer starts with `retry: 1000` and a `: connected` comment; then each event is `id: <its cursor>` (absent on typing), `event: <its type>`, `data: <its JSON>` and a blank line; `: keep-alive` after 15 s without an event. The server ends it when the device is revoked (finished), too slow or replaced (closed); the client reconnects with its last id.",
            "messages": messageReferences(eventNames),
            "bindings": ["http": ["bindingVersion": "0.3.0"]],
            "x-pigeon-sse": [
                "retry": 1000,
                "id": "The event's cursor (absent on typing).",
                "event": "The event's type.",
                "data": "The event's JSON (one line).",
                "keepAlive": ": keep-alive, after 15 s without an event",
                "resume": "The Last-Event-ID header (a browser's EventSource sends it) or the cursor parameter; the header wins.",
            ],
        ]
    }

    // MARK: Operations

    private static var operations: JSONNode {
        let security: JSONNode = [["$ref": "#/components/securitySchemes/deviceToken"], ["$ref": "#/components/securitySchemes/accessToken"]]
        var members: [JSONNode.Member] = ClientOperation.Op.allCases.map { op in
            let replies: [String] =
                switch op {
                case .send, .edit, .delete, .react: ["AckFrame", "ErrorFrame"]
                case .receipt, .typing: ["ErrorFrame"]
                }
            return .init(
                key: "receive" + op.rawValue.prefix(1).uppercased() + op.rawValue.dropFirst(),
                value: [
                    "action": "receive",
                    "channel": ["$ref": "#/channels/webSocket"],
                    "summary": .string(ContractSchemas.operationSummary(op)),
                    "security": security,
                    "messages": channelMessages("webSocket", [ContractSchemas.operationName(op)]),
                    "reply": ["channel": ["$ref": "#/channels/webSocket"], "messages": channelMessages("webSocket", replies)],
                ])
        }
        members.append(
            .init(
                key: "sendWebSocketEvents",
                value: [
                    "action": "send",
                    "channel": ["$ref": "#/channels/webSocket"],
                    "summary": "The device's events, in order, then live.",
                    "security": security,
                    "messages": channelMessages("webSocket", eventNames),
                ]))
        members.append(
            .init(
                key: "sendServerSentEvents",
                value: [
                    "action": "send",
                    "channel": ["$ref": "#/channels/serverSentEvents"],
                    "summary": "The device's events, in order, then live.",
                    "security": security,
                    "messages": channelMessages("serverSentEvents", eventNames),
                ]))
        return .object(members)
    }
}
