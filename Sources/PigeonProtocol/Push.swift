/// Which push service a device's pushkey belongs to (API.md 1.1, "Push for devices that are not connected"). The
/// push gateway (Sygnal or a compatible one) picks its provider by `appId`; the kind says what the pushkey is.
public enum PushKind: String, Codable, Sendable, CaseIterable {
    /// An APNs device token (iOS, macOS).
    case apns
    /// A Firebase Cloud Messaging registration token (Android, web).
    case fcm
    /// A Web Push subscription endpoint (browsers).
    case webpush
    /// Anything else a gateway understands.
    case other
}

/// `PUT /v1/devices/current/push` request body: where the push gateway should wake this device.
public struct PushRegistrationRequest: Codable, Sendable, Equatable {
    public var kind: PushKind
    /// The app's id at the push gateway ("com.example.chat"): 1-64 characters of `[A-Za-z0-9._-]`, as Matrix pushers.
    public var appId: String
    /// The provider's token for this device: 1-512 bytes of printable ASCII.
    public var pushkey: String
    /// Passed to the gateway as the device's `data` (for example Web Push keys); a JSON object of at most 2048 bytes.
    public var data: [String: JSONValue]?

    public init(kind: PushKind, appId: String, pushkey: String, data: [String: JSONValue]? = nil) {
        self.kind = kind
        self.appId = appId
        self.pushkey = pushkey
        self.data = data
    }

    /// Longest `pushkey`, in bytes (the Matrix pusher limit).
    public static let maxPushkeyBytes = 512
    /// Longest `appId`, in characters (the Matrix pusher limit).
    public static let maxAppIdLength = 64
    /// Largest `data`, as JSON bytes.
    public static let maxDataBytes = 2048

    /// Why this registration cannot be stored, or `nil` when it can (the rules of ``appId`` and ``pushkey``).
    public var problem: String? {
        if appId.isEmpty || appId.count > Self.maxAppIdLength
            || !appId.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-_".unicodeScalars.contains($0)) })
        {
            return "appId must be 1-\(Self.maxAppIdLength) characters of [A-Za-z0-9._-]"
        }
        if pushkey.isEmpty || pushkey.utf8.count > Self.maxPushkeyBytes || !pushkey.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) {
            return "pushkey must be 1-\(Self.maxPushkeyBytes) bytes of printable ASCII without spaces"
        }
        return nil
    }
}

/// `GET /v1/devices/current/push` answer: the calling device's registration and what was last pushed to it.
public struct PushRegistrationInfo: Codable, Sendable, Equatable {
    public var kind: PushKind
    public var appId: String
    public var pushkey: String
    @NullEncoded public var data: [String: JSONValue]?
    /// When the registration was last written (ms since the epoch).
    public var updatedAt: Int64
    /// When the gateway last accepted a push for this device (ms since the epoch); `nil`: never.
    @NullEncoded public var lastPushedAt: Int64?
    /// Whether a push is owed to this device now (waiting for its turn, or for the gateway to answer).
    public var pending: Bool

    public init(
        kind: PushKind, appId: String, pushkey: String, data: [String: JSONValue]?, updatedAt: Int64, lastPushedAt: Int64?, pending: Bool
    ) {
        self.kind = kind
        self.appId = appId
        self.pushkey = pushkey
        self.data = data
        self.updatedAt = updatedAt
        self.lastPushedAt = lastPushedAt
        self.pending = pending
    }
}

/// Any JSON value, kept as it was given (a push registration's `data`).
public enum JSONValue: Codable, Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value):
            // Whole numbers go out without a fraction, as they came in.
            if value.rounded() == value, abs(value) < 9.0e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}
