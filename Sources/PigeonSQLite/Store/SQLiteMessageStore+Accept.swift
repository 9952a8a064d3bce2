import GRDB
import PigeonDomain
import PigeonProtocol

/// The embedded default's accept path: one durable write per message.
///
/// A send is written straight into the store, in the store's group commit: de-duplicated by the messages' unique
/// (sender, sender device, clientMessageId) index, given its seq, its events written, all in the transaction whose
/// commit (fsynced with `durable`) is the message's only durable write. Its ✓ and its `message.new` follow that one
/// commit; there is no buffer to read back, no second transaction and no acknowledgement to delete. SQLite's own
/// write-ahead log is the log: a crash or power loss after the commit keeps it, one during the commit leaves a torn
/// tail that SQLite's recovery discards (its frames are checksummed and only a commit frame makes a transaction
/// count), and the sender, who got no answer for it, sends it again. docs/decisions/0001-one-durable-write.md has the reasoning.
extension SQLiteMessageStore {
    /// Stores a new message durably, or answers the original of a resend; `completion` runs once the commit is durable
    /// (before the events are published, so the sender's ✓ goes out ahead of its `message.stored`).
    ///
    /// With a `refusal` (over the rate, full), only a resend is answered; a new message fails with it and nothing is
    /// written. A message that fails (the sender left the conversation meanwhile, a disk fault) fails alone.
    package func accept(
        _ message: BufferedMessage, refusal: PigeonError?, completion: @escaping @Sendable (Result<AppendOutcome, any Error>) -> Void
    ) {
        // A refusal throws inside the transaction: isolated, so it does not roll the others back and run them again.
        writer.submit(
            isolated: refusal != nil,
            { [self] db -> AcceptedWrite in
                if let refusal {
                    if let original = try Self.original(of: message, db) { return .duplicate(original) }
                    throw refusal
                }
                let now = WallClock.nowMillis()
                let seq = try Self.fetchLastSeq(db, message.conversationId) + 1
                var events: [StoredEvent] = []
                switch try storeMessage(message, seq: seq, now: now, payloads: EventPayload(), db, into: &events) {
                case .stored(let seq):
                    try db.cachedStatement(sql: "UPDATE conversations SET last_seq = ?, updated_at = MAX(updated_at, ?) WHERE id = ?")
                        .execute(arguments: [seq, now, message.conversationId])
                    return .stored(seq: seq, events: events)
                default:
                    // The (sender, device, clientMessageId) is taken: a resend, answered with the original.
                    guard let original = try Self.original(of: message, db) else {
                        throw PigeonError.overloaded("the message could not be stored; retry shortly")
                    }
                    return .duplicate(original)
                }
            },
            afterCommit: { [fanout] write in
                if case .stored(_, let events) = write { fanout.publish(events) }
            },
            completion: { [diskHealth] result in
                switch result {
                case .success(.stored(let seq, _)):
                    diskHealth.recordSuccess()
                    completion(.success(.stored(seq: seq)))
                case .success(.duplicate(let original)):
                    completion(.success(.duplicate(serverId: original.serverId, acceptedAt: original.acceptedAt)))
                case .failure(let error):
                    completion(.failure(diskHealth.translate(error)))
                }
            }
        )
    }

    /// What one accept wrote.
    package enum AcceptedWrite: Sendable {
        case stored(seq: Int64, events: [StoredEvent])
        case duplicate(Original)
    }

    package struct Original: Sendable {
        package var serverId: String
        package var acceptedAt: Int64
    }

    /// The stored message with `message`'s (sender, device, clientMessageId), if there is one.
    private static func original(of message: BufferedMessage, _ db: Database) throws -> Original? {
        try Row.fetchOne(
            db.cachedStatement(
                sql: "SELECT server_id, accepted_at FROM messages WHERE sender_id = ? AND sender_device_id = ? AND client_message_id = ?"),
            arguments: [message.senderId, message.senderDeviceId, message.clientMessageId]
        ).map { Original(serverId: $0[0], acceptedAt: $0[1]) }
    }
}
