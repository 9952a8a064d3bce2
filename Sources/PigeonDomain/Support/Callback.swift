/// A closure to keep in a lock-protected slot (`NIOLockedValueBox<Callback<…>?>`).
///
/// A bare closure must not be the box's value: `withLockedValue { $0 }` passes the value `inout` through the box's
/// generic signature, so each read wraps the stored closure in two more reabstraction thunks and writes it back.
/// An observer read on every publication grew a chain as long as the server had been running, and each call walked
/// all of it: with pushes on, half the server's CPU went to thunks after a minute of load and delivery's p99 rose from
/// 5 ms to over 100 ms (perf, pigeon-bench --offline-push-members 2). A struct field keeps the closure as it is.
package struct Callback<Argument>: Sendable {
    package let call: @Sendable (Argument) -> Void

    package init(_ call: @escaping @Sendable (Argument) -> Void) {
        self.call = call
    }
}
