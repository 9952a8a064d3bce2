/// Whether the client has a live event stream to the server.
public enum ConnectionState: String, Sendable, Equatable, Codable {
    /// No connection: the network is switched off (``PigeonClient/setNetworkEnabled(_:)``), the client is not
    /// running, or the last attempt failed and the next one waits for its backoff.
    case offline
    /// Opening the event stream.
    case connecting
    /// The event stream is open: the outbox is flushed and events arrive live.
    case online
    /// The server refused this device's token (`401`: the device was revoked, from another device or by
    /// ``PigeonClient/logout(wipeLocalData:)``, or its JWT is no longer valid). Final: the client stops connecting and
    /// sending; unsent messages stay in the local database. Open a client with new credentials to go on.
    case signedOut
}
