import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `redis-server` of a test's own, on 127.0.0.1 and a free port, with its own directory.
///
/// The executable is `$PIGEON_REDIS_SERVER` or `redis-server` on the `PATH`; if neither exists the test fails (it is
/// never skipped). Every test starts its own, so tests can run in parallel. The server is killed when this object
/// goes away, and also when the test process dies without cleaning up (a watchdog beside it notices).
public final class RedisServerProcess: @unchecked Sendable {
    /// The server's working directory (its AOF lives here; kept across ``restart()``).
    public let directory: URL
    /// The TCP port the server listens on (kept across ``restart()``).
    public var port: Int { lock.withLock { _port } }
    /// The URL of database 0.
    public var url: String { "redis://127.0.0.1:\(port)/0" }

    private let executable: String
    private let options: [String]
    private let lock = NSLock()
    private var _port = 0
    /// The shell that runs the server and its watchdog, and the server itself.
    private var running: (wrapper: ChildProcess, server: pid_t)?

    /// Starts a server and waits until it answers.
    ///
    /// - Parameters:
    ///   - appendOnly: AOF with `appendfsync always` (every acknowledged write is on disk), or no persistence at all.
    ///   - extraArguments: more `redis-server` options, such as `["--requirepass", "secret"]`.
    public init(appendOnly: Bool = true, extraArguments: [String] = []) async throws {
        self.executable = try Self.findExecutable()
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent("pigeon-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var options = ["--bind", "127.0.0.1", "--daemonize", "no", "--save", "", "--logfile", "redis.log"]
        options += appendOnly ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]
        self.options = options + extraArguments
        // Another test may take the free port before this server binds it: try again on a new one.
        var lastError: (any Error)?
        for _ in 0..<5 {
            let port = try freePort()
            lock.withLock { _port = port }
            do {
                try await launch()
                return
            } catch {
                lastError = error
            }
        }
        throw lastError!
    }

    /// Kills the server; the wrapper is reaped by its ``ChildProcess`` on a thread of its own, and the directory is
    /// removed there too once the server is gone (nothing here blocks a thread of the concurrency pool).
    deinit {
        let directory = self.directory
        let server = running?.server
        if let running {
            Self.signal(running.server, SIGKILL)
            running.wrapper.signal(SIGKILL)
        }
        Thread {
            if let server {
                let deadline = Date().addingTimeInterval(10)
                while Glibc.kill(server, 0) == 0 && Date() < deadline { usleep(10_000) }
            }
            try? FileManager.default.removeItem(at: directory)
        }.start()
    }

    /// Kills the server with SIGKILL (a crash: nothing is flushed beyond what is already on disk) and waits until it
    /// is gone.
    public func kill() async {
        await terminate(signal: SIGKILL)
    }

    /// Stops the server with SIGTERM (a clean shutdown) and waits until it is gone.
    public func stop() async {
        await terminate(signal: SIGTERM)
    }

    /// Starts the server again on the same port and directory (so the AOF is replayed), after killing it (SIGKILL)
    /// if it still runs; waits until it answers.
    public func restart() async throws {
        await kill()
        var lastError: (any Error)?
        for _ in 0..<10 {
            do {
                try await launch()
                return
            } catch {
                // The port may be briefly taken: wait and try again.
                lastError = error
                try await Task.sleep(for: .milliseconds(300))
            }
        }
        throw lastError!
    }

    private func launch() async throws {
        let port = self.port
        let pidFile = directory.appendingPathComponent("redis.pid").path
        try? FileManager.default.removeItem(atPath: pidFile)
        // The shell starts the server, records its pid, and kills it if this test process disappears.
        let script = """
            cd "$1" || exit 1
            shift
            parent=$1
            shift
            "$@" &
            server=$!
            echo $server > redis.pid
            ( while kill -0 $parent 2>/dev/null && kill -0 $server 2>/dev/null; do sleep 1; done; kill -9 $server 2>/dev/null ) &
            wait $server
            """
        let arguments =
            ["/bin/sh", "-c", script, "sh", directory.path, String(getpid()), executable, "--port", String(port), "--dir", directory.path]
            + options
        let wrapper = try ChildProcess(arguments)
        var server: pid_t?
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if !wrapper.isRunning {
                throw TestFailure("redis-server exited at start on port \(port): \(logTail())")
            }
            if server == nil, let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
                let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                server = pid
                lock.withLock { running = (wrapper, pid) }
            }
            if server != nil, try await onOwnThread({ Self.answersPing(port: port) }) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        if let server { Self.signal(server, SIGKILL) }
        wrapper.signal(SIGKILL)
        throw TestFailure("redis-server did not answer PING within 30 s on port \(port): \(logTail())")
    }

    private func terminate(signal: Int32) async {
        guard let running = lock.withLock({ self.running }) else { return }
        Self.signal(running.server, signal)
        _ = try? await running.wrapper.waitForExit(timeout: .seconds(60), what: "redis-server after signal \(signal)")
        lock.withLock { self.running = nil }
    }

    private static func signal(_ pid: pid_t, _ signal: Int32) {
        #if canImport(Glibc)
        _ = Glibc.kill(pid, signal)
        #else
        _ = Darwin.kill(pid, signal)
        #endif
    }

    /// The end of the server's log, for failure messages.
    public func logTail() -> String {
        let log = (try? String(contentsOf: directory.appendingPathComponent("redis.log"), encoding: .utf8)) ?? "(no log)"
        return String(log.suffix(2000))
    }

    private static func findExecutable() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["PIGEON_REDIS_SERVER"], !path.isEmpty {
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw TestFailure("PIGEON_REDIS_SERVER=\(path) is not an executable file")
            }
            return path
        }
        for directory in (environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let path = "\(directory)/redis-server"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        throw TestFailure("redis-server not found on the PATH: install Redis or set PIGEON_REDIS_SERVER to its path")
    }

    /// Whether something on the port answers a RESP PING (blocking, up to 1 s: called on a thread of its own) (`+PONG`, or `-NOAUTH` when a password is required).
    private static func answersPing(port: Int) -> Bool {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return false }
        let ping = Array("PING\r\n".utf8)
        guard send(fd, ping, ping.count, 0) == ping.count else { return false }
        var reply = [UInt8](repeating: 0, count: 64)
        let count = recv(fd, &reply, reply.count, 0)
        guard count > 0 else { return false }
        let text = String(decoding: reply[0..<count], as: UTF8.self)
        return text.hasPrefix("+PONG") || text.hasPrefix("-NOAUTH")
    }
}
