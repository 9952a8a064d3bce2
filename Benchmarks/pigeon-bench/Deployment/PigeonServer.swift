import AsyncHTTPClient
import Foundation
import PigeonBenchSupport

/// One Pigeon server process under test: a node this run spawned, or a server already running.
struct PigeonServer: Sendable {
    /// `http://127.0.0.1:PORT`.
    let baseURL: String
    /// The server's process id, for memory and CPU figures; `nil` when unknown.
    let pid: pid_t?

    /// Polls `GET /readyz` until it answers 200; throws early if `process` exits.
    func waitUntilReady(http: HTTPClient, timeout: Duration, process: ChildProcess? = nil) async throws {
        let api = PigeonAPI(http: http, baseURL: baseURL)
        let ready = try await waitUntil(.now + timeout, polling: .milliseconds(100)) {
            try process?.checkRunning()
            return await api.isReady()
        }
        guard ready else { throw BenchError.timedOut("\(baseURL)/readyz did not answer 200 within \(timeout)") }
    }
}
