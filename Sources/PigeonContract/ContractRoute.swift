import HTTPTypes
import PigeonProtocol

/// One HTTP route of the server as the contract documents it: the row of ``ContractRoute/all`` that
/// ``OpenAPIDocument`` turns into an operation. A route the server registers and this table lacks (or the reverse)
/// fails the contract tests, naming it.
package struct ContractRoute: Sendable {
    /// When the server registers the route.
    package enum Availability: String, Sendable, CaseIterable {
        case always
        /// Only with `--admin-token` (`PIGEON_ADMIN_TOKEN`); otherwise the path is `404`.
        case adminToken
        /// Only with `--web` (`PIGEON_WEB`); otherwise the path is `404`.
        case web

        /// The option that turns the route on, `nil` for a route that is always there.
        package var option: String? {
            switch self {
            case .always: nil
            case .adminToken: "--admin-token"
            case .web: "--web"
            }
        }
    }

    /// Who may call it (the security schemes of ``OpenAPIDocument``).
    package enum Security: Sendable {
        /// No credentials.
        case none
        /// `Authorization: Bearer` with a device token, or nothing (open registration).
        case optionalDevice
        /// `Authorization: Bearer` with a device token.
        case device
        /// A device token in `Authorization: Bearer` or in `access_token` (the streams: a browser's EventSource and
        /// WebSocket cannot send headers).
        case deviceOrAccessToken
        /// `Authorization: Bearer` with the operator's `--admin-token`.
        case adminToken
        /// `Authorization: Bearer` with `--metrics-token` when one is set, else nothing.
        case optionalMetricsToken
        /// `Authorization: Bearer` with the server API's service credential (a device's token is `403`).
        case service
    }

    package struct Parameter: Sendable {
        package enum Location: String, Sendable { case path, query, header }
        package var name: String
        package var location: Location
        package var required: Bool
        package var schema: JSONNode
        package var description: String

        package static func path(_ name: String, _ schema: JSONNode, _ description: String) -> Parameter {
            Parameter(name: name, location: .path, required: true, schema: schema, description: description)
        }

        package static func query(_ name: String, _ schema: JSONNode, _ description: String) -> Parameter {
            Parameter(name: name, location: .query, required: false, schema: schema, description: description)
        }

        package static func header(_ name: String, _ schema: JSONNode, _ description: String, required: Bool = false) -> Parameter {
            Parameter(name: name, location: .header, required: required, schema: schema, description: description)
        }
    }

    /// A successful answer.
    package struct Answer: Sendable {
        package enum Body: Sendable {
            case none
            /// `application/json` of a named schema of ``ContractSchemas``.
            case json(String)
            /// Text of another media type (`text/event-stream`, Prometheus text, an HTML page).
            case text(mediaType: String)
            /// `text/event-stream` whose events each are the named schema of ``ContractSchemas``.
            case eventStream(item: String)
            /// Bytes of any media type (an attachment), with the headers that describe them.
            case binary(headers: [(name: String, description: String)])
            /// No body, these headers (a `304`).
            case headersOnly([(name: String, description: String)])
        }

        package var status: Int
        package var description: String
        package var body: Body

        package static func json(_ status: Int, _ schema: String, _ description: String) -> Answer {
            Answer(status: status, description: description, body: .json(schema))
        }

        package static func empty(_ status: Int, _ description: String) -> Answer {
            Answer(status: status, description: description, body: .none)
        }

        package static func text(_ status: Int, _ mediaType: String, _ description: String) -> Answer {
            Answer(status: status, description: description, body: .text(mediaType: mediaType))
        }

        /// A `text/event-stream` answer, each event of it the named schema `item`.
        package static func eventStream(_ status: Int, item: String, _ description: String) -> Answer {
            Answer(status: status, description: description, body: .eventStream(item: item))
        }

        /// An HTML page (`text/html`).
        package static func page(_ description: String) -> Answer {
            Answer(status: 200, description: description, body: .text(mediaType: "text/html"))
        }
    }

    /// An error answer of the route: which error, and when this route gives it.
    package struct Refusal: Sendable {
        package var error: ContractError
        package var when: String

        package static func invalid(_ when: String) -> Refusal { Refusal(error: .invalidRequest, when: when) }
        package static func unauthorized(_ when: String = "A missing, malformed, expired, revoked or unknown token.") -> Refusal {
            Refusal(error: .unauthorized, when: when)
        }
        package static func forbidden(_ when: String) -> Refusal { Refusal(error: .forbidden, when: when) }
        package static func notFound(_ when: String) -> Refusal { Refusal(error: .notFound, when: when) }
        package static func conflict(_ when: String) -> Refusal { Refusal(error: .conflict, when: when) }
        package static let rejected = Refusal(
            error: .rejected,
            when: "With --before-send-hook: the hook rejected it (message: its reason), or the call failed under --before-send-on-failure reject.")
        package static let invitationPending = Refusal(
            error: .forbidden, when: "With --consent invites: the caller is invited to the conversation and has not accepted yet.")
        package static let tooLarge = Refusal(error: .payloadTooLarge, when: "The request body is over 65,536 bytes (--max-body-bytes).")
        package static func rateLimited(_ when: String) -> Refusal { Refusal(error: .rateLimited, when: when) }
    }

    package var method: HTTPRequest.Method
    /// The path as the router's pattern prints it (`/v1/conversations/{id}`), which is OpenAPI's template.
    package var path: String
    package var operationId: String
    package var tag: String
    package var summary: String
    package var description: String?
    package var availability: Availability = .always
    package var security: Security
    package var parameters: [Parameter] = []
    /// Groups of parameters of which a request gives at most one (`400` for more): OpenAPI cannot say it in the
    /// parameters, so the operation carries them as `x-pigeon-exclusive-parameters` and the parameters' descriptions.
    package var exclusive: [[String]] = []
    /// The named schema of the JSON request body, if it takes one.
    package var request: String?
    /// A body of raw bytes instead (an upload), described.
    package var binaryRequest: String?
    package var answers: [Answer]
    /// The error answers beside `500 internal` and `503 overloaded`, which every route may give.
    package var refusals: [Refusal] = []
}

/// The error answers of the contract (API.md's table and docs/API.md's "Errors beyond the table"), each a reusable
/// response of the OpenAPI document.
package enum ContractError: String, Sendable, CaseIterable {
    case invalidRequest, unauthorized, forbidden, rejected, notFound, methodNotAllowed, conflict, payloadTooLarge, rangeNotSatisfiable, rateLimited,
        internalError, overloaded

    package var code: ErrorCode {
        switch self {
        case .invalidRequest: .invalidRequest
        case .unauthorized: .unauthorized
        case .forbidden: .forbidden
        case .rejected: .rejected
        case .notFound: .notFound
        case .methodNotAllowed: .methodNotAllowed
        case .conflict: .conflict
        case .payloadTooLarge: .payloadTooLarge
        case .rangeNotSatisfiable: .rangeNotSatisfiable
        case .rateLimited: .rateLimited
        case .internalError: .internalError
        case .overloaded: .overloaded
        }
    }

    package var status: Int { code.httpStatus }

    /// The name of its `components.responses` entry.
    package var responseName: String {
        switch self {
        case .invalidRequest: "InvalidRequest"
        case .unauthorized: "Unauthorized"
        case .forbidden: "Forbidden"
        case .rejected: "Rejected"
        case .notFound: "NotFound"
        case .methodNotAllowed: "MethodNotAllowed"
        case .conflict: "Conflict"
        case .payloadTooLarge: "PayloadTooLarge"
        case .rangeNotSatisfiable: "RangeNotSatisfiable"
        case .rateLimited: "RateLimited"
        case .internalError: "Internal"
        case .overloaded: "Overloaded"
        }
    }

    package var meaning: String {
        switch self {
        case .invalidRequest: "Malformed JSON, a missing or ill-typed field, a key given twice, a bad UUID, cursor or parameter."
        case .unauthorized: "A missing, malformed, expired, revoked or unknown token."
        case .forbidden: "The caller is known but may not do this."
        case .rejected: "The app's before-send hook refused the send or edit (`message` carries its reason); nothing was stored. A resend asks again."
        case .notFound: "Unknown, or not the caller's (never told apart)."
        case .methodNotAllowed: "A known path with a method it does not serve; `Allow` lists the path's methods. Answered before the token is looked at."
        case .conflict:
            "The action contradicts its target's state: a deleted message, one of the server's pigeon.* messages, a reaction limit reached."
        case .payloadTooLarge:
            "The request or message body is over the limit. Answered as soon as the limit is passed, with Connection: close (the connection carries no other request)."
        case .rangeNotSatisfiable: "The Range starts past the attachment's end; Content-Range gives its size."
        case .rateLimited: "A rate limit; `Retry-After` says in how many seconds to try again."
        case .internalError: "A server fault; retry idempotently (sends are de-duplicated)."
        case .overloaded:
            "The server cannot take it now (the ingest buffer full, a backend or the disk failing, too many connections from this address); nothing was accepted. `Retry-After` says when to try again."
        }
    }

    /// The headers the answer always carries.
    package var headers: [(name: String, schema: JSONNode, description: String)] {
        switch self {
        case .rateLimited, .overloaded: [("Retry-After", Schema.integer(nil, minimum: 1), "Seconds to wait before trying again.")]
        case .methodNotAllowed: [("Allow", Schema.string(), "The path's methods, comma-separated (`GET, POST`).")]
        case .rangeNotSatisfiable: [("Content-Range", Schema.string(), "`bytes */<size>`.")]
        default: []
        }
    }
}
