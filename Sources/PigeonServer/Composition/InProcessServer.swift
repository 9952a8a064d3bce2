import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle

/// A Pigeon server running inside this process (a demo, an app's integration tests, a benchmark), on a loopback
/// port and data directory that stay the same across ``stop()`` and ``start()``: a restart keeps its data, and
/// clients reconnect to the same URL.
public final class InProcessServer: Sendable {
    private let requested: ServerConfiguration
    private let logger: Logger
    private let state = NIOLockedValueBox(State())

    private struct State {
        /// The port the first ``start()`` bound when the configuration asked for port 0.
        var boundPort: Int?
        var running: (group: ServiceGroup, task: Task<Void, any Error>)?
    }

    /// The configuration it runs with; its port is the one it listens on (when it was given as 0, the one the first
    /// ``start()`` bound; 0 before that).
    public var configuration: ServerConfiguration {
        var configuration = requested
        if let boundPort = state.withLockedValue({ $0.boundPort }) { configuration.port = boundPort }
        return configuration
    }

    public var port: Int { configuration.port }
    public var url: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Nothing runs yet. Port 0 makes the first ``start()`` bind a free loopback port (chosen by the system, so no
    /// other process can take it in between), which every later start binds again.
    public init(configuration: ServerConfiguration, logger: Logger) {
        requested = configuration
        self.logger = logger
    }

    /// Starts the server and returns once it accepts connections; throws what stopped it from starting (a port
    /// in use, a data directory it cannot open), or after 20 s without it listening.
    public func start() async throws {
        let app = try await PigeonApplication.make(configuration: configuration, logger: logger)
        let (bound, boundContinuation) = AsyncStream.makeStream(of: Int?.self)
        let reporting = PortReportingApplication(base: app) { port in
            boundContinuation.yield(port)
            boundContinuation.finish()
        }
        // A service group of its own, so `stop` is a graceful shutdown (what SIGTERM does to pigeon-server).
        let group = ServiceGroup(configuration: .init(services: [reporting], gracefulShutdownSignals: [], logger: logger))
        let task = Task {
            defer { boundContinuation.finish() }
            try await group.run()
        }
        state.withLockedValue { $0.running = (group, task) }
        let port = await withTaskGroup(of: Int?.self) { waits in
            waits.addTask { await bound.first { _ in true } ?? nil }
            waits.addTask {
                try? await Task.sleep(for: .seconds(20))
                return nil
            }
            let port = await waits.next() ?? nil
            waits.cancelAll()
            return port
        }
        if let port {
            state.withLockedValue { $0.boundPort = port }
            return
        }
        await stop()
        if case .failure(let error) = await task.result { throw error }
        throw InProcessServerError(message: "the in-process server did not start listening on 127.0.0.1:\(self.port)")
    }

    /// Stops it gracefully (it stores what it accepted and closes the streams) and waits until it is down.
    public func stop() async {
        guard let (group, task) = state.withLockedValue({ state in
            defer { state.running = nil }
            return state.running
        }) else { return }
        await group.triggerGracefulShutdown()
        _ = await task.result
    }

    public func restart() async throws {
        await stop()
        try await start()
    }
}

/// The application, reporting the port its server bound once it listens (Hummingbird's `onServerRunning`), as
/// HummingbirdTesting's live test application does.
private struct PortReportingApplication<Base: ApplicationProtocol>: ApplicationProtocol {
    typealias Responder = Base.Responder

    let base: Base
    let report: @Sendable (Int?) -> Void

    var responder: Responder {
        get async throws { try await base.responder }
    }

    var server: HTTPServerBuilder { base.server }
    var eventLoopGroup: any EventLoopGroup { base.eventLoopGroup }
    var configuration: ApplicationConfiguration { base.configuration }
    var logger: Logger { base.logger }
    var services: [any Service] { base.services }
    var processesRunBeforeServerStart: [@Sendable () async throws -> Void] { base.processesRunBeforeServerStart }

    @Sendable func onServerRunning(_ channel: any Channel) async {
        await base.onServerRunning(channel)
        report(channel.localAddress?.port)
    }
}

/// Why an ``InProcessServer`` could not start.
public struct InProcessServerError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
