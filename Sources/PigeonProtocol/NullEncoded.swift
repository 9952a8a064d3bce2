/// An optional field of the wire contract: always present, `null` when absent (docs/API.md: every field of an answer
/// is always there). Swift's synthesized `Encodable` leaves an absent optional out; a property wrapped in this writes
/// `null` instead, so a type needs no hand-written `encode(to:)` just for that:
///
/// ```swift
/// struct Conversation: Codable {
///     @NullEncoded var name: String?
/// }
/// ```
///
/// Decoding is as lenient as for a plain optional: the key may be absent (an older server) or `null`, both `nil`.
/// Callers see a plain `name: String?`; the wrapper is only the property's storage.
@propertyWrapper
public struct NullEncoded<Wrapped> {
    public var wrappedValue: Wrapped?

    public init(wrappedValue: Wrapped?) {
        self.wrappedValue = wrappedValue
    }
}

extension NullEncoded: Sendable where Wrapped: Sendable {}
extension NullEncoded: Equatable where Wrapped: Equatable {}
extension NullEncoded: Hashable where Wrapped: Hashable {}

extension NullEncoded: Encodable where Wrapped: Encodable {
    /// The value, or `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

extension NullEncoded: Decodable where Wrapped: Decodable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        wrappedValue = container.decodeNil() ? nil : try container.decode(Wrapped.self)
    }
}

extension KeyedEncodingContainer {
    /// What synthesized `encode(to:)` calls for a ``NullEncoded`` property: the key, with the value or `null`.
    public mutating func encode<Wrapped: Encodable>(_ value: NullEncoded<Wrapped>, forKey key: Key) throws {
        if let wrapped = value.wrappedValue { try encode(wrapped, forKey: key) } else { try encodeNil(forKey: key) }
    }
}

extension KeyedDecodingContainer {
    /// What synthesized `init(from:)` calls for a ``NullEncoded`` property: an absent key decodes as `nil`, as for a
    /// plain optional (without this overload a missing key would be an error).
    public func decode<Wrapped: Decodable>(_ type: NullEncoded<Wrapped>.Type, forKey key: Key) throws -> NullEncoded<Wrapped> {
        NullEncoded(wrappedValue: try decodeIfPresent(Wrapped.self, forKey: key))
    }
}
