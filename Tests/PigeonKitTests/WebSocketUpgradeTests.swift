import Foundation
import Logging
import PigeonKit
import PigeonTestSupport
import Testing

/// The WebSocket's upgrade against servers and networks that fail during it (``ScriptedUpgradeServer``): the client
/// learns of the end of its connection at once, whatever the stage, and never keeps a connection it gave up on.
@Suite(.timeLimit(.minutes(1)))
struct WebSocketUpgradeTests {
    /// A transport to the scripted server. Its liveness interval is long: in these tests only the end of the
    /// connection can end a stream in time.
    private func transport(to server: ScriptedUpgradeServer, connectTimeout: Duration) -> HTTPTransport {
        HTTPTransport(
            baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, token: "token", requestTimeout: .seconds(10),
            connectTimeout: connectTimeout, liveness: .seconds(120), logger: Logger(label: "WebSocketUpgradeTests"))
    }

    @Test func aConnectionClosedBeforeTheAnswerFailsTheAttemptAtOnce() async throws {
        let server = try await ScriptedUpgradeServer.start(.closeBeforeAnswering)
        let transport = transport(to: server, connectTimeout: .seconds(10))
        // It used to go unnoticed: the attempt lasted the whole connect timeout and failed as a timeout.
        let error = await #expect(throws: PigeonClientError.self) {
            _ = try await transport.openStream(kind: .webSocket, cursor: nil)
        }
        #expect(error?.code == .network, "\(String(describing: error))")
        #expect(server.acceptedConnections == 1)
        try await server.stop()
    }

    @Test func aConnectionClosedRightAfterTheSwitchEndsTheStream() async throws {
        let server = try await ScriptedUpgradeServer.start(.closeAfterSwitching)
        let transport = transport(to: server, connectTimeout: .seconds(10))
        // It used to go unnoticed when the end arrived before the WebSocket's handlers were in place (a matter of
        // timing, hence the rounds): the WebSocket looked open until its first ping failed (two minutes here).
        let rounds = 20
        for round in 1...rounds {
            let ended = try await withTimeLimit(.seconds(20), "the end of a WebSocket closed right after its upgrade (round \(round))") {
                do {
                    let connection = try await transport.openStream(kind: .webSocket, cursor: nil)
                    defer { connection.close() }
                    return try await connection.nextBatch() == nil
                } catch let error as PigeonClientError where error.code == .network {
                    // Seen during the upgrade: as good.
                    return true
                }
            }
            #expect(ended)
        }
        #expect(server.acceptedConnections == rounds)
        try await server.stop()
    }

    @Test func anUnansweredUpgradeTimesOutAndClosesItsConnection() async throws {
        let server = try await ScriptedUpgradeServer.start(.neverAnswer)
        let transport = transport(to: server, connectTimeout: .milliseconds(500))
        let error = await #expect(throws: PigeonClientError.self) {
            _ = try await transport.openStream(kind: .webSocket, cursor: nil)
        }
        #expect(error?.code == .timeout, "\(String(describing: error))")
        // The abandoned attempt used to keep its socket (and a task waiting on it) for good.
        #expect(await eventually(within: .seconds(10)) { server.openConnections == 0 }, "\(server.openConnections) connections left open")
        #expect(server.acceptedConnections == 1)
        try await server.stop()
    }
}
