import Foundation
import NIOCore
import NIOHTTP1
import PigeonDomain
import PigeonProtocol

/// An answer the connection guard gives a client just before it closes the connection: API.md's JSON error body,
/// `Connection: close`, and the name under which `pigeon_limit_hits_total` counts it (if it is a limit).
struct ConnectionRefusal: Sendable {
    let status: HTTPResponseStatus
    let code: ErrorCode
    let message: String
    /// The `limit` label of `pigeon_limit_hits_total`; `nil`: not a limit, not counted.
    let limit: String?
    /// Seconds of `Retry-After`, if any.
    var retryAfter: Int?

    static let headTimeout = ConnectionRefusal(
        status: .requestTimeout, code: ErrorCode(rawValue: "request_timeout"),
        message: "the request head was not complete in time", limit: "head_timeout")
    static let bodyTimeout = ConnectionRefusal(
        status: .requestTimeout, code: ErrorCode(rawValue: "request_timeout"),
        message: "the request body was not complete in time", limit: "body_timeout")
    static let requestLineTooLong = ConnectionRefusal(
        status: .uriTooLong, code: .invalidRequest, message: "the request line is too long", limit: "request_line_too_long")
    static let headersTooLarge = ConnectionRefusal(
        status: .requestHeaderFieldsTooLarge, code: .invalidRequest, message: "the request headers are too large", limit: "headers_too_large")
    static let tooManyHeaders = ConnectionRefusal(
        status: .requestHeaderFieldsTooLarge, code: .invalidRequest, message: "the request has too many header fields", limit: "headers_too_large")
    static let malformed = ConnectionRefusal(
        status: .badRequest, code: .invalidRequest, message: "malformed HTTP request", limit: "malformed_request")
    static let tooManyConnections = ConnectionRefusal(
        status: .serviceUnavailable, code: .overloaded, message: "too many connections from this address", limit: "connections_per_address",
        retryAfter: 1)

    /// The refusal of a WebSocket request from a page of an origin the CORS configuration does not allow.
    static func webSocketOrigin(_ origin: String) -> ConnectionRefusal {
        ConnectionRefusal(
            status: .forbidden, code: .forbidden,
            message: "the origin \(origin.prefix(200)) may not open this server's WebSocket (--cors-origin)", limit: nil)
    }

    /// The refusal of a WebSocket upgrade for what the request carries (its token: `401`, its cursor: `400`, the
    /// store not answering: `503`), with the error body an HTTP call gets for the same.
    static func webSocketUpgrade(_ error: PigeonError) -> ConnectionRefusal {
        ConnectionRefusal(
            status: HTTPResponseStatus(statusCode: error.code.httpStatus), code: error.code, message: error.message, limit: nil,
            retryAfter: error.retryAfter)
    }

    /// The refusal for an error of the HTTP parser.
    static func parserError(_ error: HTTPParserError) -> ConnectionRefusal {
        error == .headerOverflow ? .headersTooLarge : .malformed
    }

    /// The whole HTTP/1.1 response, ready for the socket.
    func response(allocator: ByteBufferAllocator) -> ByteBuffer {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = (try? encoder.encode(ErrorBody(code: code, message: message))) ?? Data()
        var head = "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n"
        head += "Content-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n"
        if let retryAfter { head += "Retry-After: \(retryAfter)\r\n" }
        head += "\r\n"
        var buffer = allocator.buffer(capacity: head.utf8.count + body.count)
        buffer.writeString(head)
        buffer.writeBytes(body)
        return buffer
    }
}
