import Foundation
import Logging
@testable import PigeonKit
import PigeonTestSupport
import Testing

/// PigeonKit's HTTP/1.1 client (``HTTP1Client``) against a scripted server: connections are kept alive and reused, a
/// request that meets a connection the server closed goes again on a new one, and a request without an answer fails
/// at its timeout and leaves no connection open.
@Suite(.timeLimit(.minutes(1)))
struct HTTPClientTests {
    private func transport(to server: ScriptedUpgradeServer, requestTimeout: Duration = .seconds(10)) -> HTTPTransport {
        HTTPTransport(
            baseURL: URL(string: "http://127.0.0.1:\(server.port)")!, token: "token", requestTimeout: requestTimeout,
            connectTimeout: .seconds(5), liveness: .seconds(120), logger: Logger(label: "HTTPClientTests"))
    }

    @Test func sequentialRequestsShareOneConnection() async throws {
        let server = try await ScriptedUpgradeServer.start(.answerEveryRequest)
        let transport = transport(to: server)
        for _ in 0..<5 { try await transport.postTyping(conversationId: "c", active: true) }
        #expect(server.requests == 5)
        #expect(server.acceptedConnections == 1, "kept alive and reused")
        try await server.stop()
    }

    @Test func aRequestOnAConnectionTheServerClosedGoesAgainOnANewOne() async throws {
        let server = try await ScriptedUpgradeServer.start(.closeOnSecondRequest)
        let transport = transport(to: server)
        try await transport.postTyping(conversationId: "c", active: true)
        // The pooled connection is closed by the server as this request arrives: nothing came back on it.
        try await transport.postTyping(conversationId: "c", active: false)
        #expect(server.acceptedConnections == 2)
        #expect(server.requests == 3, "the second request was read twice: on the closed connection, then on a new one")
        try await server.stop()
    }

    @Test func aRequestWithoutAnAnswerTimesOutAndClosesItsConnection() async throws {
        let server = try await ScriptedUpgradeServer.start(.neverAnswer)
        let transport = transport(to: server, requestTimeout: .milliseconds(500))
        let started = ContinuousClock.now
        let error = await #expect(throws: PigeonClientError.self) {
            try await transport.postTyping(conversationId: "c", active: true)
        }
        #expect(error?.code == .timeout, "\(String(describing: error))")
        #expect(ContinuousClock.now - started < .seconds(5))
        try await waitUntil("the connection is closed") { server.openConnections == 0 }
        try await server.stop()
    }
}
