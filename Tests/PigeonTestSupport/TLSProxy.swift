import NIOCore
import NIOPosix
import NIOSSL

/// A TLS-terminating reverse proxy on loopback, as a deployment puts in front of a server (nginx, a load balancer):
/// TLS on its port, with a certificate for `127.0.0.1` and `localhost` that ``TestCertificates/authorityPEM`` signed,
/// and every connection's bytes passed both ways to the upstream server in plain text (HTTP, WebSocket upgrades and
/// server-sent events alike).
public final class TLSProxy: Sendable {
    public let port: Int
    private let listener: any Channel

    private init(port: Int, listener: any Channel) {
        self.port = port
        self.listener = listener
    }

    public static func start(upstreamHost: String = "127.0.0.1", upstreamPort: Int) async throws -> TLSProxy {
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(try NIOSSLCertificate(bytes: Array(TestCertificates.serverPEM.utf8), format: .pem))],
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(TestCertificates.serverKeyPEM.utf8), format: .pem)))
        let context = try NIOSSLContext(configuration: configuration)
        let listener = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { inbound in
                let connected = ClientBootstrap(group: inbound.eventLoop).connect(host: upstreamHost, port: upstreamPort)
                return connected.flatMap { upstream in
                    inbound.eventLoop.makeCompletedFuture {
                        let (toUpstream, toClient) = GlueHandler.matchedPair()
                        try inbound.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                        try inbound.pipeline.syncOperations.addHandler(toUpstream)
                        try upstream.pipeline.syncOperations.addHandler(toClient)
                    }
                }.flatMapError { error in
                    inbound.close(promise: nil)
                    return inbound.eventLoop.makeFailedFuture(error)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return TLSProxy(port: listener.localAddress?.port ?? 0, listener: listener)
    }

    public func stop() async throws {
        try await listener.close()
    }
}

/// The certificates of the TLS tests: a test authority and the server certificate it signed for `127.0.0.1` and
/// `localhost` (ECDSA P-256, valid for a hundred years; made with openssl for these tests and for nothing else).
public enum TestCertificates {
    /// The authority a client must trust to accept ``TLSProxy``'s certificate.
    public static let authorityPEM = """
-----BEGIN CERTIFICATE-----
MIIBiTCCAS+gAwIBAgIURPK2AzeJVxdfJlhA5172NDStZTcwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOUGlnZW9uIHRlc3QgQ0EwIBcNMjYxMTI3MDg0OTU3WhgPMjEy
NjExMDMwODQ5NTdaMBkxFzAVBgNVBAMMDlBpZ2VvbiB0ZXN0IENBMFkwEwYHKoZI
zj0CAQYIKoZIzj0DAQcDQgAElIzWyVi60XZ1i1DGK8SGS/AQcmUNc9n+h7ITEguC
FtDC5pEDwqQn/ygoVFTF7HNnlHLKXIIfIrv4D1MdNwHVvaNTMFEwHQYDVR0OBBYE
FFR2qb7IDByot8XPgr4k6A+QdVr7MB8GA1UdIwQYMBaAFFR2qb7IDByot8XPgr4k
6A+QdVr7MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhAOu+oMlt
4VBwK0X2f2B+LBjvWM2zPAEyAMqumWZu5YoLAiB24Y7ZVmbur5thijFYuzIcctV/
k/nFtAJH3yUyosP1fg==
-----END CERTIFICATE-----
"""

    static let serverPEM = """
-----BEGIN CERTIFICATE-----
MIIBrzCCAVWgAwIBAgIUGysPer5wsFPMXcaxYVD9o77TuSQwCgYIKoZIzj0EAwIw
GTEXMBUGA1UEAwwOUGlnZW9uIHRlc3QgQ0EwIBcNMjYxMTI3MDg0OTU3WhgPMjEy
NjExMDMwODQ5NTdaMBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEG
CCqGSM49AwEHA0IABHQYA4wszWbfbNkSkg9+99rUJal6TA+hDgOzxWBOmCCLNfUh
yiugu1ABw0+1oFEOs0aXDsu3OuYPyc9Mc+TxOlyjfjB8MBoGA1UdEQQTMBGHBH8A
AAGCCWxvY2FsaG9zdDAJBgNVHRMEAjAAMBMGA1UdJQQMMAoGCCsGAQUFBwMBMB0G
A1UdDgQWBBTfEmnt01uL4BzX7ROVi6u6Idv4iDAfBgNVHSMEGDAWgBRUdqm+yAwc
qLfFz4K+JOgPkHVa+zAKBggqhkjOPQQDAgNIADBFAiAa+3XqozDU72nny7ILf+lP
nHFP6acrWSunfyWYchus+gIhAJm6gRVZP7rM8VBgBrhyjeIjMSeprOJtsQZuSsZl
EWpQ
-----END CERTIFICATE-----
"""

    static let serverKeyPEM = """
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjWPdvc2iohtsBj/P
vpJEZHyqhcrahP6FEmppIGdhyFahRANCAAR0GAOMLM1m32zZEpIPfvfa1CWpekwP
oQ4Ds8VgTpggizX1IcoroLtQAcNPtaBRDrNGlw7LtzrmD8nPTHPk8Tpc
-----END PRIVATE KEY-----
"""
}

/// Passes what one channel reads to its partner, with back-pressure: a partner that cannot take more stops the reads.
private final class GlueHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var partner: GlueHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false

    static func matchedPair() -> (GlueHandler, GlueHandler) {
        let first = GlueHandler()
        let second = GlueHandler()
        first.partner = second
        second.partner = first
        return (first, second)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        partner = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        partner?.partnerWrite(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        partner?.partnerFlush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner?.partnerClose()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { partner?.partnerBecameWritable() }
    }

    func read(context: ChannelHandlerContext) {
        if let partner, partner.partnerWritable {
            context.read()
        } else {
            pendingRead = true
        }
    }

    private var partnerWritable: Bool { context?.channel.isWritable ?? false }

    private func partnerWrite(_ data: NIOAny) {
        context?.write(data, promise: nil)
    }

    private func partnerFlush() {
        context?.flush()
    }

    private func partnerClose() {
        context?.close(promise: nil)
    }

    private func partnerBecameWritable() {
        if pendingRead {
            pendingRead = false
            context?.read()
        }
    }
}
