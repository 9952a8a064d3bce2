import NIOCore
import NIOHTTP1

/// The first handler of every connection: it sees the raw bytes before the HTTP parser and enforces
/// ``ConnectionLimits`` on request heads.
///
/// - Between exchanges (from the connection's start, or once the previous request and its response are complete)
///   the connection may stay silent for `idleTimeout`, then it is closed without an answer.
/// - From the first byte of a head to its blank line it has `headTimeout` (`408`), and the head may not break the
///   request-line, header-size or header-count limits (`414`, `431`); a parser error anywhere is `400`.
/// - Graceful shutdown closes a connection between exchanges or in the middle of a head at once.
/// - Once the connection is a WebSocket none of this applies any more.
///
/// Every answer is written straight to the socket (when no response is under way), then the connection closes its
/// output and discards what the client still sends for a moment (so that the client reads the answer instead of a
/// reset) before it closes. ``ConnectionExchangeObserver``, behind the HTTP parser, reports the requests, responses,
/// parser errors and the WebSocket upgrade.
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private enum Phase {
        /// Waiting for the first byte of a request head.
        case idle
        /// Reading a request head.
        case head(ConnectionHeadScanner)
        /// A request or its response is under way.
        case exchange
        /// The connection is a WebSocket.
        case webSocket
        /// Answered and closing: what the client still sends is discarded.
        case closing
    }

    /// How long a refused connection discards what the client still sends before it closes.
    static let lingerTime = Duration.seconds(1)

    private let limits: ConnectionLimits
    private let metrics: PigeonMetrics
    /// The answer the connection gets as soon as it is active instead of being served (the per-address limit).
    private var refusal: ConnectionRefusal?
    /// The request under way is an upload: ``ConnectionLimits/bodyTimeout`` restarts at every read of its body.
    private var bodyTimeoutIsSilence = false
    private var phase = Phase.idle
    private var timer: Scheduled<Void>?
    private var started = false
    /// Requests whose head arrived but not yet their end.
    private var openRequests = 0
    /// Requests whose response has not ended yet.
    private var unansweredRequests = 0
    /// A request head has arrived on this connection.
    private var sawRequest = false
    /// A response head was written and its end not yet.
    private var responseInProgress = false
    private var context: ChannelHandlerContext?
    /// The answer chosen for the WebSocket upgrade under way, which is being refused (``refuseUpgrade(with:on:)``).
    private var upgradeRefusal: ConnectionRefusal?
    /// Completed once the client has closed its side of the connection (its input ended, or the connection closed).
    private var clientClosedPromise: EventLoopPromise<Void>?

    init(limits: ConnectionLimits, metrics: PigeonMetrics, refusal: ConnectionRefusal?) {
        self.limits = limits
        self.metrics = metrics
        self.refusal = refusal
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        clientClosedPromise = context.eventLoop.makePromise()
        if context.channel.isActive { start(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelTimer()
        clientClosedPromise?.succeed()
        self.context = nil
    }

    /// Completes once the client has closed its side of the connection: its input ended (a FIN), or the connection
    /// closed (a reset). A stream that only writes (SSE) learns here that nobody reads it any more, at once and
    /// without a write. Read on the channel's event loop.
    var clientClosed: EventLoopFuture<Void>? { clientClosedPromise?.futureResult }

    func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelTimer()
        clientClosedPromise?.succeed()
        // A connection closed before its first request still has the HTTP upgrade handler, which would report the
        // close as an error; told that the input closed first, it ends quietly.
        if !sawRequest { context.fireUserInboundEventTriggered(ChannelEvent.inputClosed) }
        context.fireChannelInactive()
    }

    private func start(context: ChannelHandlerContext) {
        guard !started else { return }
        started = true
        if let refusal {
            refuse(refusal, context: context)
        } else {
            schedule(limits.idleTimeout, context: context) { [unowned self] context in
                self.phase = .closing
                context.close(promise: nil)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch phase {
        case .idle:
            phase = .head(ConnectionHeadScanner(limits: limits))
            schedule(limits.headTimeout, context: context) { [unowned self] context in
                self.refuse(.headTimeout, context: context)
            }
            scanHead(context: context, data: data)
        case .head:
            scanHead(context: context, data: data)
        case .exchange:
            // An upload's bytes arrived: the server works on them until it asks for more (``read(context:)``), and
            // only then does the client's silence count again.
            if bodyTimeoutIsSilence, openRequests > 0 { cancelTimer() }
            context.fireChannelRead(data)
        case .webSocket:
            context.fireChannelRead(data)
        case .closing:
            break
        }
    }

    private func scanHead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(var scanner) = phase else { return }
        switch scanner.scan(unwrapInboundIn(data)) {
        case .incomplete:
            phase = .head(scanner)
            context.fireChannelRead(data)
        case .complete:
            phase = .exchange
            // The body (if any) must follow in time; the request's end cancels this.
            schedule(limits.bodyTimeout, context: context) { [unowned self] context in
                self.refuse(.bodyTimeout, context: context)
            }
            context.fireChannelRead(data)
        case .requestLineTooLong:
            refuse(.requestLineTooLong, context: context)
        case .headersTooLarge:
            refuse(.headersTooLarge, context: context)
        case .tooManyHeaders:
            refuse(.tooManyHeaders, context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed { clientClosedPromise?.succeed() }
        switch (phase, event) {
        case (.idle, is ChannelShouldQuiesceEvent), (.head, is ChannelShouldQuiesceEvent), (.closing, is ChannelShouldQuiesceEvent):
            phase = .closing
            context.close(promise: nil)
        case (.closing, let event as ChannelEvent) where event == .inputClosed:
            context.close(promise: nil)
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    // MARK: What the exchange observer reports

    /// During an upload's body, the silence the body deadline measures starts when the server asks for more bytes: a
    /// server slow to take them in (a busy store) never makes the client look silent.
    func read(context: ChannelHandlerContext) {
        if bodyTimeoutIsSilence, openRequests > 0, case .exchange = phase {
            schedule(limits.bodyTimeout, context: context) { [unowned self] context in
                self.refuse(.bodyTimeout, context: context)
            }
        }
        context.read()
    }

    /// `streamsBody`: the request is an upload, whose body (up to the attachment limit) may take longer than
    /// `bodyTimeout` on a slow link: for it, `bodyTimeout` is the longest silence between two reads of the body
    /// instead of the time for the whole body.
    func requestHeadReceived(streamsBody: Bool = false) {
        bodyTimeoutIsSilence = streamsBody
        sawRequest = true
        openRequests += 1
        unansweredRequests += 1
    }

    func requestEnded() {
        openRequests = max(0, openRequests - 1)
        if openRequests == 0, case .exchange = phase { cancelTimer() }
        exchangeProgressed()
    }

    func responseStarted() {
        responseInProgress = true
    }

    func responseEnded() {
        responseInProgress = false
        unansweredRequests = max(0, unansweredRequests - 1)
        exchangeProgressed()
    }

    /// A request's body has not ended yet (the guard has seen its head, not its end).
    var isRequestBodyUnfinished: Bool { openRequests > 0 }

    /// After an answer given before the request's body ended: the output is closed once the answer is written, what
    /// the client still sends is discarded, and the connection closes once the client closes its side or after
    /// ``lingerTime``.
    func closeAfterAnswer(written: EventLoopFuture<Void>) {
        guard let context else { return }
        if case .closing = phase { return }
        phase = .closing
        schedule(Self.lingerTime, context: context) { context in
            context.close(promise: nil)
        }
        written.assumeIsolated().whenComplete { _ in
            context.close(mode: .output, promise: nil)
        }
    }

    func upgradedToWebSocket() {
        cancelTimer()
        phase = .webSocket
    }

    func parserFailed(_ error: HTTPParserError) {
        guard let context else { return }
        refuse(.parserError(error), context: context)
    }

    func setUpgradeRefusal(_ refusal: ConnectionRefusal) {
        upgradeRefusal = refusal
    }

    /// The refusal set for the WebSocket upgrade under way, taken once: the exchange observer writes it in place of
    /// the bare `400` that hummingbird-websocket answers every refused upgrade with.
    func takeUpgradeRefusal() -> ConnectionRefusal? {
        defer { upgradeRefusal = nil }
        return upgradeRefusal
    }

    /// Answers the request under way with `refusal` and closes (nothing of a response was written yet).
    func refuseNow(_ refusal: ConnectionRefusal) {
        guard let context else { return }
        refuse(refusal, context: context)
    }

    /// A WebSocket request from a page of an origin that may not open it: refused (`403`) and closed.
    func refuseWebSocket(origin: String) {
        guard let context else { return }
        refuse(.webSocketOrigin(origin), context: context)
    }

    /// Back to waiting for the next head once every request and response is complete.
    private func exchangeProgressed() {
        guard case .exchange = phase, openRequests == 0, unansweredRequests == 0, let context else { return }
        phase = .idle
        schedule(limits.idleTimeout, context: context) { [unowned self] context in
            self.phase = .closing
            context.close(promise: nil)
        }
    }

    // MARK: Answering and closing

    /// Answers with `refusal` (unless a response is under way), closes the output, and closes the connection once
    /// the client closes its side or after ``lingerTime``.
    private func refuse(_ refusal: ConnectionRefusal, context: ChannelHandlerContext) {
        if case .closing = phase { return }
        phase = .closing
        if let limit = refusal.limit { metrics.limitHit(limit) }
        schedule(Self.lingerTime, context: context) { context in
            context.close(promise: nil)
        }
        guard !responseInProgress else {
            context.close(promise: nil)
            return
        }
        let closeOutput = context.eventLoop.makePromise(of: Void.self)
        closeOutput.futureResult.assumeIsolated().whenComplete { _ in
            context.close(mode: .output, promise: nil)
        }
        context.writeAndFlush(NIOAny(refusal.response(allocator: context.channel.allocator)), promise: closeOutput)
    }

    private func schedule(_ delay: Duration, context: ChannelHandlerContext, _ action: @escaping (ChannelHandlerContext) -> Void) {
        cancelTimer()
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) { [unowned self] in
            self.timer = nil
            action(context)
        }
    }

    private func cancelTimer() {
        timer?.cancel()
        timer = nil
    }
}

/// Sits behind the HTTP parser and tells the ``ConnectionGuardHandler`` where each exchange begins and ends, about
/// parser errors (which it answers through the guard, instead of leaving the connection hanging), and when the
/// connection becomes a WebSocket (then it passes everything through).
///
/// With a CORS policy, it also refuses (through the guard, `403`) a request for the WebSocket at `/v1/ws` from a page
/// of an origin the policy does not allow, before the WebSocket upgrade handler sees it: that handler answers every
/// upgrade it declines with a bare `400`.
final class ConnectionExchangeObserver: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let connectionGuard: ConnectionGuardHandler
    private let cors: CORSPolicy?
    private var upgraded = false
    /// A request was refused: nothing more is passed on (the guard is closing the connection).
    private var refused = false
    /// A refused upgrade's bare `400` is being dropped for the guard's own answer.
    private var replaced = false
    /// The response being written answers a request whose body had not ended: the connection closes after it.
    private var closesAfterResponse = false

    init(connectionGuard: ConnectionGuardHandler, cors: CORSPolicy?) {
        self.connectionGuard = connectionGuard
        self.cors = cors
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        if !upgraded {
            switch unwrapInboundIn(data) {
            case .head(let head):
                if let cors, let origin = Self.refusedWebSocketOrigin(head, cors: cors) {
                    refused = true
                    connectionGuard.refuseWebSocket(origin: origin)
                    return
                }
                connectionGuard.requestHeadReceived(streamsBody: Self.isUpload(head))
            case .body: break
            case .end: connectionGuard.requestEnded()
            }
        }
        context.fireChannelRead(data)
    }

    /// An attachment upload (`POST /v1/attachments`): its body may take as long as it keeps arriving.
    private static func isUpload(_ head: HTTPRequestHead) -> Bool {
        guard head.method == .POST else { return false }
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return path.split(separator: "/").elementsEqual(["v1", "attachments"])
    }

    /// The `Origin` of a request for `/v1/ws` that `cors` refuses, or `nil` (another path, no `Origin`, the server's
    /// own origin, or allowed). The path is compared as the router does, without empty segments.
    private static func refusedWebSocketOrigin(_ head: HTTPRequestHead, cors: CORSPolicy) -> String? {
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard path.split(separator: "/").elementsEqual(["v1", "ws"]) else { return nil }
        let origins = head.headers["Origin"]
        guard !origins.isEmpty else { return nil }
        let origin = origins.joined(separator: ", ")
        let hosts = head.headers["Host"]
        return cors.refusesWebSocket(origin: origin, host: hosts.count == 1 ? hosts[0] : nil) ? origin : nil
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !upgraded else {
            context.write(data, promise: promise)
            return
        }
        guard !replaced else {
            // The rest of the bare refusal: the guard wrote the real answer instead.
            promise?.succeed()
            return
        }
        switch unwrapOutboundIn(data) {
        case .head(var head):
            if head.status == .badRequest, let refusal = connectionGuard.takeUpgradeRefusal() {
                replaced = true
                promise?.succeed()
                connectionGuard.refuseNow(refusal)
                return
            }
            if head.status == .switchingProtocols {
                // From here on everything passes through untouched. (Removing this handler inside the write of the
                // 101 lost the flush that follows it: the upgrade answer never left.)
                upgraded = true
                connectionGuard.upgradedToWebSocket()
                break
            }
            guard head.status.code >= 200 else { break }
            connectionGuard.responseStarted()
            if head.status.code >= 400, connectionGuard.isRequestBodyUnfinished {
                // An error answered before the request's body ended (a body over the limit): a client may stop
                // sending the body once it has the answer, so what follows on this connection could be the rest of
                // it or a new request. The connection carries no other request: it says so, and closes.
                head.headers.replaceOrAdd(name: "Connection", value: "close")
                closesAfterResponse = true
                context.write(wrapOutboundOut(.head(head)), promise: promise)
                return
            }
        case .body:
            break
        case .end:
            let written = context.eventLoop.makePromise(of: Void.self)
            if let promise { written.futureResult.cascade(to: promise) }
            context.write(data, promise: written)
            connectionGuard.responseEnded()
            if closesAfterResponse { connectionGuard.closeAfterAnswer(written: written.futureResult) }
            return
        }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case let error as HTTPParserError:
            connectionGuard.parserFailed(error)
        case is ByteToMessageDecoderError:
            break
        default:
            context.fireErrorCaught(error)
        }
    }
}
