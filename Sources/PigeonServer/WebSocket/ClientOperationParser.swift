import Foundation
import PigeonProtocol

/// Decodes WebSocket operations and HTTP send bodies: a fast path for the common shape (a flat JSON object whose
/// strings have no escapes and whose numbers are plain integers), and Foundation's `JSONDecoder` for everything else,
/// so the answer, and every error message, is the same as the decoder's.
enum ClientOperationParser {
    static func parse(_ text: String) throws -> ClientOperation {
        if let operation = fastPath(text) { return operation }
        return try JSONBody.decode(ClientOperation.self, from: Data(text.utf8))
    }

    /// The body of `POST /v1/conversations/{id}/messages`.
    static func parseSend(_ text: String) throws -> SendMessageRequest {
        if let request = fastSendPath(text) { return request }
        return try JSONBody.decode(SendMessageRequest.self, from: Data(text.utf8))
    }

    private enum Value {
        case string(String)
        case integer(Int64)
        case bool(Bool)
    }

    /// `nil` whenever the input is anything but the simple case; the decoder then has the final word.
    static func fastPath(_ text: String) -> ClientOperation? {
        flatObject(text).flatMap(operation)
    }

    /// The fast path of ``parseSend(_:)``: `nil` unless the body is the simple case.
    static func fastSendPath(_ text: String) -> SendMessageRequest? {
        flatObject(text).flatMap(sendRequest)
    }

    /// The fields of a flat object of strings without escapes, plain integers and booleans, each key once; `nil` for
    /// anything else.
    private static func flatObject(_ text: String) -> [String: Value]? {
        var text = text
        return text.withUTF8 { bytes -> [String: Value]? in
            var fields: [String: Value] = [:]
            var index = 0
            func skipWhitespace() {
                while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                    index += 1
                }
            }
            func string() -> String? {
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
                let start = index + 1
                var end = start
                while end < bytes.count, bytes[end] != UInt8(ascii: "\"") {
                    if bytes[end] == UInt8(ascii: "\\") || bytes[end] < 0x20 { return nil }
                    end += 1
                }
                guard end < bytes.count else { return nil }
                index = end + 1
                return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self)
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "{") else { return nil }
            index += 1
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { return nil }
            while true {
                skipWhitespace()
                guard let key = string() else { return nil }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index += 1
                skipWhitespace()
                guard index < bytes.count else { return nil }
                let value: Value
                switch bytes[index] {
                case UInt8(ascii: "\""):
                    guard let text = string() else { return nil }
                    value = .string(text)
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                    let start = index
                    if bytes[index] == UInt8(ascii: "-") { index += 1 }
                    let digits = index
                    while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
                    guard index > digits, index - digits <= 18 else { return nil }
                    if index < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index]) { return nil }
                    guard let number = Int64(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)) else {
                        return nil
                    }
                    value = .integer(number)
                case UInt8(ascii: "t"), UInt8(ascii: "f"):
                    let isTrue = bytes[index] == UInt8(ascii: "t")
                    let word = Array((isTrue ? "true" : "false").utf8)
                    guard index + word.count <= bytes.count, Array(bytes[index..<(index + word.count)]) == word else { return nil }
                    index += word.count
                    value = .bool(isTrue)
                default:
                    return nil
                }
                guard fields.updateValue(value, forKey: key) == nil else { return nil }
                skipWhitespace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                    continue
                }
                guard bytes[index] == UInt8(ascii: "}") else { return nil }
                index += 1
                break
            }
            skipWhitespace()
            guard index == bytes.count else { return nil }
            return fields
        }
    }

    private static func sendRequest(_ fields: [String: Value]) -> SendMessageRequest? {
        func string(_ key: String) -> String? { if case .string(let value) = fields[key] { value } else { nil } }
        guard let clientMessageId = string("clientMessageId"), let type = string("type"), let body = string("body"),
            case .integer(let clientTimestamp) = fields["clientTimestamp"]
        else { return nil }
        // A reply's or thread's id of another JSON type is the decoder's to refuse.
        if fields["replyTo"] != nil, string("replyTo") == nil { return nil }
        if fields["threadRoot"] != nil, string("threadRoot") == nil { return nil }
        return SendMessageRequest(
            clientMessageId: clientMessageId, type: type, body: body, clientTimestamp: clientTimestamp, replyTo: string("replyTo"),
            threadRoot: string("threadRoot"))
    }

    private static func operation(_ fields: [String: Value]) -> ClientOperation? {
        func string(_ key: String) -> String? { if case .string(let value) = fields[key] { value } else { nil } }
        func integer(_ key: String) -> Int64? { if case .integer(let value) = fields[key] { value } else { nil } }
        guard let op = string("op"), let conversationId = string("conversationId") else { return nil }
        switch op {
        case "send":
            guard let request = sendRequest(fields) else { return nil }
            return .send(conversationId: conversationId, request)
        case "receipt":
            guard let kindName = string("kind"), let kind = ReceiptKind(rawValue: kindName), let upToSeq = integer("upToSeq") else {
                return nil
            }
            return .receipt(conversationId: conversationId, ReceiptRequest(kind: kind, upToSeq: upToSeq))
        case "typing":
            guard case .bool(let active) = fields["active"] else { return nil }
            return .typing(conversationId: conversationId, active: active)
        default:
            return nil
        }
    }
}
