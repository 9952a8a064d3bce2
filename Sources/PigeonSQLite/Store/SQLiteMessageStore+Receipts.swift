import Foundation
import GRDB
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol

/// Receipts: watermarks and their events, in group-commit writes.
extension SQLiteMessageStore {
    struct ReceiptWrite: Sendable {
        var outcome: ReceiptOutcome
        var events: [StoredEvent]
    }

    public func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome {
        try await write(
            receiptWrite(conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq),
            afterCommit: { [fanout] write in fanout.publish(write.events) }
        ).outcome
    }

    /// ``recordReceipt(conversationId:userId:kind:upToSeq:)`` without a task: the write joins the group commit and
    /// `completion` runs on the writer after the commit, before the receipt's events are published.
    public func recordReceipt(
        conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64,
        completion: @escaping @Sendable (Result<ReceiptOutcome, any Error>) -> Void
    ) {
        // Without a savepoint of its own (it fails only for a non-member, which reruns the group with every write isolated).
        writer.submit(
            isolated: false, receiptWrite(conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq),
            afterCommit: { [fanout] write in fanout.publish(write.events) },
            completion: { [diskHealth] result in
                switch result {
                case .success(let write):
                    diskHealth.recordSuccess()
                    completion(.success(write.outcome))
                case .failure(let error):
                    completion(.failure(diskHealth.translate(error)))
                }
            })
    }

    /// The receipt's write: the watermarks moved and, for each that moved, a `receipt` event per member.
    func receiptWrite(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) -> @Sendable (Database) throws -> ReceiptWrite {
        { [self] db -> ReceiptWrite in
            guard let members = try membersInTransaction(db, conversationId), members.contains(userId),
                let row = try Row.fetchOne(
                    db.cachedStatement(
                        sql: """
                            SELECT m.delivered_seq, m.read_seq, c.last_seq, m.membership FROM members m JOIN conversations c ON c.id = m.conversation_id
                            WHERE m.conversation_id = ? AND m.user_id = ?
                            """),
                    arguments: [conversationId, userId])
            else { throw PigeonError.conversationNotFound }
            let old = Watermarks(delivered: row[0], read: row[1])
            // An invited member's watermarks wait for its acceptance: its messages are not delivered to it before.
            let invited = (row[3] as String) == MembershipState.invited.rawValue
            let new = invited ? old : old.applying(kind, upTo: upToSeq, lastSeq: row[2])
            let (delivered, read) = (new.delivered, new.read)
            var result = ReceiptWrite(outcome: ReceiptOutcome(watermarks: new.response, deliveredMessageStoredAt: nil), events: [])
            let moved = new.moves(from: old)
            guard !moved.isEmpty else { return result }
            // An invited member gets only its invitation until it accepts: no receipts.
            let invitedMembers = consent.withLockedValue({ $0.invitesExist }) ? try Self.invited(db, conversationId) : []
            try db.cachedStatement(sql: "UPDATE members SET delivered_seq = ?, read_seq = ? WHERE conversation_id = ? AND user_id = ?")
                .execute(arguments: [delivered, read, conversationId, userId])
            let now = WallClock.nowMillis()
            let payloads = EventPayload()
            for (movedKind, seq) in moved {
                if movedKind == .read {
                    try Self.recordWebhook(db, webhooks.receiptRead(conversationId: conversationId, userId: userId, upToSeq: seq, at: now))
                }
                let payload = try payloads.receipt(ReceiptEvent(conversationId: conversationId, userId: userId, kind: movedKind, upToSeq: seq, at: now))
                let payloadId = try Self.insertSharedPayload(db, payload)
                for member in members where !invitedMembers.contains(member) {
                    result.events.append(
                        try Self.insertEvent(
                            db, type: "receipt", userId: member, deviceId: nil, excludedDeviceId: nil, payload: payload, at: now, payloadId: payloadId))
                }
            }
            if delivered != old.delivered,
                let message = try Row.fetchOne(
                    db.cachedStatement(sql: "SELECT stored_at, sender_id FROM messages WHERE conversation_id = ? AND seq = ?"),
                    arguments: [conversationId, delivered]),
                (message[1] as String) != userId
            {
                result.outcome.deliveredMessageStoredAt = message[0]
            }
            return result
        }
    }
}
