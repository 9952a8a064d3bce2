/// Whether the client has a live event stream to the server.
public enum ConnectionState: String, Sendable, Equatable, Codable {
    /// No connection: the network is switched off (``PigeonClient/setNetworkEnabled(_:)``), the client is not
    /// running, or the last attempt failed and the next one waits for its backoff.
    case offline
    /// Opening the event stream.
    case connecting
    /// The event stream is open: the outbox is flushed and events arrive live.
    case online
}
