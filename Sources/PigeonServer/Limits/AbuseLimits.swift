/// Limits of what one user or client address may make the server create and store.
public struct AbuseLimits: Sendable {
    public init() {}
}
