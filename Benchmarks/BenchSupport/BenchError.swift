#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a benchmark run could not go on: one line that says what failed. The static members are the kinds both
/// benchmarks meet; a benchmark adds its own in an extension.
public struct BenchError: Error, CustomStringConvertible {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }

    /// A system call failed with `errno` (0 when there is no errno to tell).
    public static func system(_ call: String, _ code: Int32) -> BenchError {
        BenchError("\(call) failed: errno \(code)" + (code == 0 ? "" : " (\(String(cString: strerror(code))))"))
    }

    /// An executable the run needs is missing.
    public static func missingExecutable(_ detail: String) -> BenchError {
        BenchError(detail)
    }

    /// A child process exited before it was ready; `logTail` is the end of its output.
    public static func processExited(_ name: String, status: Int32, logTail: String) -> BenchError {
        BenchError("\(name) exited with status \(status) before it was ready:\n\(logTail)")
    }

    /// Something did not happen in time.
    public static func timedOut(_ what: String) -> BenchError {
        BenchError("timed out: \(what)")
    }

    /// The run lacks a setting it needs (e.g. the PostgreSQL or Redis URL of the production backends).
    public static func missingSetting(_ detail: String) -> BenchError {
        BenchError(detail)
    }

    /// A command-line tool the run uses (psql, redis-cli) failed.
    public static func commandFailed(_ detail: String) -> BenchError {
        BenchError(detail)
    }
}
