import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonProtocol
import PostgresNIO

/// Receipts: watermarks written in groups, one transaction per group.
extension PostgresMessageStore {
    // MARK: Receipts

    /// A receipt waiting for the next receipt transaction.
    struct PendingReceipt {
        var conversationId: String
        var userId: String
        var kind: ReceiptKind
        var upToSeq: Int64
        var members: [String]
        var continuation: CheckedContinuation<ReceiptOutcome, any Error>
    }

    /// Receipts are written in groups: a transaction that writes events holds its partitions' rows through its
    /// commit, so one transaction per receipt would cap a partition at one receipt per fsync. The writer takes
    /// every receipt that arrived while the previous group was being committed.
    public func recordReceipt(conversationId: String, userId: String, kind: ReceiptKind, upToSeq: Int64) async throws -> ReceiptOutcome {
        guard let members = try await members(of: conversationId), members.contains(userId) else { throw PigeonError.conversationNotFound }
        return try await withCheckedThrowingContinuation { continuation in
            pendingReceipts.withLockedValue {
                $0.append(
                    PendingReceipt(
                        conversationId: conversationId, userId: userId, kind: kind, upToSeq: upToSeq, members: members,
                        continuation: continuation))
            }
            receiptWakeUp.notify()
        }
    }

    /// Writes the queued receipts, a group per transaction, until cancelled; then fails what is left.
    func writeReceipts() async {
        while true {
            await receiptWakeUp.wait(timeout: .seconds(1))
            let group = pendingReceipts.withLockedValue { pending -> [PendingReceipt] in
                let group = Array(pending.prefix(1_000))
                pending.removeFirst(group.count)
                return group
            }
            if Task.isCancelled && group.isEmpty { break }
            guard !group.isEmpty else { continue }
            if pendingReceipts.withLockedValue({ !$0.isEmpty }) { receiptWakeUp.notify() }
            do {
                let (written, committed, moves) = try await withDeadline(.seconds(10)) { try await self.writeReceiptGroup(group) }
                fanout.publish(committed)
                var outcomes = written
                do {
                    outcomes = try await withDeadline(.seconds(10)) { [outcomes] in
                        var measured = outcomes
                        try await self.recordDeliveredStoreTimes(moves, in: &measured)
                        return measured
                    }
                } catch {
                    logger.debug("store times of delivered messages not read", metadata: ["error": "\(String(reflecting: error))"])
                }
                for (receipt, outcome) in zip(group, outcomes) { receipt.continuation.resume(returning: outcome) }
            } catch {
                for receipt in group { receipt.continuation.resume(throwing: error) }
            }
        }
        let left = pendingReceipts.withLockedValue { pending in
            defer { pending = [] }
            return pending
        }
        for receipt in left { receipt.continuation.resume(throwing: PigeonError.overloaded("the server is shutting down")) }
    }

    /// One transaction for a group of receipts: lock the members' rows (in key order, so concurrent groups of
    /// several nodes cannot deadlock), apply the receipts in arrival order, write watermarks and events once.
    /// A delivered watermark that moved: the receipt's index in its group, and where it moved to.
    typealias DeliveredMove = (index: Int, conversationId: String, userId: String, seq: Int64)

    func writeReceiptGroup(_ group: [PendingReceipt]) async throws -> ([ReceiptOutcome], [StoredEvent], [DeliveredMove]) {
        struct Key: Hashable {
            var conversationId: String
            var userId: String
        }
        let keys = Array(Set(group.map { Key(conversationId: $0.conversationId, userId: $0.userId) }))
            .sorted { ($0.conversationId, $0.userId) < ($1.conversationId, $1.userId) }
        return try await transaction { connection -> ([ReceiptOutcome], [StoredEvent], [DeliveredMove]) in
            var watermarks: [Key: (delivered: Int64, read: Int64, lastSeq: Int64)] = [:]
            for try await (conversationId, userId, delivered, read, lastSeq) in try await connection.query(
                """
                SELECT m.conversation_id, m.user_id, m.delivered_seq, m.read_seq, c.last_seq
                FROM members m JOIN conversations c ON c.id = m.conversation_id
                JOIN unnest(\(keys.map(\.conversationId))::text[], \(keys.map(\.userId))::text[]) AS k(c, u)
                    ON m.conversation_id = k.c AND m.user_id = k.u
                ORDER BY m.conversation_id, m.user_id FOR UPDATE OF m
                """, logger: logger
            ).decode((String, String, Int64, Int64, Int64).self) {
                watermarks[Key(conversationId: conversationId, userId: userId)] = (delivered, read, lastSeq)
            }
            let now = WallClock.nowMillis()
            let payloads = EventPayload()
            var events = EventRows()
            var outcomes: [ReceiptOutcome] = []
            var changed = Set<Key>()
            /// Receipts whose delivered watermark moved: which message (for the stored → delivered latency).
            var deliveredMoves: [(index: Int, key: Key, seq: Int64)] = []
            for receipt in group {
                let key = Key(conversationId: receipt.conversationId, userId: receipt.userId)
                guard let (oldDelivered, oldRead, lastSeq) = watermarks[key] else {
                    outcomes.append(ReceiptOutcome(watermarks: ReceiptResponse(deliveredSeq: 0, readSeq: 0), deliveredMessageStoredAt: nil))
                    continue
                }
                let target = min(receipt.upToSeq, lastSeq)
                let delivered = max(oldDelivered, target)
                let read = receipt.kind == .read ? max(oldRead, target) : oldRead
                outcomes.append(ReceiptOutcome(watermarks: ReceiptResponse(deliveredSeq: delivered, readSeq: read), deliveredMessageStoredAt: nil))
                guard delivered != oldDelivered || read != oldRead else { continue }
                watermarks[key] = (delivered, read, lastSeq)
                changed.insert(key)
                var moved: [(ReceiptKind, Int64)] = []
                if delivered != oldDelivered {
                    moved.append((.delivered, delivered))
                    deliveredMoves.append((outcomes.count - 1, key, delivered))
                }
                if read != oldRead { moved.append((.read, read)) }
                for (movedKind, seq) in moved {
                    let payload = try payloads.receipt(
                        ReceiptEvent(conversationId: receipt.conversationId, userId: receipt.userId, kind: movedKind, upToSeq: seq, at: now))
                    events.append(
                        type: "receipt", userIds: receipt.members, sharedPayload: payload, at: now, partition: partition(of: receipt.conversationId))
                }
            }
            guard !changed.isEmpty else { return (outcomes, [], []) }
            let rows = Array(changed)
            var write = BatchWrite(events: events, now: now)
            write.watermarks = WatermarkRows(
                conversationIds: rows.map(\.conversationId), userIds: rows.map(\.userId), delivered: rows.map { watermarks[$0]!.delivered },
                read: rows.map { watermarks[$0]!.read })
            let committed = try await self.write(write, connection)
            return (outcomes, committed, deliveredMoves.map { ($0.index, $0.key.conversationId, $0.key.userId, $0.seq) })
        }
    }

    /// For each delivered watermark that moved onto another member's message, that message's store time (for the
    /// stored → delivered latency); read after the commit, outside the receipts' transaction.
    func recordDeliveredStoreTimes(_ moves: [DeliveredMove], in outcomes: inout [ReceiptOutcome]) async throws {
        guard !moves.isEmpty else { return }
        var storedAt: [String: (Int64, String)] = [:]
        for try await (conversationId, seq, stored, senderId) in try await client.query(
            """
            SELECT m.conversation_id, m.seq, m.stored_at, m.sender_id FROM messages m
            JOIN unnest(\(moves.map(\.conversationId))::text[], \(moves.map(\.seq))::bigint[]) AS k(c, s)
                ON m.conversation_id = k.c AND m.seq = k.s
            """, logger: logger
        ).decode((String, Int64, Int64, String).self) {
            storedAt["\(conversationId) \(seq)"] = (stored, senderId)
        }
        for move in moves {
            if let (stored, senderId) = storedAt["\(move.conversationId) \(move.seq)"], senderId != move.userId {
                outcomes[move.index].deliveredMessageStoredAt = stored
            }
        }
    }
}

