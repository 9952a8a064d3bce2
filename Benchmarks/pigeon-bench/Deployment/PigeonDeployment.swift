import AsyncHTTPClient
import Foundation
import PigeonBenchSupport

/// The Pigeon server(s) a set of scenarios runs against: one node, or several nodes of one service (same store and
/// buffer). Scenarios spread their connections over the nodes in turn.
struct PigeonDeployment: Sendable {
    /// The per-address and per-user limits a load generator trips by design (thousands of devices and streams
    /// from one loopback address, a few users sending at full speed) turned off: docs/SECURITY.md lists them.
    static let loadGeneratorLimits = [
        "--registration-rate", "0", "--stored-bytes-per-minute", "0", "--conversations-per-minute", "0", "--max-connections-per-address", "0",
        "--stranger-adds-per-hour", "0",
    ]

    /// What is measured: a ``Backend``'s name, or `url` for a server given with --url.
    let label: String
    let nodes: [PigeonServer]
    let http: HTTPClient
    /// The backing services whose CPU the scenarios sample (production backends on this machine).
    let services: [ObservedService]

    /// The label of a deployment given with --url.
    static let givenServerLabel = "url"

    /// The node connection `index` of a scenario uses: the nodes in turn.
    func node(forConnection index: Int) -> PigeonServer {
        nodes[index % nodes.count]
    }

    /// The node the receiver of connection `index` uses: the next one, so that with two nodes every message and
    /// every receipt crosses from one node to the other.
    func partnerNode(forConnection index: Int) -> PigeonServer {
        nodes[(index + 1) % nodes.count]
    }

    func api(_ node: PigeonServer) -> PigeonAPI {
        PigeonAPI(http: http, baseURL: node.baseURL)
    }

    /// For calls that are not measured (registration, conversations, drain checks): the first node. With several
    /// nodes that also checks that what one node created is known to the others.
    var setupAPI: PigeonAPI { api(nodes[0]) }

    /// The nodes' process ids, in node order, for ``LoadMonitor``.
    var pids: [pid_t?] { nodes.map(\.pid) }

    /// Spawns `count` nodes of `binary serve`, one after the other (each ready on `GET /readyz` before the next
    /// starts), each on a free loopback port with a data directory of its own in `workDirectory` and
    /// `arguments` added; runs `body`, and stops the nodes with SIGTERM whatever happens. `prepare` gets each node's
    /// index (from 0) and process id right after the process started, before it is ready (e.g. to confine it to a
    /// CPU share); if it throws, the nodes are stopped and the error is rethrown.
    static func withSpawned<T>(
        label: String,
        nodes count: Int,
        binary: String,
        arguments extraArguments: [String],
        workDirectory: String,
        http: HTTPClient,
        services: [ObservedService],
        startupTimeout: Duration,
        prepare: (_ node: Int, _ pid: pid_t) throws -> Void = { _, _ in },
        _ body: (PigeonDeployment) async throws -> T
    ) async throws -> T {
        var processes: [ChildProcess] = []
        let result: T
        do {
            var nodes: [PigeonServer] = []
            for index in 1...count {
                let port = try await LocalEnvironment.freeLoopbackPort()
                let name = count == 1 ? "pigeon-server" : "pigeon-server node \(index)"
                let dataDirectory = "\(workDirectory)/\(label)-node\(index)"
                try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
                let process = try ChildProcess(
                    name: name,
                    executable: binary,
                    arguments: ["serve", "--host", "127.0.0.1", "--port", String(port), "--data-dir", dataDirectory]
                        + Self.loadGeneratorLimits + extraArguments,
                    logPath: dataDirectory + ".log"
                )
                processes.append(process)
                try prepare(index - 1, process.pid)
                let node = PigeonServer(baseURL: "http://127.0.0.1:\(port)", pid: process.pid)
                try await node.waitUntilReady(http: http, timeout: startupTimeout, process: process)
                nodes.append(node)
            }
            result = try await body(PigeonDeployment(label: label, nodes: nodes, http: http, services: services))
        } catch {
            for process in processes {
                await process.stop()
            }
            throw error
        }
        let stopTimeout = Duration.seconds(15)
        for process in processes {
            if let stopTime = await process.stop(timeout: stopTimeout) {
                print("\(process.name) stopped on SIGTERM in \(Format.seconds(stopTime.seconds))")
            } else {
                print("\(process.name) did not stop within \(stopTimeout) of SIGTERM and was killed")
            }
        }
        return result
    }
}
