import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A child process of a test, started with `posix_spawn` (``Command/spawn(_:environment:stdin:stdout:stderr:truncate:)``)
/// and waited for without ever blocking a thread of Swift concurrency's pool.
///
/// That pool has as many threads as the machine has cores: two on CI's machine. One blocking `waitpid` (or a
/// blocking socket read) on each of them stalls every test of the process, and a few seconds of that made unrelated
/// Redis operations run into their timeouts together. So this type only ever polls with `WNOHANG` between sleeps,
/// and its `deinit` kills a child that still runs and reaps it on a thread of its own. Unlike Foundation's `Process`
/// it has no limit on the test process's descriptors (Foundation's waits in `select()`, which fails past 1,024) and
/// hands the child a clean signal state.
public final class ChildProcess: Sendable {
    public let pid: pid_t
    /// The raw wait status, once the child has been reaped.
    private let reaped = NIOLockedValueBox<Int32?>(nil)

    /// Starts `arguments` (the first an absolute path) in `directory` (default: this process's), with `environment`
    /// (default: this process's), stdin from `stdin`, stdout to `stdout` and stderr to `stderr` (`nil`: with stdout).
    /// Output files are appended to unless `truncate`.
    public init(
        _ arguments: [String], environment: [String: String]? = nil, directory: String? = nil, stdin: String = "/dev/null",
        stdout: String = "/dev/null", stderr: String? = nil, truncate: Bool = false
    ) throws {
        // glibc's posix_spawn_file_actions_addchdir_np is not visible to Swift: coreutils' env changes directory.
        let command = directory.map { ["/usr/bin/env", "--chdir", $0] + arguments } ?? arguments
        pid = try Command.spawn(command, environment: environment, stdin: stdin, stdout: stdout, stderr: stderr, truncate: truncate)
    }

    /// Whether the child still runs (it is reaped once it has ended).
    public var isRunning: Bool { poll() == nil }

    /// Its exit code once it has ended (128 + n for signal n), `nil` while it runs.
    public var exitCode: Int32? { poll().map(Self.exitCode(of:)) }

    /// Sends `signal` unless the child has already been reaped (its pid may then belong to another process).
    public func signal(_ signal: Int32) {
        reaped.withLockedValue { status in
            if status == nil { _ = kill(pid, signal) }
        }
    }

    /// Waits until the child ends and returns its exit code (128 + n for signal n). Past `timeout` it kills the child
    /// (SIGKILL) and throws, naming `what`.
    @discardableResult
    public func waitForExit(timeout: Duration = .seconds(60), what: @autoclosure () -> String = "a child process") async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        var interval = Duration.milliseconds(1)
        while true {
            if let status = poll() { return Self.exitCode(of: status) }
            guard ContinuousClock.now < deadline else {
                signal(SIGKILL)
                throw TestFailure("\(what()) (pid \(pid)) did not end within \(timeout); killed it")
            }
            try? await Task.sleep(for: interval)
            interval = min(interval * 2, .milliseconds(20))
        }
    }

    deinit {
        guard reaped.withLockedValue({ $0 }) == nil else { return }
        let pid = self.pid
        _ = kill(pid, SIGKILL)
        // Reaped on a thread of its own: a blocking waitpid here would hold a thread of the pool.
        Thread {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        }.start()
    }

    /// The wait status if the child has ended (reaping it the first time), `nil` while it runs.
    private func poll() -> Int32? {
        reaped.withLockedValue { reaped in
            if let reaped { return reaped }
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                reaped = status
                return status
            }
            // ECHILD: someone else reaped it; it has ended, how is unknown.
            if result == -1 && errno == ECHILD {
                reaped = 0x7f00
                return reaped
            }
            return nil
        }
    }

    private static func exitCode(of status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

/// Runs `body` on a thread of its own and returns its result: for a blocking call (a socket read with a timeout, a
/// file system walk) in a test, which must not hold one of the few threads of Swift concurrency's pool.
public func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
