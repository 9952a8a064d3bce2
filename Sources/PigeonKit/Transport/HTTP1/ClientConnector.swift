import Foundation
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Network)
import Network
import NIOTransportServices
import Security
#else
import NIOPosix
import NIOSSL
import NIOTLS
#endif

/// Opens PigeonKit's TCP connections, with TLS for `https`/`wss`: through the system's TLS (Network.framework, by
/// NIOTransportServices) on Apple platforms, and through NIOSSL elsewhere. `initializer` then adds the protocol's
/// handlers (HTTP/1.1, or the WebSocket upgrade) behind TLS.
///
/// A connection does not allow remote half-closure: when the server, a proxy or the network ends the input, the
/// connection closes, so whoever waits on it (a response, an upgrade, the next frame) learns it at once.
enum ClientConnector {
    static func connect<Output: Sendable>(
        to server: ServerAddress, trust: TLSTrust, timeout: Duration,
        initializer: @escaping @Sendable (any Channel) -> EventLoopFuture<Output>
    ) async throws -> Output {
        #if canImport(Network)
        var bootstrap = NIOTSConnectionBootstrap(group: NIOTSEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(timeout))
            .channelOption(.allowRemoteHalfClosure, value: false)
        if server.secure {
            bootstrap = bootstrap.tlsOptions(try tlsOptions(trust: trust))
        }
        return try await bootstrap.connect(host: server.host, port: server.port, channelInitializer: initializer)
        #else
        let tls = server.secure ? try context(for: trust) : nil
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(timeout))
            .channelOption(.allowRemoteHalfClosure, value: false)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
        guard let tls else {
            return try await bootstrap.connect(host: server.host, port: server.port, channelInitializer: initializer)
        }
        // With TLS the protocol's handlers are added only once the handshake has completed: what `initializer` builds
        // (an async channel, whose writer must be finished before it is dropped) is never built for a connection that
        // a refused certificate drops. The server speaks only when spoken to, so nothing arrives before them.
        let (channel, handshake) = try await bootstrap.connect(host: server.host, port: server.port) { channel in
            channel.eventLoop.makeCompletedFuture {
                let watcher = TLSHandshakeWatcher(promise: channel.eventLoop.makePromise())
                try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: tls, serverHostname: server.serverName))
                try channel.pipeline.syncOperations.addHandler(watcher)
                return (channel, watcher.promise.futureResult)
            }
        }
        // The connection is usable once TLS is: a refused certificate fails here, named, instead of closing the
        // connection under the first request (which then only learns that it closed).
        let deadline = channel.eventLoop.scheduleTask(in: TimeAmount(timeout)) { channel.close(promise: nil) }
        defer { deadline.cancel() }
        do {
            // A future ignores cancellation: closing the connection is what ends a pending handshake.
            try await withTaskCancellationHandler {
                try await handshake.get()
            } onCancel: {
                channel.close(promise: nil)
            }
            return try await channel.eventLoop.flatSubmit {
                // On the connection's event loop nothing closes it between this check and the handlers' addition.
                guard channel.isActive else { return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
                return initializer(channel)
            }.get()
        } catch {
            try? await channel.close()
            throw error
        }
        #endif
    }

    #if !canImport(Network)
    /// Completes `promise` when the TLS handshake does, or fails it with the handshake's error (or the connection's end).
    private final class TLSHandshakeWatcher: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = NIOAny
        let promise: EventLoopPromise<Void>
        private var done = false

        init(promise: EventLoopPromise<Void>) {
            self.promise = promise
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? TLSUserEvent, case .handshakeCompleted = event { complete(nil) }
            context.fireUserInboundEventTriggered(event)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            complete(error)
            context.fireErrorCaught(error)
        }

        func channelInactive(context: ChannelHandlerContext) {
            complete(ChannelError.eof)
            context.fireChannelInactive()
        }

        func handlerRemoved(context: ChannelHandlerContext) {
            complete(ChannelError.ioOnClosedChannel)
        }

        private func complete(_ error: (any Error)?) {
            guard !done else { return }
            done = true
            if let error { promise.fail(error) } else { promise.succeed() }
        }
    }
    #endif

    #if canImport(Network)
    /// The system's TLS, trusting `trust`'s certificates besides the system's roots.
    private static func tlsOptions(trust: TLSTrust) throws -> NWProtocolTLS.Options {
        let options = NWProtocolTLS.Options()
        let anchors = try trust.derCertificates().compactMap { SecCertificateCreateWithData(nil, $0 as CFData) }
        guard !anchors.isEmpty else { return options }
        sec_protocol_options_set_verify_block(
            options.securityProtocolOptions,
            { _, secTrust, complete in
                let trust = sec_trust_copy_ref(secTrust).takeRetainedValue()
                SecTrustSetAnchorCertificates(trust, anchors as CFArray)
                // The app's certificates are added to the system's roots, not put in their place.
                SecTrustSetAnchorCertificatesOnly(trust, false)
                complete(SecTrustEvaluateWithError(trust, nil))
            }, DispatchQueue.global())
        return options
    }
    #else
    /// One TLS context per set of trusted certificates (building one loads the system's trust roots).
    private static let contexts = NIOLockedValueBox<[TLSTrust: NIOSSLContext]>([:])

    private static func context(for trust: TLSTrust) throws -> NIOSSLContext {
        if let context = contexts.withLockedValue({ $0[trust] }) { return context }
        var configuration = TLSConfiguration.makeClientConfiguration()
        let certificates = try trust.derCertificates().map { try NIOSSLCertificate(bytes: Array($0), format: .der) }
        if !certificates.isEmpty { configuration.additionalTrustRoots = [.certificates(certificates)] }
        let context = try NIOSSLContext(configuration: configuration)
        contexts.withLockedValue { $0[trust] = context }
        return context
    }
    #endif
}
