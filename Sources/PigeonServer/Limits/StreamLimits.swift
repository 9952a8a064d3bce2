/// Limits of the event streams (WebSocket and SSE) of one device or connection.
public struct StreamLimits: Sendable {
    public init() {}
}
