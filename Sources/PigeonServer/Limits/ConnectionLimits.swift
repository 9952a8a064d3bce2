/// Limits of the HTTP connections themselves, before any route runs.
public struct ConnectionLimits: Sendable {
    public init() {}
}
