import Foundation

/// A validator of the JSON Schema subset the contract documents use (`$ref` to `#/components/schemas/...`, `type`
/// (one or a list), `required`, `properties`, `items`, `enum`, `const`, `oneOf`, `anyOf`, `allOf`, `pattern`,
/// `minimum`, `maximum`, `minLength`, `maxLength`, `minItems`, `maxItems`, `format: uuid`), for checking real frames
/// and answers against the documents. A keyword it does not know fails the check, so the documents cannot
/// quietly outgrow it.
struct JSONSchemaSubset: @unchecked Sendable {  // Immutable: the parsed document is only read.
    /// The document whose `components.schemas` references resolve in.
    let document: [String: Any]

    private static let known: Set<String> = [
        "$ref", "type", "required", "properties", "items", "enum", "const", "oneOf", "anyOf", "allOf", "pattern", "minimum", "maximum",
        "minLength", "maxLength", "minItems", "maxItems", "format", "description",
    ]

    /// The problems of `value` against the named schema, empty when it is valid.
    func problems(_ value: Any, against name: String) -> [String] {
        problems(value, ["$ref": "#/components/schemas/\(name)"], at: "$")
    }

    func problems(_ value: Any, _ schema: [String: Any], at path: String) -> [String] {
        var found: [String] = []
        for key in schema.keys where !Self.known.contains(key) { found.append("\(path): the validator does not know the keyword \(key)") }
        if let reference = schema["$ref"] as? String {
            let prefix = "#/components/schemas/"
            guard reference.hasPrefix(prefix), let components = document["components"] as? [String: Any],
                let schemas = components["schemas"] as? [String: Any], let target = schemas[String(reference.dropFirst(prefix.count))] as? [String: Any]
            else { return found + ["\(path): unresolvable \(reference)"] }
            found += problems(value, target, at: path)
        }
        if let types = schema["type"] {
            let allowed = (types as? [String]) ?? [types as? String].compactMap { $0 }
            if !allowed.contains(where: { Self.isOfType(value, $0) }) { return found + ["\(path): \(Self.describe(value)) is not \(allowed)"] }
        }
        if let constant = schema["const"], !Self.equal(value, constant) { found.append("\(path): \(Self.describe(value)) is not \(constant)") }
        if let values = schema["enum"] as? [Any], !values.contains(where: { Self.equal(value, $0) }) {
            found.append("\(path): \(Self.describe(value)) is not one of \(values)")
        }
        if let object = value as? [String: Any] {
            for key in (schema["required"] as? [String]) ?? [] where object[key] == nil { found.append("\(path): missing \(key)") }
            for (key, sub) in (schema["properties"] as? [String: Any]) ?? [:] {
                if let member = object[key], let sub = sub as? [String: Any] { found += problems(member, sub, at: "\(path).\(key)") }
            }
        }
        if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
            for (index, element) in array.enumerated() { found += problems(element, items, at: "\(path)[\(index)]") }
            if let minimum = schema["minItems"] as? Int, array.count < minimum { found.append("\(path): fewer than \(minimum) items") }
            if let maximum = schema["maxItems"] as? Int, array.count > maximum { found.append("\(path): more than \(maximum) items") }
        }
        if let string = value as? String {
            let length = string.unicodeScalars.count
            if let minimum = schema["minLength"] as? Int, length < minimum { found.append("\(path): shorter than \(minimum)") }
            if let maximum = schema["maxLength"] as? Int, length > maximum { found.append("\(path): longer than \(maximum)") }
            if let pattern = schema["pattern"] as? String {
                let regex = try? NSRegularExpression(pattern: pattern)
                if regex?.firstMatch(in: string, range: NSRange(string.startIndex..., in: string)) == nil {
                    found.append("\(path): \"\(string.prefix(80))\" does not match \(pattern)")
                }
            }
            if schema["format"] as? String == "uuid", UUID(uuidString: string) == nil { found.append("\(path): \"\(string.prefix(80))\" is not a UUID") }
        }
        if let number = value as? NSNumber, !Self.isBoolean(value) {
            if let minimum = (schema["minimum"] as? NSNumber)?.int64Value, number.int64Value < minimum { found.append("\(path): below \(minimum)") }
            if let maximum = (schema["maximum"] as? NSNumber)?.int64Value, number.int64Value > maximum { found.append("\(path): above \(maximum)") }
        }
        for sub in (schema["allOf"] as? [[String: Any]]) ?? [] { found += problems(value, sub, at: path) }
        if let branches = schema["anyOf"] as? [[String: Any]], !branches.contains(where: { problems(value, $0, at: path).isEmpty }) {
            found.append("\(path): matches none of anyOf")
        }
        if let branches = schema["oneOf"] as? [[String: Any]] {
            let matching = branches.filter { problems(value, $0, at: path).isEmpty }.count
            if matching != 1 {
                let why = branches.map { problems(value, $0, at: path).first ?? "ok" }
                found.append("\(path): matches \(matching) branches of oneOf, not 1: \(why)")
            }
        }
        return found
    }

    private static func isBoolean(_ value: Any) -> Bool {
        guard let number = value as? NSNumber else { return false }
        // JSONSerialization gives `true` and `false` as NSNumbers of a Bool (Objective-C type `c`).
        return String(cString: number.objCType) == "c"
    }

    private static func isOfType(_ value: Any, _ type: String) -> Bool {
        switch type {
        case "null": value is NSNull
        case "boolean": isBoolean(value)
        case "integer": !isBoolean(value) && (value as? NSNumber).map { $0.doubleValue.rounded() == $0.doubleValue } == true
        case "number": !isBoolean(value) && value is NSNumber
        case "string": value is String
        case "array": value is [Any]
        case "object": value is [String: Any]
        default: false
        }
    }

    private static func equal(_ lhs: Any, _ rhs: Any) -> Bool {
        switch (lhs, rhs) {
        case (let l as String, let r as String): l == r
        case (is NSNull, is NSNull): true
        case (let l as NSNumber, let r as NSNumber): isBoolean(l) == isBoolean(r) && l == r
        default: false
        }
    }

    private static func describe(_ value: Any) -> String {
        guard JSONSerialization.isValidJSONObject([value]), let data = try? JSONSerialization.data(withJSONObject: [value], options: [.fragmentsAllowed])
        else { return "\(value)" }
        return String(String(decoding: data, as: UTF8.self).dropFirst().dropLast().prefix(200))
    }
}
