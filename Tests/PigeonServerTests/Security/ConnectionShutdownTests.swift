import Foundation
import PigeonTestSupport
import Testing

/// Graceful shutdown of the real `pigeon-server` binary is not held by connections that never complete a request
/// head: SIGTERM closes them at once.
@Suite struct ConnectionShutdownTests {
    @Test func sigtermWithHalfOpenConnectionsExitsPromptly() async throws {
        let directory = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let backend = try await TestBackendInstance.make()
        let server = try await ServerProcess(dataDirectory: directory, backend: backend)
        var connections: [RawConnection] = []
        for index in 0..<5 {
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send("GET /healthz HTTP/1.1\r\nHost: pigeon\r\nX-Half: \(index)")
            connections.append(connection)
        }
        for _ in 0..<3 { connections.append(try await RawConnection.open(port: server.port)) }
        // The server has taken every connection (and the half heads) before the signal.
        #expect(try await server.client.request(.GET, "/healthz").status == 200)

        let start = ContinuousClock.now
        let status = try await server.stop(signal: SIGTERM, timeout: .seconds(15))
        let elapsed = ContinuousClock.now - start
        #expect(status == 0, "graceful shutdown must exit 0; log: \(server.log())")
        #expect(elapsed < .seconds(8), "half-sent heads must not hold the shutdown (took \(elapsed))")
        for connection in connections {
            #expect(await connection.waitForClose(within: .seconds(2)), "every connection is closed by the shutdown")
        }
        await backend.tearDown()
    }
}
