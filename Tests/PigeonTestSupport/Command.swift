import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Runs a command to its end, with a clean signal state: Foundation's `Process` hands the test process's blocked
/// signal mask to its children (a server started that way ignores SIGTERM) and was seen missing a child's exit.
public enum Command {
    /// Runs `arguments` (the first looked up on PATH) to its end, returns its output (stdout and stderr); throws if it
    /// fails or still runs after `timeout` (then it is killed). It waits without blocking a thread (``ChildProcess``).
    @discardableResult
    public static func run(_ arguments: [String], timeout: Duration = .seconds(120)) async throws -> String {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-command-\(UUID().uuidString)").path
        defer { unlink(outputPath) }
        let child = try ChildProcess(["/usr/bin/env"] + arguments, stdout: outputPath, truncate: true)
        let code = try await child.waitForExit(timeout: timeout, what: arguments.joined(separator: " "))
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        guard code == 0 else {
            throw TestFailure("\(arguments.joined(separator: " ")) failed (exit \(code)): \(output)")
        }
        return output
    }

    /// Starts `arguments` (the first an absolute path) with a clean signal state, stdin from /dev/null and
    /// stdout + stderr to `outputPath` (or /dev/null); the caller waits for it.
    public static func spawn(_ arguments: [String], outputPath: String? = nil) throws -> pid_t {
        try spawn(arguments, stdout: outputPath ?? "/dev/null", stderr: nil, truncate: true)
    }

    /// Starts `arguments` (the first an absolute path) with a clean signal state, `environment` (default: this
    /// process's), stdin read from `stdin`, stdout to `stdout` and stderr to `stderr` (nil: with stdout); the
    /// output files are appended to unless `truncate`. The caller waits for it.
    public static func spawn(
        _ arguments: [String], environment: [String: String]? = nil, stdin: String = "/dev/null", stdout: String, stderr: String?,
        truncate: Bool = false
    ) throws -> pid_t {
        #if canImport(Glibc)
        var attributes = posix_spawnattr_t()
        var fileActions = posix_spawn_file_actions_t()
        #else
        var attributes: posix_spawnattr_t?
        var fileActions: posix_spawn_file_actions_t?
        #endif
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        posix_spawn_file_actions_init(&fileActions)
        defer { posix_spawn_file_actions_destroy(&fileActions) }
        let mode = O_WRONLY | O_CREAT | (truncate ? O_TRUNC : O_APPEND)
        posix_spawn_file_actions_addopen(&fileActions, 0, stdin, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&fileActions, 1, stdout, mode, 0o644)
        if let stderr {
            posix_spawn_file_actions_addopen(&fileActions, 2, stderr, mode, 0o644)
        } else {
            posix_spawn_file_actions_adddup2(&fileActions, 1, 2)
        }
        // Only stdin, stdout and stderr: without this the child inherits every descriptor the test process has open
        // without close-on-exec, such as an in-process server's listening socket, and keeps that port bound after
        // the server stops (its restart then cannot listen). glibc ignores a descriptor closed meanwhile.
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.compactMap { Int32($0) } ?? []
        for descriptor in open where descriptor > 2 {
            posix_spawn_file_actions_addclose(&fileActions, descriptor)
        }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer {
            for argument in argv { free(argument) }
            for variable in envp ?? [] { free(variable) }
        }
        var pid = pid_t()
        let spawned = envp.map { envp in posix_spawn(&pid, arguments[0], &fileActions, &attributes, argv, envp) }
            ?? posix_spawn(&pid, arguments[0], &fileActions, &attributes, argv, environ)
        guard spawned == 0 else { throw TestFailure("cannot start \(arguments.joined(separator: " ")): error \(spawned)") }
        return pid
    }
}
