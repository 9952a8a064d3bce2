/// Why the server ended a device's stream on its own: the WebSocket close code and reason a client sees (API.md's
/// close codes), and the reason an SSE stream finished.
public enum StreamEndReason: Sendable, Equatable, CaseIterable {
    /// Over the outbound byte budget: the client does not read fast enough.
    case tooSlow
    /// One write did not complete within the write timeout: the client stopped reading.
    case writeTimeout
    /// The device opened more streams than allowed; this was its oldest.
    case replaced
    /// The device was revoked (`DELETE /v1/devices/{deviceId}`): its token no longer works.
    case revoked

    /// The WebSocket close code and reason (API.md).
    public var webSocketClose: (code: Int, reason: String) {
        switch self {
        case .tooSlow, .writeTimeout: (4008, "too slow: reconnect with your cursor")
        case .replaced: (4009, "replaced by a newer stream of this device")
        case .revoked: (4001, "device revoked: its token no longer works")
        }
    }
}
