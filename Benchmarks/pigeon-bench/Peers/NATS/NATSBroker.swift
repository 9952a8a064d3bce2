import Foundation
import PigeonBenchSupport

/// A nats-server this run started on a free loopback port with JetStream on and its file storage in the run's
/// directory, holding the benchmark's stream (see ``NATSJetStream/createStream(inbound:writer:)``).
struct NATSBroker: Sendable {
    let port: Int
    let pid: pid_t
    /// The version the server announced in its `INFO`.
    let version: String?

    /// Starts `binary` with JetStream storing in `workDirectory`, waits until it answers a `PING` with JetStream
    /// on, creates the stream, runs `body`, and stops the server with SIGTERM whatever happens.
    static func withBroker<T>(binary: String, workDirectory: String, _ body: (NATSBroker) async throws -> T) async throws -> T {
        let port = try await LocalEnvironment.freeLoopbackPort()
        let directory = workDirectory + "/nats"
        try FileManager.default.createDirectory(atPath: directory + "/jetstream", withIntermediateDirectories: true)
        let process = try ChildProcess(
            name: "nats-server",
            executable: binary,
            arguments: ["-js", "-sd", directory + "/jetstream", "-a", "127.0.0.1", "-p", String(port)],
            logPath: directory + "/nats-server.log"
        )
        let result: T
        do {
            let info = try await waitUntilAcceptingConnections(port: port, process: process)
            guard info.jetstream == true else {
                throw BenchError.natsProtocol("nats-server on port \(port) runs without JetStream:\n\(process.logTail())")
            }
            try await NATSClient.withConnection(port: port, name: "pigeon-bench-setup") { inbound, writer in
                try await NATSJetStream.createStream(inbound: &inbound, writer: writer)
            }
            result = try await body(NATSBroker(port: port, pid: process.pid, version: info.version))
        } catch {
            await process.stop()
            throw error
        }
        await process.stop()
        return result
    }

    /// The fields of the server's `INFO` the run looks at.
    private struct ServerInfo: Decodable, Sendable {
        var version: String?
        var jetstream: Bool?
    }

    private static func waitUntilAcceptingConnections(port: Int, process: ChildProcess) async throws -> ServerInfo {
        var info: ServerInfo?
        let ready = try await waitUntil(.now + .seconds(10), polling: .milliseconds(50)) {
            try process.checkRunning()
            let answer = try? await withTimeLimit(.seconds(1), "a NATS connection") {
                try await NATSClient.withConnection(port: port, name: "pigeon-bench-probe") { inbound, _ in inbound.serverInfo }
            }
            info = answer.flatMap { try? JSONDecoder().decode(ServerInfo.self, from: Data($0.utf8)) }
            return info != nil
        }
        guard ready, let info else {
            throw BenchError.timedOut("nats-server did not accept a connection on port \(port) within 10 s:\n\(process.logTail())")
        }
        return info
    }
}
