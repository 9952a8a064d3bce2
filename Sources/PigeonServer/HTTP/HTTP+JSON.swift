import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PigeonDomain
import PigeonProtocol

/// JSON in and out, with API.md's errors for bodies that are too large or malformed.
enum JSONBody {
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, limit: Int) async throws -> T {
        try decode(type, from: Data(try await collect(request, limit: limit).readableBytesView))
    }

    /// A send's body: the common shape without `JSONDecoder` (``ClientOperationParser/parseSend(_:)``).
    static func decodeSend(from request: Request, limit: Int) async throws -> SendMessageRequest {
        let buffer = try await collect(request, limit: limit)
        // Bytes that are not UTF-8 go to the decoder, which refuses them as it always did.
        guard let text = String(validating: buffer.readableBytesView, as: UTF8.self) else {
            return try decode(SendMessageRequest.self, from: Data(buffer.readableBytesView))
        }
        return try ClientOperationParser.parseSend(text)
    }

    private static func collect(_ request: Request, limit: Int) async throws -> ByteBuffer {
        do {
            return try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw PigeonError(.payloadTooLarge, "request body is larger than \(limit) bytes")
        }
    }

    /// Decodes `data`; malformed JSON, a wrong field and a key given twice in one object are `400 invalid_request`.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        do {
            let value = try JSONDecoder().decode(T.self, from: data)
            if let key = JSONDuplicateKeys.first(in: data) {
                throw PigeonError.invalid("the key \"\(key.prefix(80))\" appears twice in one object")
            }
            return value
        } catch let error as PigeonError {
            throw error
        } catch let error as DecodingError {
            throw PigeonError.invalid(describe(error))
        } catch {
            throw PigeonError.invalid("malformed JSON")
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ key: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (key.map { [$0] } ?? [])
            return keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing field \"\(path(context, key))\""
        case .typeMismatch(let type, let context): return "field \"\(path(context))\" must be \(typeName(type))"
        case .valueNotFound(let type, let context): return "field \"\(path(context))\" must be \(typeName(type)), not null"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "malformed JSON" : "field \"\(path(context))\": \(context.debugDescription)"
        @unknown default: return "malformed JSON"
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int64.Type, is Int.Type: "an integer"
        case is Bool.Type: "a boolean"
        case is [String].Type, is [Any].Type: "an array"
        default: "\(type)".lowercased()
        }
    }

    /// Keys sorted, so equal answers are equal bytes.
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }

    static func response<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try encoder().encode(value)
        return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func errorResponse(_ error: PigeonError) -> Response {
        let data = (try? encoder().encode(ErrorBody(code: error.code, message: error.message))) ?? Data()
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfter = error.retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(
            status: HTTPResponse.Status(code: error.code.httpStatus), headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

/// The one mapping of an error to API.md's wire error, for HTTP answers and WebSocket `error` frames alike.
enum WireError {
    /// The wire error of `error`: a ``PigeonError`` as it is, Hummingbird's HTTP errors and a body over the limit by
    /// their meaning; anything else is logged with `what` failed and answered as a generic `internal_error` (its
    /// text stays in the log, never on the wire).
    static func of(_ error: any Error, logger: Logger, what: @autoclosure () -> String) -> PigeonError {
        switch error {
        case let error as PigeonError:
            return error
        case let error as HTTPError:
            let code: ErrorCode =
                switch error.status {
                case .notFound: .notFound
                case .methodNotAllowed: .methodNotAllowed
                case .contentTooLarge: .payloadTooLarge
                case .unauthorized: .unauthorized
                case .badRequest: .invalidRequest
                default: .internalError
                }
            return PigeonError(code, error.body ?? (code == .notFound ? "no such route" : "\(error.status)"))
        case is NIOTooManyBytesError:
            return PigeonError(.payloadTooLarge, "request body too large")
        default:
            logger.error("\(what()) failed", metadata: ["error": "\(error)"])
            return PigeonError(.internalError, "internal error")
        }
    }
}

/// Turns every error into API.md's `{"error": {"code", "message"}}` body (``WireError``).
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            return JSONBody.errorResponse(WireError.of(error, logger: context.logger, what: "request \(request.method) \(request.uri.path)"))
        }
    }
}

extension Request {
    /// An optional integer query parameter within `range`; anything else is a clear 400.
    func integerParameter(_ name: String, range: ClosedRange<Int64>) throws -> Int64? {
        guard let raw: String = uri.queryParameters.get(name) else { return nil }
        guard let value = Int64(raw), range.contains(value) else {
            let upper = range.upperBound == Int64.max ? "" : " to \(range.upperBound)"
            throw PigeonError.invalid("\(name) must be an integer from \(range.lowerBound)\(upper)")
        }
        return value
    }

    /// The `cursor` of a stream or sync request: `?cursor=`, or, where `allowHeader` (SSE), the `Last-Event-ID` header,
    /// which wins over the parameter when both are given. A browser's `EventSource` reconnects to the URL it was opened
    /// with (an old `?cursor=`, say from before a reload) and adds the last id it received: the header is always the
    /// newer position. Either one malformed is a 400.
    func cursorParameter(allowHeader: Bool) throws -> String? {
        let query: String? = uri.queryParameters.get("cursor")
        if let query, EventCursor.isMalformed(query) { throw PigeonError.invalid("cursor is malformed") }
        guard allowHeader, let header = headers[HTTPField.Name("Last-Event-ID")!] else { return query }
        if EventCursor.isMalformed(header) { throw PigeonError.invalid("cursor is malformed (the Last-Event-ID header)") }
        return header
    }
}

extension Parameters {
    /// A path parameter with its percent-encoding undone: a client that encodes every reserved character (a browser's
    /// `encodeURIComponent`) sends `bob%40example.com` for the userId `bob@example.com`. `nil` when the parameter is
    /// absent or its percent-encoding is malformed (then it is no valid value either).
    func decoded(_ name: String) -> String? {
        get(name)?.removingPercentEncoding
    }
}
