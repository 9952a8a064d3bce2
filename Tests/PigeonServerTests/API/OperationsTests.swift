import Foundation
import NIOConcurrencyHelpers
import PigeonProtocol
import PigeonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// API.md "Operations": health, readiness and Prometheus metrics.
@Suite struct OperationsTests {
    @Test func healthAndReadiness() async throws {
        try await withTestServer { client in
            let health = try await client.request(.GET, "/healthz")
            #expect(health.status == 200)
            // Ready once the store answers and the buffer's first heartbeat went through: soon after start, later on a
            // loaded machine (the production pass starts a hundred servers at once).
            var ready = try await client.request(.GET, "/readyz")
            let deadline = ContinuousClock.now + .seconds(30)
            while ready.status != 200, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                ready = try await client.request(.GET, "/readyz")
            }
            #expect(ready.status == 200, "\(ready.text)")
            #expect(ready.text.contains("\"ready\""))
        }
    }

    @Test func metricsArePrometheusTextWithTheDocumentedSeries() async throws {
        try await withTestServer { client in
            let answer = try await client.request(.GET, "/metrics")
            #expect(answer.status == 200)
            #expect(answer.headers["content-type"]?.hasPrefix("text/plain") == true)
            let text = answer.text
            for name in [
                "pigeon_messages_accepted_total", "pigeon_messages_stored_total", "pigeon_buffer_depth", "pigeon_open_streams",
                "pigeon_accept_to_stored_seconds", "pigeon_stored_to_delivered_seconds", "pigeon_dead_letters", "pigeon_processing_stage_seconds",
            ] {
                #expect(text.contains("# TYPE \(name) "), "\(name) missing")
            }
            #expect(text.contains("pigeon_accept_to_stored_seconds_bucket{"))
            #expect(text.contains("pigeon_processing_stage_seconds_bucket{stage=\"queued\""))
            #expect(metricValue("pigeon_dead_letters", in: text) == 0)
            #expect(metricValue("pigeon_buffer_depth", in: text) == 0)
        }
    }

    @Test func metricsCountWhatHappens() async throws {
        try await withTestServer { client in
            let alice = try await client.register("alice")
            let bob = try await client.register("bob")
            let conversation = try await client.createConversation(alice, members: ["bob"])
            let accepted0 = try await client.metric("pigeon_messages_accepted_total") ?? 0
            let stored0 = try await client.metric("pigeon_messages_stored_total") ?? 0
            let latency0 = try await client.metric("pigeon_accept_to_stored_seconds_count") ?? 0
            let delivered0 = try await client.metric("pigeon_stored_to_delivered_seconds_count") ?? 0
            let id = newId()
            for index in 0..<3 { try await client.sendAccepted(alice, to: conversation.id, body: "\(index)", clientMessageId: index == 0 ? id : newId()) }
            // A resend and a refused send are not accepted messages.
            #expect(try await client.send(alice, to: conversation.id, body: "0", clientMessageId: id).status == 200)
            #expect(try await client.send(alice, to: conversation.id, body: "x", type: "BAD").status == 400)
            #expect(try await client.metric("pigeon_messages_accepted_total") == accepted0 + 3)
            _ = try await client.waitForCount(alice, conversation.id, 3)
            let deadline = ContinuousClock.now + .seconds(10)
            while try await client.metric("pigeon_messages_stored_total") ?? 0 < stored0 + 3, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(try await client.metric("pigeon_messages_stored_total") == stored0 + 3)
            #expect(try await client.metric("pigeon_accept_to_stored_seconds_count") == latency0 + 3)

            _ = try await client.receipt(bob, conversation.id, kind: .delivered, upToSeq: 3)
            #expect((try await client.metric("pigeon_stored_to_delivered_seconds_count") ?? 0) > delivered0)

            let socket = try await TestWebSocket.connect(port: client.port, token: bob.token)
            let sse = try await TestSSE.open(port: client.port, token: alice.token)
            #expect(try await client.metric("pigeon_open_streams{transport=\"ws\"}") == 1)
            #expect(try await client.metric("pigeon_open_streams{transport=\"sse\"}") == 1)
            await socket.close()
            await sse.close()
        }
    }

    /// Graceful shutdown (SIGTERM: stop accepting, close streams, drain, exit) must not wait forever for a client
    /// that opened a connection and has not sent a request yet (a browser's pre-connect, a pooled spare connection).
    /// The server is run in a task of its own so that a hang is reported instead of blocking the test run; closing
    /// the idle connection afterwards lets a hung server finish.
    @Test func gracefulShutdownIsNotHeldUpByAnIdleConnection() async throws {
        let idle = NIOLockedValueBox<Int32>(-1)
        let bodyDone = NIOLockedValueBox(false)
        let stopped = NIOLockedValueBox(false)
        let server = Task {
            try await withTestServer { client in
                _ = try await client.register("alice")
                idle.withLockedValue { $0 = Self.openIdleConnection(port: client.port) }
                try await Task.sleep(for: .milliseconds(100))
                bodyDone.withLockedValue { $0 = true }
            }
            stopped.withLockedValue { $0 = true }
        }
        // The 10 s start when the body is done (the server's start-up is not what is measured).
        let startDeadline = ContinuousClock.now + .seconds(60)
        while !bodyDone.withLockedValue({ $0 }), ContinuousClock.now < startDeadline { try await Task.sleep(for: .milliseconds(20)) }
        let deadline = ContinuousClock.now + .seconds(10)
        while !stopped.withLockedValue({ $0 }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(bodyDone.withLockedValue { $0 })
        #expect(idle.withLockedValue { $0 } >= 0, "could not open the idle connection")
        #expect(stopped.withLockedValue { $0 }, "the server did not stop within 10 s of its shutdown while an idle connection was open")
        let fd = idle.withLockedValue { $0 }
        if fd >= 0 { close(fd) }
        try await server.value
    }

    /// A TCP connection to the server that sends nothing.
    static func openIdleConnection(port: Int) -> Int32 {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return -1 }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            return -1
        }
        return fd
    }
}
