import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import PigeonKit
import PigeonProtocol
import PigeonServer
import PigeonTestSupport

/// A real embedded Pigeon server in this process, on a fixed loopback port and data directory, so it can be
/// stopped and started again (a restart keeps its data, and clients reconnect to the same URL).
final class KitTestServer: Sendable {
    private let server: InProcessServer

    var port: Int { server.port }
    var dataDirectory: String { server.configuration.dataDirectory }
    var url: URL { server.url }

    private init(_ server: InProcessServer) {
        self.server = server
    }

    static func start(configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }) async throws -> KitTestServer {
        var configuration = ServerConfiguration()
        // Port 0: the server binds a port the system chooses and keeps it across restarts (a port picked free beforehand
        // could be taken by another test's socket before the bind: "Address already in use").
        configuration.port = 0
        configuration.dataDirectory = makeTemporaryDirectory()
        configuration.durable = false
        configuration.keepAliveInterval = .seconds(1)
        configuration.shutdownDrainTimeout = .seconds(2)
        configure(&configuration)
        var logger = Logger(label: "pigeonkit-test-server")
        logger.logLevel = .critical
        let server = KitTestServer(InProcessServer(configuration: configuration, logger: logger))
        try await server.start()
        return server
    }

    func start() async throws {
        try await server.start()
        try await waitUntil("the server answers /healthz", timeout: .seconds(20)) {
            let request = HTTPClientRequest(url: self.url.absoluteString + "/healthz")
            let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(1))
            return response?.status == .ok
        }
    }

    /// Stops the server (gracefully: it drains what it accepted) and waits until it is down.
    func stop() async {
        await server.stop()
    }

    func restart() async throws {
        await stop()
        try await start()
    }

    /// A conversation's stored messages as the server has them (through a member's token), ascending seq.
    func history(conversationId: String, token: String) async throws -> [Message] {
        var all: [Message] = []
        var after: Int64 = 0
        while true {
            var request = HTTPClientRequest(url: url.absoluteString + "/v1/conversations/\(conversationId)/messages?after=\(after)&limit=500")
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: 64 << 20)
            guard response.status == .ok else { throw TestFailure("history: \(response.status)") }
            let page = try JSONDecoder().decode(MessagePage.self, from: Data(buffer: body))
            all += page.messages
            guard page.hasMore, let last = page.messages.last else { return all }
            after = last.seq
        }
    }
}

/// Runs `body` with a fresh ``KitTestServer`` and stops it (gracefully, awaited) when `body` returns or throws, so a
/// test's server never outlives the test.
func withKitTestServer<T>(
    configure: @escaping @Sendable (inout ServerConfiguration) -> Void = { _ in }, _ body: (KitTestServer) async throws -> T
) async throws -> T {
    let server = try await KitTestServer.start(configure: configure)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}
