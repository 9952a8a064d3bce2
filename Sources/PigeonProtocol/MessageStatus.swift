/// The status of a sent message as its sender sees it (the status table of docs/ARCHITECTURE.md).
///
/// A status only moves forward (``pending`` → ``sending`` → ``sent`` → ``stored`` → ``delivered`` → ``read``);
/// ``failed`` can be reached from any state before ``sent`` is confirmed durable or from a server-side failure,
/// and the one way back is ``failed`` → ``pending`` by an explicit retry.
public enum MessageStatus: String, Codable, Sendable, CaseIterable, Comparable {
    /// ⏰ saved on the device, not yet accepted.
    case pending
    /// On the wire, no answer yet.
    case sending
    /// ✓ durable on the server (the accept answer arrived).
    case sent
    /// ✓ persisted and ordered, has a seq.
    case stored
    /// ✓✓ every other member's devices have it.
    case delivered
    /// Blue ✓✓ every other member has read it.
    case read
    /// ⚠️ retries spent or rejected.
    case failed

    private var rank: Int {
        switch self {
        case .pending: 0
        case .sending: 1
        case .sent: 2
        case .stored: 3
        case .delivered: 4
        case .read: 5
        case .failed: 6
        }
    }

    public static func < (lhs: MessageStatus, rhs: MessageStatus) -> Bool {
        lhs.rank < rhs.rank
    }

    /// The tick a chat UI shows.
    public var tick: String {
        switch self {
        case .pending: "⏰"
        case .sending: "…"
        case .sent, .stored: "✓"
        case .delivered, .read: "✓✓"
        case .failed: "⚠️"
        }
    }

    /// The status after `evidence` arrives, or `nil` if the transition is not allowed (it would move backwards
    /// or skip the evidence a status needs).
    ///
    /// - `failed` is reachable only while the message has no confirmed server state beyond `sent`
    ///   (a server-side `message.failed` for a `sent` message is allowed: the server dead-lettered it).
    /// - `pending` is reachable only from `failed`, by an explicit retry.
    public func advanced(to next: MessageStatus) -> MessageStatus? {
        switch (self, next) {
        case (.failed, .pending): return .pending
        case (_, .failed): return self <= .sent ? .failed : nil
        case (.failed, _): return nil
        default: return next > self ? next : nil
        }
    }
}
