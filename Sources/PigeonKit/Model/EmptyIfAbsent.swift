/// A list field of ``PigeonMessage`` added after its Codable form was first published: a form written before it (an
/// app's cache, a test's fixture) has no such key, and reads as empty. Callers see a plain array; the wrapper is only
/// the property's storage.
@propertyWrapper
public struct EmptyIfAbsent<Element: Codable & Sendable & Equatable>: Sendable, Equatable, Codable {
    public var wrappedValue: [Element]

    public init(wrappedValue: [Element]) {
        self.wrappedValue = wrappedValue
    }

    public init(from decoder: any Decoder) throws {
        wrappedValue = try decoder.singleValueContainer().decode([Element].self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(wrappedValue)
    }
}

extension KeyedDecodingContainer {
    /// What synthesized `init(from:)` calls for an ``EmptyIfAbsent`` property: an absent key (or `null`) is empty.
    public func decode<Element>(_ type: EmptyIfAbsent<Element>.Type, forKey key: Key) throws -> EmptyIfAbsent<Element> {
        EmptyIfAbsent(wrappedValue: try decodeIfPresent([Element].self, forKey: key) ?? [])
    }
}
