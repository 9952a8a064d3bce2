import PigeonBenchSupport
import Synchronization

/// The errors of the connections that failed during a scenario. Connections run as child tasks until the
/// scenario cancels them; one that fails records its error here, and the scenario's waits stop at the first one.
final class FailureLog: Sendable {
    private let failures = Mutex<[String]>([])

    /// Runs `connection`, recording its error unless the task was cancelled (the normal way a connection ends).
    func capture(_ context: String, _ connection: () async throws -> Void) async {
        do {
            try await connection()
        } catch {
            guard !Task.isCancelled else { return }
            failures.withLock { $0.append("\(context): \(error)") }
        }
    }

    /// Throws the first recorded failure, if any.
    func throwIfAny() throws {
        if let first = failures.withLock({ $0.first }) {
            throw BenchError.connectionFailed(first)
        }
    }
}

/// Polls `condition` until it holds (returns `true`) or `deadline` passes (returns `false`).
/// Throws as soon as `failures` records a failed connection.
@discardableResult
func waitUntil(
    _ deadline: ContinuousClock.Instant,
    polling interval: Duration = .milliseconds(10),
    failures: FailureLog? = nil,
    _ condition: () async throws -> Bool
) async throws -> Bool {
    while true {
        try failures?.throwIfAny()
        if try await condition() { return true }
        if ContinuousClock.now >= deadline { return false }
        try await Task.sleep(for: interval)
    }
}

/// A count shared between tasks.
final class Counter: Sendable {
    private let value = Atomic<Int>(0)

    func increment() {
        value.add(1, ordering: .relaxed)
    }

    var count: Int { value.load(ordering: .relaxed) }
}

/// Runs `operation`, cancelling it and throwing ``BenchError/timedOut(_:)`` if it takes longer than `limit`.
func withTimeLimit<Value: Sendable>(
    _ limit: Duration,
    _ what: String,
    _ operation: @escaping @Sendable () async throws -> Value
) async throws -> Value {
    try await withThrowingTaskGroup(of: Value?.self) { group in
        group.addTask { try await operation() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard case .some(.some(let value)) = try await group.next() else { throw BenchError.timedOut(what) }
        return value
    }
}
