/// A JSON value whose objects keep their members in the order they were written: the contract documents
/// (``OpenAPIDocument``, ``AsyncAPIDocument``) are built with it, so one table always gives the same bytes.
public indirect enum JSONNode: Sendable, Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case string(String)
    case array([JSONNode])
    case object([Member])

    /// One member of an object.
    public struct Member: Sendable, Equatable {
        public var key: String
        public var value: JSONNode
    }

    /// The value of `key` in an object (`nil` for a missing key or another kind of value).
    public subscript(key: String) -> JSONNode? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// The object with `members` added after its own; a key already present gets the new value in its old place.
    package func merging(_ members: [Member]) -> JSONNode {
        guard case .object(var own) = self else { return self }
        for member in members {
            if let index = own.firstIndex(where: { $0.key == member.key }) { own[index].value = member.value } else { own.append(member) }
        }
        return .object(own)
    }

    /// An object of the non-`nil` values, in order.
    package static func fields(_ pairs: [(String, JSONNode?)]) -> JSONNode {
        .object(pairs.compactMap { key, value in value.map { Member(key: key, value: $0) } })
    }

    /// The JSON text: two spaces of indentation per level, one member or element per line, `\n` at the end.
    public var prettyPrinted: String {
        var text = ""
        write(to: &text, indent: 0)
        text += "\n"
        return text
    }

    private func write(to text: inout String, indent: Int) {
        switch self {
        case .null: text += "null"
        case .bool(let value): text += value ? "true" : "false"
        case .integer(let value): text += String(value)
        case .string(let value): Self.writeString(value, to: &text)
        case .array(let elements):
            guard !elements.isEmpty else {
                text += "[]"
                return
            }
            text += "[\n"
            for (index, element) in elements.enumerated() {
                text += String(repeating: " ", count: indent + 2)
                element.write(to: &text, indent: indent + 2)
                text += index == elements.count - 1 ? "\n" : ",\n"
            }
            text += String(repeating: " ", count: indent) + "]"
        case .object(let members):
            guard !members.isEmpty else {
                text += "{}"
                return
            }
            text += "{\n"
            for (index, member) in members.enumerated() {
                text += String(repeating: " ", count: indent + 2)
                Self.writeString(member.key, to: &text)
                text += ": "
                member.value.write(to: &text, indent: indent + 2)
                text += index == members.count - 1 ? "\n" : ",\n"
            }
            text += String(repeating: " ", count: indent) + "}"
        }
    }

    private static func writeString(_ value: String, to text: inout String) {
        text += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\t": text += "\\t"
            case "\r": text += "\\r"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: text.unicodeScalars.append(scalar)
            }
        }
        text += "\""
    }
}

extension JSONNode: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONNode...) { self = .array(elements) }
    /// Keeps the literal's order.
    public init(dictionaryLiteral elements: (String, JSONNode)...) { self = .object(elements.map { Member(key: $0.0, value: $0.1) }) }
    public init(nilLiteral: ()) { self = .null }
}
