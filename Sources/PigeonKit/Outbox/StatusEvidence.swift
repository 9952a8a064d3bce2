import PigeonProtocol

/// What the SDK learned about an outgoing message; ``MessageStatus/applying(_:)`` turns it into the next status.
package enum StatusEvidence: Sendable, Equatable {
    /// Handed to the transport (a socket write; not success).
    case dispatched
    /// The server's accept answer (202/200 or a WebSocket `ack`) arrived.
    case accepted
    /// `message.stored`, or the message with its seq in history: persisted and ordered.
    case stored
    /// Every other member's delivered watermark reached the message's seq.
    case deliveredToAll
    /// Every other member's read watermark reached the message's seq.
    case readByAll
    /// The SDK gave up: tries spent, or the server refused the message as invalid. Never after `accepted`.
    case failedLocally
    /// The server dead-lettered the message (`message.failed`).
    case failedOnServer
    /// The app called retry.
    case retry
}

extension MessageStatus {
    /// The status after `evidence`, or `nil` when it changes nothing (the rules of docs/ARCHITECTURE.md's status model
    /// and its invariant 4: forward only, each status only on its evidence, failed → pending only by retry).
    ///
    /// One addition: evidence that the *server* has the message (`accepted`, `stored`) also ends a *local* failure.
    /// A local failure means "no answer came", not "the server refused": a late ack, or the message showing up in
    /// `message.stored` or in history, proves it was taken, and showing ⚠️ for a message the others can read
    /// would be the lie the ticks must never tell. Pass `failureIsLocal: false` for a server failure, which is final.
    package func applying(_ evidence: StatusEvidence, failureIsLocal: Bool = true) -> MessageStatus? {
        switch (self, evidence) {
        case (.pending, .dispatched): return .sending
        case (_, .dispatched): return nil
        case (.failed, .retry): return .pending
        case (_, .retry): return nil
        case (.failed, .accepted): return failureIsLocal ? .sent : nil
        case (.failed, .stored): return failureIsLocal ? .stored : nil
        case (.failed, _): return nil
        case (.pending, .failedLocally), (.sending, .failedLocally): return .failed
        case (_, .failedLocally): return nil
        case (.pending, .failedOnServer), (.sending, .failedOnServer), (.sent, .failedOnServer): return .failed
        case (_, .failedOnServer): return nil
        case (_, .accepted): return self < .sent ? .sent : nil
        case (_, .stored): return self < .stored ? .stored : nil
        case (_, .deliveredToAll): return self >= .stored && self < .delivered ? .delivered : nil
        case (_, .readByAll): return self >= .stored && self < .read ? .read : nil
        }
    }
}
