import Foundation
import PigeonKit
import PigeonTestSupport
import Testing

/// PigeonKit over TLS, against a server behind a TLS-terminating proxy (``TLSProxy``) whose certificate a private
/// authority signed: registration, the WebSocket and the server-sent events stream, HTTP sends, an attachment's
/// upload and download, all through `https`; a certificate the device does not trust is refused.
@Suite(.timeLimit(.minutes(2)))
struct TLSTests {
    private func withProxy<T>(_ body: (KitTestServer, URL) async throws -> T) async throws -> T {
        try await withKitTestServer { server in
            let proxy = try await TLSProxy.start(upstreamPort: server.port)
            defer { Task { try? await proxy.stop() } }
            return try await body(server, URL(string: "https://127.0.0.1:\(proxy.port)")!)
        }
    }

    private func register(_ userId: String, on url: URL, transport: PigeonClient.StreamTransport) async throws -> TestDevice {
        let credentials = try await PigeonClient.registerDevice(
            serverURL: url, userId: userId, trustedCertificates: [TestCertificates.authorityPEM])
        return try TestDevice.open(credentials: credentials, serverURL: url, databasePath: makeTemporaryDirectory() + "/db.sqlite") {
            $0.trustedCertificates = [TestCertificates.authorityPEM]
            $0.streamTransport = transport
        }
    }

    @Test(arguments: [PigeonClient.StreamTransport.webSocket, .serverSentEvents])
    func everythingWorksThroughTheProxy(transport: PigeonClient.StreamTransport) async throws {
        try await withProxy { _, url in
            let alice = try await register("alice", on: url, transport: transport)
            let bob = try await register("bob", on: url, transport: transport)
            try await startAll(alice, bob)
            let conversation = try await makeConversation([alice, bob])
            let photo = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            let message = try alice.client.send("over TLS", to: conversation, attachments: [.data(photo, name: "photo.jpg")])
            try await alice.waitForStatus(message.localId, atLeast: .delivered)
            let got = try #require(try bob.allMessages(in: conversation).first { $0.body == "over TLS" })
            #expect(try await bob.client.attachmentData(id: try #require(got.attachments.first?.id)) == photo)
            try bob.client.markRead(conversationId: conversation)
            try await alice.waitForStatus(message.localId, atLeast: .read)
            #expect(isMonotonic(alice.statusHistory(localId: message.localId)))
            await alice.client.stop()
            await bob.client.stop()
        }
    }

    @Test func aCertificateTheDeviceDoesNotTrustIsRefused() async throws {
        try await withProxy { _, url in
            let error = await #expect(throws: PigeonClientError.self) {
                _ = try await PigeonClient.registerDevice(serverURL: url, userId: "alice", timeout: .seconds(10))
            }
            #expect(error?.code == .network, "\(String(describing: error))")
            #expect("\(String(describing: error))".lowercased().contains("certificate"), "the error names the certificate: \(String(describing: error))")
        }
    }

    /// A refused handshake drops the connection it was building. The HTTP connection's async wrapper used to be built
    /// before the handshake was awaited, so a refusal dropped it unfinished, and SwiftNIO stops the process for that
    /// ("Deinited NIOAsyncWriter without calling finish()"): one refusal in a few crashed the app.
    @Test func refusedHandshakesOneAfterAnotherNeverCrashTheApp() async throws {
        try await withProxy { _, url in
            for attempt in 0..<40 {
                let error = await #expect(throws: PigeonClientError.self, "attempt \(attempt)") {
                    _ = try await PigeonClient.registerDevice(serverURL: url, userId: "alice", timeout: .seconds(10))
                }
                #expect(error?.code == .network, "attempt \(attempt): \(String(describing: error))")
            }
        }
    }

    @Test func aTrustedCertificateThatIsNotPEMIsAClearError() async throws {
        try await withProxy { _, url in
            let error = await #expect(throws: PigeonClientError.self) {
                _ = try await PigeonClient.registerDevice(serverURL: url, userId: "alice", trustedCertificates: ["not a certificate"])
            }
            #expect(error?.code == .invalidArgument, "\(String(describing: error))")
        }
    }
}
