/// `POST /v1/devices` request body: open registration of a device for a user.
public struct RegisterDeviceRequest: Codable, Sendable, Equatable {
    /// The app-chosen user id, 1–64 characters of `[A-Za-z0-9._@-]`.
    public var userId: String
    /// A human-readable name for the device ("laptop"); optional, at most 128 characters.
    public var deviceName: String?

    public init(userId: String, deviceName: String? = nil) {
        self.userId = userId
        self.deviceName = deviceName
    }
}

/// `201` answer to ``RegisterDeviceRequest``: the device's identity and its bearer token.
///
/// The token is shown once: the server stores only its hash.
public struct DeviceRegistration: Codable, Sendable, Equatable {
    public var userId: String
    public var deviceId: String
    public var token: String

    public init(userId: String, deviceId: String, token: String) {
        self.userId = userId
        self.deviceId = deviceId
        self.token = token
    }
}
