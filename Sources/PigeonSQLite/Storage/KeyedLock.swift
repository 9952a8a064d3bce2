import NIOConcurrencyHelpers

/// Mutual exclusion per key, for async work: callers of ``withLock(_:_:)`` with the same key run one at a time, in
/// arrival order; different keys never wait for each other.
///
/// The attachment store holds it per content address around "link these bytes to a new row" and "erase bytes no
/// row names", so that a sweep can never erase a file an upload is committing a row for. It is a lock of one
/// process, which is all the embedded store is.
package final class KeyedLock: Sendable {
    /// A key is present while held; its waiters, in arrival order, are handed the lock one after the other.
    private let held = NIOLockedValueBox([String: [CheckedContinuation<Void, Never>]]())

    package init() {}

    /// Runs `body` holding `key`. The wait is not cancellable: what runs under the lock is short and must finish.
    package func withLock<T>(_ key: String, _ body: () async throws -> T) async rethrows -> T {
        await acquire(key)
        defer { release(key) }
        return try await body()
    }

    private func acquire(_ key: String) async {
        let free = held.withLockedValue { held -> Bool in
            if held[key] == nil {
                held[key] = []
                return true
            }
            return false
        }
        if free { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let handedOver = held.withLockedValue { held -> Bool in
                // Released between the two looks: take it now.
                guard held[key] != nil else {
                    held[key] = []
                    return true
                }
                held[key]!.append(continuation)
                return false
            }
            if handedOver { continuation.resume() }
        }
    }

    private func release(_ key: String) {
        let next = held.withLockedValue { held -> CheckedContinuation<Void, Never>? in
            guard var waiters = held[key], !waiters.isEmpty else {
                held[key] = nil
                return nil
            }
            let next = waiters.removeFirst()
            held[key] = waiters
            return next
        }
        next?.resume()
    }
}
