/// Limits of the event streams (WebSocket and SSE) of one device or connection. Each is counted on this node.
public struct StreamLimits: Sendable {
    /// Open streams (WebSocket and SSE together) of one device, a (userId, deviceId), on this node. A new stream
    /// past it closes the device's oldest one (WebSocket close 4009, SSE: the response ends): a phone whose old
    /// connections are half-dead must get through with its newest, not be refused until they time out.
    public var maxStreamsPerDevice = 8
    /// Bytes one stream may hold for its client and not yet handed to the socket: queued events and control
    /// frames (acks, errors, typing) alike. A client past it is disconnected (WebSocket close 4008, SSE: the
    /// response ends) and resumes by cursor; it loses nothing. 4 MiB is some 60 messages of the largest size, or
    /// tens of thousands of ordinary ones, behind a socket that does not drain.
    public var outboundBytes = 4 << 20
    /// How long one write to a stream's socket may take before the client is taken as gone (it stopped reading)
    /// and the stream is closed, freeing its descriptor.
    public var writeTimeout = Duration.seconds(30)
    /// How long a WebSocket closed by the server waits for the client's close frame before the socket is
    /// closed anyway.
    public var closeTimeout = Duration.seconds(5)
    /// Typing operations (WebSocket `typing` and `POST .../typing`) per second per device (`rate_limited` past
    /// it; 0: no limit) …
    public var typingPerSecond: Double = 5
    /// … in bursts of up to this many.
    public var typingBurst: Double = 10

    public init() {}

    /// Replies (acks, errors) above this many bytes stop the reading of a WebSocket's operations until the
    /// writer has drained below ``resumeReadingBytes``: a client that never reads its replies is slowed, not
    /// disconnected for what it caused itself.
    var pauseReadingBytes: Int { max(1, outboundBytes / 2) }
    var resumeReadingBytes: Int { outboundBytes / 4 }
}
