import Foundation

/// Polls `condition` every `interval` until it holds or `timeout` has passed, checking once more at the deadline;
/// whether it held. For a test that then expects a value (`#expect(await eventually { … })`).
public func eventually(
    within timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(20), _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}

/// Polls `condition` like ``eventually(within:every:_:)`` and throws a ``TestFailure`` naming `what` (and what
/// `describe` says of the state then) if it did not hold within `timeout`. For a step a test cannot go on without.
public func waitUntil(
    _ what: @autoclosure () -> String, timeout: Duration = .seconds(20), every interval: Duration = .milliseconds(20),
    describe: () async -> String = { "" }, _ condition: () async throws -> Bool
) async throws {
    if try await eventually(within: timeout, every: interval, condition) { return }
    let state = await describe()
    throw TestFailure("timed out after \(timeout) waiting until \(what())" + (state.isEmpty ? "" : "\n" + state))
}

/// A new, empty directory under the system's temporary directory, its name starting with `prefix`.
public func makeTemporaryDirectory(_ prefix: String = "pigeon-test") -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)").path
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}
