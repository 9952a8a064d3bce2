import Foundation
import PigeonTestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A built executable of this package: next to the test bundle (SwiftPM builds it, the test target depends on it).
func builtProduct(_ name: String) -> String {
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    var directory = executable.deletingLastPathComponent()
    while directory.path != "/" {
        let candidate = directory.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate.path }
        directory = directory.deletingLastPathComponent()
    }
    return executable.deletingLastPathComponent().appendingPathComponent(name).path
}

/// What one run of `pigeon` (or `pigeon-demo`) did.
struct CLIResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var description: String { "exit \(status)\nstdout:\n\(stdout)\nstderr:\n\(stderr)" }

    /// stdout as JSON.
    func json() throws -> Any {
        try JSONSerialization.jsonObject(with: Data(stdout.utf8))
    }
}

/// The built `pigeon` binary, run with a home of its own (`PIGEON_HOME`) and a server.
struct PigeonCLI: Sendable {
    let home: String
    let server: String

    static var binaryPath: String { builtProduct("pigeon") }

    init(server: String) {
        home = makeTemporaryDirectory("pigeon-cli-home")
        self.server = server
    }

    /// Runs `pigeon --server … <arguments>` to its end (killed after `timeout`).
    @discardableResult
    func run(_ arguments: [String], profile: String? = nil, stdin: String? = nil, timeout: Duration = .seconds(60)) async throws -> CLIResult {
        var all = ["--server", server]
        if let profile { all += ["--profile", "\(home)/\(profile)"] }
        return try await runBuiltProduct(
            "pigeon", all + arguments, home: home, stdin: stdin, timeout: timeout, what: "pigeon \(arguments.joined(separator: " "))")
    }
}

/// Runs a built executable of this package to its end (killed after `timeout`) with a home of its own
/// (`PIGEON_HOME`) and none of the test environment's `PIGEON_SERVER`, `PIGEON_PROFILE` or `PIGEON_LOG_LEVEL`;
/// `overriding` sets (or, with `nil`, removes) variables after that.
func runBuiltProduct(
    _ name: String, _ arguments: [String], home: String, stdin: String? = nil, timeout: Duration, what: String? = nil,
    overriding: [String: String?] = [:]
) async throws -> CLIResult {
    var environment = ProcessInfo.processInfo.environment
    environment["PIGEON_HOME"] = home
    environment["PIGEON_SERVER"] = nil
    environment["PIGEON_PROFILE"] = nil
    environment["PIGEON_LOG_LEVEL"] = nil
    for (name, value) in overriding { environment[name] = value }
    let outPath = "\(home)/.out-\(UUID().uuidString)"
    let errPath = "\(home)/.err-\(UUID().uuidString)"
    var inPath = "/dev/null"
    if let stdin {
        inPath = "\(home)/.in-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: inPath, contents: Data(stdin.utf8))
    }
    defer {
        unlink(outPath)
        unlink(errPath)
        if stdin != nil { unlink(inPath) }
    }
    let child = try ChildProcess([builtProduct(name)] + arguments, environment: environment, stdin: inPath, stdout: outPath, stderr: errPath)
    let status = try await child.waitForExit(timeout: timeout, what: what ?? "\(name) \(arguments.joined(separator: " "))")
    return CLIResult(
        status: status,
        stdout: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
}

/// The built `pigeon-server` binary on a fixed port and data directory, so it can be stopped and started again.
final class PigeonServerProcess: @unchecked Sendable {
    let port: Int
    let dataDirectory: String
    /// More `serve` options (a push gateway, say).
    let extraArguments: [String]
    private var process: ChildProcess?

    var url: String { "http://127.0.0.1:\(port)" }

    init(extraArguments: [String] = []) throws {
        port = try freePort()
        dataDirectory = makeTemporaryDirectory("pigeon-cli-server")
        self.extraArguments = extraArguments
    }

    func start() async throws {
        let log = dataDirectory + "/server-\(UUID().uuidString.prefix(8)).log"
        let process = try ChildProcess(
            [builtProduct("pigeon-server"), "serve", "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDirectory, "--log-level", "warning"]
                + extraArguments,
            stdout: log, stderr: nil)
        self.process = process
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if Self.accepts(port: port) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        process.signal(SIGKILL)
        throw TestFailure("pigeon-server did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
    }

    /// SIGTERM (a graceful stop) and wait.
    func stop() async throws {
        guard let process else { return }
        self.process = nil
        process.signal(SIGTERM)
        try await process.waitForExit(timeout: .seconds(30), what: "pigeon-server after SIGTERM")
    }

    private static func accepts(port: Int) -> Bool {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}

