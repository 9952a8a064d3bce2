/// Limits of the HTTP connections themselves, before any route runs: how long a client may take to send a request
/// head, how large the head may be, and how many connections one client address may hold open.
///
/// A client past one of them gets an HTTP answer with API.md's JSON error body and `Connection: close`, and the
/// connection closes (``idleTimeout`` closes silently).
public struct ConnectionLimits: Sendable {
    /// How long a connection may stay open without a request: from its start, or from the end of the previous
    /// exchange (request and response), to the first byte of the next request head. Past it the connection is closed
    /// without an answer. Does not apply once a connection is a WebSocket (the WebSocket has its own pings).
    public var idleTimeout = Duration.seconds(60)
    /// How long a request head may take from its first byte to its end (the blank line). Past it the client gets
    /// `408 request_timeout` and the connection closes: a client trickling its head (slowloris) cannot hold a
    /// connection longer than this.
    public var headTimeout = Duration.seconds(10)
    /// How long a request body may take from the end of its head to its end. Past it the client gets
    /// `408 request_timeout` (or, with a response under way, the connection closes): a client trickling a body
    /// cannot hold a connection longer than this.
    public var bodyTimeout = Duration.seconds(30)
    /// Largest request line (method, target and version), in bytes; past it: `414 invalid_request`.
    public var maxRequestLineBytes = 8_192
    /// Largest header section (every header line after the request line), in bytes; past it:
    /// `431 invalid_request`.
    public var maxHeaderBytes = 16_384
    /// Most header fields in one request head; past it: `431 invalid_request`.
    public var maxHeaderCount = 100
    /// Connections one client address (an IPv4 address, or an IPv6 /64) may hold open at once, whatever they carry
    /// (HTTP keep-alive, WebSocket, SSE). The next one is answered `503 overloaded` with `Retry-After: 1` and
    /// closed. Peers in ``ServerConfiguration/trustedProxies`` are exempt; 0 turns the limit off.
    public var maxConnectionsPerAddress = 256
    /// The kernel's send buffer of each connection, in bytes (`SO_SNDBUF`; Linux doubles it for its bookkeeping); 0
    /// leaves it to the kernel's autotuning. Bounded by default: a client that never reads otherwise makes the kernel
    /// grow the buffer to megabytes (measured: 2.2 MB queued for one stalled WebSocket, and growing), all of it written
    /// by the server (a reply per operation it sent) before the stream's own budget pauses reading. 256 KiB still
    /// carries 5 MB/s to a client 100 ms away.
    public var socketSendBufferBytes = 256 << 10

    public init() {}
}
