/// JSON Schema (2020-12, the dialect of OpenAPI 3.1 and of AsyncAPI 3.0's default schemas) written as ``JSONNode``s:
/// the few shapes the contract documents use.
package enum Schema {
    /// A reference to a named schema of the document's `components.schemas` (the same path in both documents).
    package static func ref(_ name: String) -> JSONNode {
        ["$ref": .string("#/components/schemas/\(name)")]
    }

    package static func string(
        _ description: String? = nil, format: String? = nil, pattern: String? = nil, minLength: Int? = nil, maxLength: Int? = nil
    ) -> JSONNode {
        .fields([
            ("type", "string"), ("description", description.map(JSONNode.string)), ("format", format.map(JSONNode.string)),
            ("pattern", pattern.map(JSONNode.string)), ("minLength", minLength.map { .integer(Int64($0)) }),
            ("maxLength", maxLength.map { .integer(Int64($0)) }),
        ])
    }

    /// A string of `values`.
    package static func enumeration(_ values: [String], _ description: String? = nil) -> JSONNode {
        .fields([("type", "string"), ("description", description.map(JSONNode.string)), ("enum", .array(values.map(JSONNode.string)))])
    }

    /// Exactly `value` (a frame's `type` or `op`).
    package static func constant(_ value: String) -> JSONNode {
        ["type": "string", "const": .string(value)]
    }

    package static func integer(_ description: String? = nil, minimum: Int64? = nil, maximum: Int64? = nil) -> JSONNode {
        .fields([
            ("type", "integer"), ("format", "int64"), ("description", description.map(JSONNode.string)),
            ("minimum", minimum.map(JSONNode.integer)), ("maximum", maximum.map(JSONNode.integer)),
        ])
    }

    package static func number(_ description: String? = nil, minimum: Int64? = nil) -> JSONNode {
        .fields([("type", "number"), ("description", description.map(JSONNode.string)), ("minimum", minimum.map(JSONNode.integer))])
    }

    package static let boolean: JSONNode = ["type": "boolean"]

    package static func array(_ items: JSONNode, _ description: String? = nil, minItems: Int? = nil, maxItems: Int? = nil) -> JSONNode {
        .fields([
            ("type", "array"), ("description", description.map(JSONNode.string)), ("items", items),
            ("minItems", minItems.map { .integer(Int64($0)) }), ("maxItems", maxItems.map { .integer(Int64($0)) }),
        ])
    }

    /// An object with `properties` (in order); `required` lists the keys always present. Other keys are allowed: a
    /// client ignores unknown fields, and the server ignores them in requests (API.md).
    package static func object(_ description: String? = nil, required: [String], _ properties: [(String, JSONNode)]) -> JSONNode {
        .fields([
            ("type", "object"), ("description", description.map(JSONNode.string)),
            ("required", required.isEmpty ? nil : .array(required.map(JSONNode.string))),
            ("properties", .object(properties.map { JSONNode.Member(key: $0.0, value: $0.1) })),
        ])
    }

    /// `schema` or `null`: a primitive schema gets `null` in its `type`, a reference becomes `anyOf`.
    package static func nullable(_ schema: JSONNode) -> JSONNode {
        if case .string(let type)? = schema["type"] {
            var nullable = schema.merging([.init(key: "type", value: [.string(type), "null"])])
            if case .array(let values)? = schema["enum"] { nullable = nullable.merging([.init(key: "enum", value: .array(values + [.null]))]) }
            return nullable
        }
        return ["anyOf": [schema, ["type": "null"]]]
    }

    /// `schema` with a description (a reference gets it beside `$ref`, which JSON Schema 2020-12 allows).
    package static func described(_ schema: JSONNode, _ description: String) -> JSONNode {
        schema.merging([.init(key: "description", value: .string(description))])
    }
}
