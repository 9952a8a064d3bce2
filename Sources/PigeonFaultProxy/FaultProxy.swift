import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP proxy on loopback that forwards every connection to an upstream server and can be told to misbehave like a
/// bad network: refuse connections, black-hole them, or cut them all at once.
///
/// Each accepted connection gets its own connection to the upstream server; bytes pass both ways with backpressure
/// (a side is read only while the other side can take more), and a half-close (EOF) on one side is passed on to the
/// other, so HTTP/1.1 and WebSocket clients work through it. If the upstream server cannot be reached, the client's
/// connection is closed. Every method can be called from any task.
///
/// Faults take effect when the method returns: no byte read after ``setMode(_:)`` or ``cutConnections()`` returns
/// passes on a connection that the call stalls or closes, even though the sockets themselves close a moment later.
public final class FaultProxy: Sendable {
    /// How the proxy treats its connections; see ``setMode(_:)``.
    public enum Mode: Sendable {
        /// Bytes pass both ways: a working network.
        case forward
        /// Open connections are closed and new ones are closed as soon as they are accepted: a network that is down.
        case refuse
        /// Connections stay open but no byte passes either way (bytes read are discarded), and new connections are
        /// accepted and stall too, so a client's connect succeeds but its handshake never gets an answer: a
        /// black-holed network.
        case stall
    }

    /// The port the proxy listens on, on 127.0.0.1.
    public let port: Int

    private let serverChannel: any Channel
    private let shared: ProxyShared

    private init(port: Int, serverChannel: any Channel, shared: ProxyShared) {
        self.port = port
        self.serverChannel = serverChannel
        self.shared = shared
    }

    deinit {
        let channels = shared.state.withLockedValue { $0.stop() }
        serverChannel.close(promise: nil)
        for channel in channels { channel.close(promise: nil) }
    }

    /// Starts a proxy in ``Mode/forward`` on 127.0.0.1 and a free port, forwarding to `upstreamHost:upstreamPort`.
    ///
    /// The upstream server does not need to be running yet: it is connected to once per accepted connection.
    public static func start(upstreamHost: String = "127.0.0.1", upstreamPort: Int) async throws -> FaultProxy {
        let shared = ProxyShared(upstreamHost: upstreamHost, upstreamPort: upstreamPort)
        let serverChannel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in shared.admit(channel) }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        guard let port = serverChannel.localAddress?.port else {
            try? await serverChannel.close()
            throw FaultProxyError(message: "the fault proxy's listening socket has no port")
        }
        return FaultProxy(port: port, serverChannel: serverChannel, shared: shared)
    }

    /// The current mode.
    public var mode: Mode {
        shared.state.withLockedValue { $0.mode }
    }

    /// Switches to `mode`, for the open connections as well as for new ones.
    ///
    /// Switching to ``Mode/refuse`` closes every open connection. Switching to ``Mode/stall`` stalls every open
    /// connection. Leaving ``Mode/stall`` closes every open connection, as they all stalled (a black-holed connection
    /// never recovers; the client has to reconnect), so only new connections go through again.
    public func setMode(_ mode: Mode) {
        let channels = shared.state.withLockedValue { $0.setMode(mode) }
        for channel in channels { channel.close(promise: nil) }
    }

    /// Closes every open connection, on the client side and on the upstream side, without changing the mode: one
    /// network flap.
    public func cutConnections() {
        let channels = shared.state.withLockedValue { $0.cutConnections() }
        for channel in channels { channel.close(promise: nil) }
    }

    /// How many connections the proxy has accepted since it started, refused ones included.
    public var acceptedConnections: Int {
        shared.state.withLockedValue { $0.acceptedConnections }
    }

    /// How many bytes stalled connections read and discarded, both ways: a test waits for the bytes it sent to be
    /// swallowed (instead of waiting a while and hoping they would have passed by then).
    public var discardedBytes: Int {
        shared.state.withLockedValue { $0.discardedBytes }
    }

    /// How many client connections are open (accepted, not refused, and not closed yet).
    public var openConnections: Int {
        shared.state.withLockedValue { $0.clients.count }
    }

    /// Stops listening and closes every connection; returns when they are all closed.
    public func stop() async {
        let channels = shared.state.withLockedValue { $0.stop() }
        try? await serverChannel.close()
        for channel in channels { channel.close(promise: nil) }
        for channel in channels { try? await channel.closeFuture.get() }
    }
}

// MARK: - State

/// What the proxy knows of its connections, shared between the proxy and the channel handlers.
private final class ProxyShared: Sendable {
    let upstreamHost: String
    let upstreamPort: Int
    let state = NIOLockedValueBox(ProxyState())

    init(upstreamHost: String, upstreamPort: Int) {
        self.upstreamHost = upstreamHost
        self.upstreamPort = upstreamPort
    }

    /// Sets up a connection just accepted (on its event loop): refused, stalled or forwarded by the current mode.
    func admit(_ channel: any Channel) -> EventLoopFuture<Void> {
        guard let (mode, epoch) = state.withLockedValue({ $0.admit(channel) }) else {
            // A failed initialiser makes the bootstrap close the connection before it is registered.
            return channel.eventLoop.makeFailedFuture(FaultProxyError(message: "connection refused by the fault proxy"))
        }
        let id = ObjectIdentifier(channel)
        channel.closeFuture.whenComplete { _ in
            self.state.withLockedValue { _ = $0.clients.removeValue(forKey: id) }
        }
        return channel.eventLoop.makeCompletedFuture {
            let handler = ProxySideHandler(side: .client, shared: self, epoch: epoch, stalled: mode == .stall)
            try channel.pipeline.syncOperations.addHandler(handler)
        }
    }

    /// Records an upstream connection; false if the proxy stopped meanwhile (the caller closes it).
    func register(upstream channel: any Channel) -> Bool {
        guard state.withLockedValue({ $0.register(upstream: channel) }) else { return false }
        let id = ObjectIdentifier(channel)
        channel.closeFuture.whenComplete { _ in
            self.state.withLockedValue { _ = $0.upstreams.removeValue(forKey: id) }
        }
        return true
    }
}

/// The proxy's state; its mutating methods say which channels to close, and the caller closes them outside the lock.
private struct ProxyState: Sendable {
    /// What a connection is to do with what it reads now.
    enum Verdict {
        case forward
        case stall
        case cut
    }

    var mode = FaultProxy.Mode.forward
    var stopped = false
    var acceptedConnections = 0
    var discardedBytes = 0
    /// Goes up whenever every open connection is closed: a connection admitted in an earlier epoch is cut, even
    /// before its socket is closed.
    var epoch = 0
    var clients: [ObjectIdentifier: any Channel] = [:]
    var upstreams: [ObjectIdentifier: any Channel] = [:]

    /// Counts an accepted connection; returns the mode it starts in and its epoch, or nil if it is to be closed.
    mutating func admit(_ channel: any Channel) -> (FaultProxy.Mode, epoch: Int)? {
        acceptedConnections += 1
        guard !stopped, mode != .refuse else { return nil }
        clients[ObjectIdentifier(channel)] = channel
        return (mode, epoch)
    }

    mutating func register(upstream channel: any Channel) -> Bool {
        guard !stopped else { return false }
        upstreams[ObjectIdentifier(channel)] = channel
        return true
    }

    func verdict(epoch connectionEpoch: Int) -> Verdict {
        if stopped || connectionEpoch != epoch { return .cut }
        switch mode {
        case .forward: return .forward
        case .stall: return .stall
        case .refuse: return .cut
        }
    }

    mutating func setMode(_ newMode: FaultProxy.Mode) -> [any Channel] {
        let previous = mode
        mode = newMode
        switch (previous, newMode) {
        case (.forward, .refuse), (.stall, .refuse), (.stall, .forward):
            return cutConnections()
        case (.refuse, _), (.forward, .forward), (.forward, .stall), (.stall, .stall):
            return []
        }
    }

    mutating func cutConnections() -> [any Channel] {
        epoch += 1
        return Array(clients.values) + Array(upstreams.values)
    }

    mutating func stop() -> [any Channel] {
        stopped = true
        return cutConnections()
    }
}

// MARK: - Forwarding

/// One side of a proxied connection, paired with the handler of the other side on the same event loop (the model is
/// swift-nio-extras' `GlueHandler`). The client side connects to the upstream server when it becomes active.
///
/// A side is read only while its partner is writable. Before passing anything on, a side asks the proxy's state
/// whether its connection was cut or stalled meanwhile. Once stalled, both sides read and discard everything and pass
/// nothing on, not even an EOF; only the client side closing still closes the upstream side.
private final class ProxySideHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum Side {
        case client
        case upstream
    }

    private let side: Side
    private let shared: ProxyShared
    /// The proxy's epoch when the connection was accepted.
    private let epoch: Int
    private var stalled: Bool
    private var context: ChannelHandlerContext?
    private var partner: ProxySideHandler?
    /// A read the channel asked for while the partner could not take more bytes (or was not connected yet).
    private var readHeld = false
    /// Bytes read before the partner was connected: NIO reads up to an EOF even while reads are held.
    private var unsent: [ByteBuffer] = []
    private var inputClosed = false
    private var outputClosed = false

    init(side: Side, shared: ProxyShared, epoch: Int, stalled: Bool) {
        self.side = side
        self.shared = shared
        self.epoch = epoch
        self.stalled = stalled
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        self.partner = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        // A cut that came while the connection was being set up could not close a channel that was not active
        // yet: apply it now, or a client that only waits would never see it.
        guard followProxy() != .cut else { return }
        if case .client = side, !stalled {
            connectUpstream(context: context)
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch followProxy() {
        case .forward: break
        case .stall:
            let count = Self.unwrapInboundIn(data).readableBytes
            shared.state.withLockedValue { $0.discardedBytes += count }
            return
        case .cut: return
        }
        if let partner {
            partner.partnerWrite(Self.unwrapInboundIn(data))
        } else {
            unsent.append(Self.unwrapInboundIn(data))
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        guard !stalled else { return }
        partner?.partnerFlush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .upstream = side, followProxy() == .stall {
            // The client of a black-holed connection must not learn that the server went away.
        } else {
            partner?.partnerClose()
        }
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case ChannelEvent.inputClosed:
            inputClosed = true
            if followProxy() == .forward { partner?.partnerWriteEOF() }
        case ChannelEvent.outputClosed:
            outputClosed = true
        default:
            context.fireUserInboundEventTriggered(event)
            return
        }
        // NIO does not always close a connection whose both halves are closed (an output close that waited for
        // pending writes does not).
        if inputClosed && outputClosed { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { partner?.releaseHeldRead() }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if stalled || partner?.isWritable == true {
            context.read()
        } else {
            readHeld = true
        }
    }

    /// Applies what the proxy decided for this connection since it last looked: closes both sides if the connection
    /// was cut, stalls both if the proxy stalls; a stalled connection stays stalled.
    private func followProxy() -> ProxyState.Verdict {
        switch shared.state.withLockedValue({ $0.verdict(epoch: epoch) }) {
        case .cut:
            partner?.partnerClose()
            context?.close(promise: nil)
            return .cut
        case .stall:
            if !stalled {
                stall()
                partner?.stall()
            }
            return .stall
        case .forward:
            return stalled ? .stall : .forward
        }
    }

    // MARK: Upstream

    private func connectUpstream(context: ChannelHandlerContext) {
        let shared = self.shared
        let upstreamHandler = ProxySideHandler(side: .upstream, shared: shared, epoch: epoch, stalled: false)
        let boundHandler = NIOLoopBound(upstreamHandler, eventLoop: context.eventLoop)
        ClientBootstrap(group: context.eventLoop)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(boundHandler.value)
                }
            }
            .connect(host: shared.upstreamHost, port: shared.upstreamPort)
            .hop(to: context.eventLoop)
            .assumeIsolated()
            .whenComplete { result in
                switch result {
                case .success(let upstream):
                    guard let context = self.context, context.channel.isActive, self.followProxy() != .cut,
                        shared.register(upstream: upstream)
                    else {
                        upstream.close(promise: nil)
                        return
                    }
                    self.pair(with: upstreamHandler)
                case .failure:
                    self.context?.close(promise: nil)
                }
            }
    }

    private func pair(with other: ProxySideHandler) {
        partner = other
        other.partner = self
        other.stalled = stalled
        passOnUnsent()
        other.passOnUnsent()
        releaseHeldRead()
        other.releaseHeldRead()
    }

    /// Passes on what was read (and an EOF) before the partner was connected.
    private func passOnUnsent() {
        guard let partner, !stalled else { return }
        if !unsent.isEmpty {
            for buffer in unsent { partner.partnerWrite(buffer) }
            unsent.removeAll()
            partner.partnerFlush()
        }
        if inputClosed { partner.partnerWriteEOF() }
    }

    // MARK: Called by the partner

    private var isWritable: Bool {
        context?.channel.isWritable ?? false
    }

    private func stall() {
        stalled = true
        unsent.removeAll()
        releaseHeldRead()
    }

    private func releaseHeldRead() {
        guard readHeld else { return }
        readHeld = false
        context?.read()
    }

    private func partnerWrite(_ buffer: ByteBuffer) {
        context?.write(Self.wrapOutboundOut(buffer), promise: nil)
    }

    private func partnerFlush() {
        context?.flush()
    }

    private func partnerWriteEOF() {
        context?.close(mode: .output, promise: nil)
    }

    private func partnerClose() {
        context?.close(promise: nil)
    }
}

/// Why the proxy could not start, or why it turned a connection away.
public struct FaultProxyError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
