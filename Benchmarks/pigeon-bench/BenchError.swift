import Foundation

/// Why a benchmark run could not go on.
enum BenchError: Error, CustomStringConvertible {
    /// A system call failed with `errno`.
    case system(String, Int32)
    /// An executable the run needs is missing.
    case missingExecutable(String)
    /// A child process exited before it was ready; `logTail` is the end of its output.
    case processExited(String, status: Int32, logTail: String)
    /// An HTTP answer the wire contract does not allow for this request.
    case unexpectedResponse(request: String, status: UInt, body: String)
    /// A WebSocket message that is not a server frame of the wire contract.
    case unexpectedFrame(String)
    /// An MQTT broker answered outside the protocol.
    case mqttProtocol(String)
    /// A NATS server answered outside the protocol, or JetStream refused a request (the detail has its answer).
    case natsProtocol(String)
    /// Something did not happen in time.
    case timedOut(String)
    /// A connection of a scenario failed.
    case connectionFailed(String)
    /// The run lacks a setting it needs (e.g. the PostgreSQL or Redis URL of the production backends).
    case missingSetting(String)
    /// A command-line tool the run uses (psql, redis-cli) failed.
    case commandFailed(String)

    var description: String {
        switch self {
        case .system(let call, let code): "\(call) failed: errno \(code)" + (code == 0 ? "" : " (\(String(cString: strerror(code))))")
        case .missingExecutable(let detail): detail
        case .processExited(let name, let status, let logTail): "\(name) exited with status \(status) before it was ready:\n\(logTail)"
        case .unexpectedResponse(let request, let status, let body): "\(request) answered \(status): \(body)"
        case .unexpectedFrame(let text): "unexpected WebSocket message: \(text)"
        case .mqttProtocol(let detail): "MQTT: \(detail)"
        case .natsProtocol(let detail): "NATS: \(detail)"
        case .timedOut(let what): "timed out: \(what)"
        case .connectionFailed(let detail): "connection failed: \(detail)"
        case .missingSetting(let detail): detail
        case .commandFailed(let detail): detail
        }
    }
}
