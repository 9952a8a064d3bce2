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
        return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(timeout))
            .channelOption(.allowRemoteHalfClosure, value: false)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .connect(host: server.host, port: server.port) { channel in
                do {
                    if let tls {
                        try channel.pipeline.syncOperations.addHandler(
                            NIOSSLClientHandler(context: tls, serverHostname: server.serverName))
                    }
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                return initializer(channel)
            }
        #endif
    }

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
