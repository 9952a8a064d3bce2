import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// Receipts: watermarks written in groups, one transaction per group.
extension PostgresMessageStore {
    // MARK: Receipts

    /// A receipt waiting for the next receipt transaction.
    package struct PendingReceipt {
        package var conversationId: String
        package var userId: String
        package var kind: ReceiptKind
        package var upToSeq: Int64
        package var members: [String]
        package var continuation: CheckedContinuation<ReceiptOutcome, any Error>
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
    package func writeReceipts() async {
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

    /// A delivered watermark that moved: the receipt's index in its group, and where it moved to.
    package typealias DeliveredMove = (index: Int, conversationId: String, userId: String, seq: Int64)

    /// A member of a conversation, whose watermarks a receipt moves.
    package struct WatermarkKey: Hashable {
        package var conversationId: String
        package var userId: String

        package init(conversationId: String, userId: String) {
            self.conversationId = conversationId
            self.userId = userId
        }
    }

    /// A member's watermarks, and the conversation's last seq (nil: not known; the receipts are then not clamped and
    /// the write checks that the conversation has reached each of them).
    package typealias KnownWatermarks = (delivered: Int64, read: Int64, lastSeq: Int64?)

    /// Writes a group of receipts: in one statement when this node knows every member's watermarks from its own
    /// earlier receipt groups (``writeReceiptsTrusting(_:cached:)``), else, or when that statement fails, in a
    /// transaction that locks the members' rows first (``writeReceiptsLocking(_:)``).
    package func writeReceiptGroup(_ group: [PendingReceipt]) async throws -> ([ReceiptOutcome], [StoredEvent], [DeliveredMove]) {
        let keys = Array(Set(group.map { WatermarkKey(conversationId: $0.conversationId, userId: $0.userId) }))
        let context = try await receiptContext(keys)
        let cached = watermarkCache.withLockedValue { cache in keys.compactMap { key in cache[key].map { (key, $0) } } }
        if cached.count == keys.count {
            do {
                if let written = try await writeReceiptsTrusting(group, cached: Dictionary(uniqueKeysWithValues: cached), context: context) {
                    return written
                }
            } catch {
                // Another node moved one of these watermarks, or a receipt is beyond what this node saw stored: the
                // locking path reads the rows.
                forgetWatermarks(keys)
                logger.debug("one-statement receipt group refused; writing it under the members' locks", metadata: ["error": "\(String(reflecting: error))"])
            }
        }
        return try await writeReceiptsLocking(group, context: context)
    }

    /// What a receipt group needs to know besides the watermarks (``BlockStore``): its conversations' last seqs and
    /// which of its members are invited, read in one statement (one snapshot).
    package struct ReceiptContext {
        package var lastSeqs: [String: Int64] = [:]
        package var invited = Set<WatermarkKey>()
        /// The invited members of each conversation: they get no `receipt` events until they accept.
        package var invitedMembers: [String: Set<String>] = [:]
    }

    package func receiptContext(_ keys: [WatermarkKey]) async throws -> ReceiptContext {
        var context = ReceiptContext()
        for try await (conversationId, userId, lastSeq, membership, invitedMembers) in try await client.query(
            """
            SELECT k.c, k.u, c.last_seq, mb.membership, i.invited
            FROM unnest(\(keys.map(\.conversationId))::text[], \(keys.map(\.userId))::text[]) AS k(c, u)
            JOIN conversations c ON c.id = k.c
            JOIN members mb ON mb.conversation_id = k.c AND mb.user_id = k.u
            LEFT JOIN LATERAL (
                SELECT array_agg(user_id) AS invited FROM members WHERE conversation_id = k.c AND membership = 'invited') i ON TRUE
            """, logger: logger
        ).decode((String, String, Int64, String, [String]?).self) {
            let key = WatermarkKey(conversationId: conversationId, userId: userId)
            context.lastSeqs[conversationId] = lastSeq
            if let invitedMembers, !invitedMembers.isEmpty { context.invitedMembers[conversationId] = Set(invitedMembers) }
            if membership == MembershipState.invited.rawValue { context.invited.insert(key) }
        }
        return context
    }

    /// The group in one statement, its own transaction, planned on the cached watermarks: the statement sets each
    /// member's watermarks only where they still are the cached ones, and only if every conversation has reached the
    /// seqs the receipts name (they are not clamped: an unknown last seq), and fails as a whole otherwise. Nil when no
    /// watermark would move (then the locking path answers with the stored ones).
    package func writeReceiptsTrusting(
        _ group: [PendingReceipt], cached: [WatermarkKey: (delivered: Int64, read: Int64)], context: ReceiptContext = ReceiptContext()
    ) async throws -> ([ReceiptOutcome], [StoredEvent], [DeliveredMove])? {
        let watermarks = Dictionary(uniqueKeysWithValues: cached.map { key, marks in
            (key, KnownWatermarks(marks.delivered, marks.read, context.lastSeqs[key.conversationId]))
        })
        var (outcomes, batch, moves, final) = try planReceipts(group, watermarks: watermarks, context: context)
        guard !batch.watermarks.userIds.isEmpty else { return nil }
        batch.expectedWatermarks = cached
        for receipt in group {
            batch.reachedSeqs[receipt.conversationId] = max(batch.reachedSeqs[receipt.conversationId] ?? 0, receipt.upToSeq)
        }
        let committed = try await client.withConnection { connection in try await self.write(batch, connection) }
        rememberWatermarks(final)
        return (outcomes, committed, moves)
    }

    /// One transaction for a group of receipts: lock the members' rows (in key order, so concurrent groups of
    /// several nodes cannot deadlock), apply the receipts in arrival order, write watermarks and events once.
    package func writeReceiptsLocking(_ group: [PendingReceipt], context: ReceiptContext = ReceiptContext()) async throws -> (
        [ReceiptOutcome], [StoredEvent], [DeliveredMove]
    ) {
        let keys = Array(Set(group.map { WatermarkKey(conversationId: $0.conversationId, userId: $0.userId) }))
            .sorted { ($0.conversationId, $0.userId) < ($1.conversationId, $1.userId) }
        let (outcomes, committed, moves, final) = try await transaction {
            connection -> ([ReceiptOutcome], [StoredEvent], [DeliveredMove], [WatermarkKey: (delivered: Int64, read: Int64)]) in
            var watermarks: [WatermarkKey: KnownWatermarks] = [:]
            for try await (conversationId, userId, delivered, read, lastSeq) in try await connection.query(
                """
                SELECT m.conversation_id, m.user_id, m.delivered_seq, m.read_seq, c.last_seq
                FROM members m JOIN conversations c ON c.id = m.conversation_id
                JOIN unnest(\(keys.map(\.conversationId))::text[], \(keys.map(\.userId))::text[]) AS k(c, u)
                    ON m.conversation_id = k.c AND m.user_id = k.u
                ORDER BY m.conversation_id, m.user_id FOR UPDATE OF m
                """, logger: logger
            ).decode((String, String, Int64, Int64, Int64).self) {
                let key = WatermarkKey(conversationId: conversationId, userId: userId)
                watermarks[key] = (delivered, read, min(lastSeq, context.lastSeqs[conversationId] ?? lastSeq))
            }
            let (outcomes, batch, moves, final) = try planReceipts(group, watermarks: watermarks, context: context)
            guard !batch.watermarks.userIds.isEmpty else { return (outcomes, [], [], final) }
            return (outcomes, try await self.write(batch, connection), moves, final)
        }
        rememberWatermarks(final)
        return (outcomes, committed, moves)
    }

    /// The receipts applied in arrival order to `watermarks` (a member missing there is no longer one: its receipt
    /// changes nothing): each one's outcome, the write (watermarks that moved and their `receipt` events), the
    /// delivered watermarks that moved, and every member's final watermarks.
    /// An invited member's receipt moves nothing (its watermarks wait for its acceptance), and invited members get no
    /// `receipt` events.
    package func planReceipts(
        _ group: [PendingReceipt], watermarks start: [WatermarkKey: KnownWatermarks], context: ReceiptContext = ReceiptContext()
    ) throws -> ([ReceiptOutcome], BatchWrite, [DeliveredMove], [WatermarkKey: (delivered: Int64, read: Int64)]) {
        var watermarks = start
        let now = WallClock.nowMillis()
        let payloads = EventPayload()
        var events = EventRows()
        var outcomes: [ReceiptOutcome] = []
        var changed = Set<WatermarkKey>()
        var moves: [DeliveredMove] = []
        for receipt in group {
            let key = WatermarkKey(conversationId: receipt.conversationId, userId: receipt.userId)
            guard let (oldDelivered, oldRead, lastSeq) = watermarks[key] else {
                outcomes.append(ReceiptOutcome(watermarks: ReceiptResponse(deliveredSeq: 0, readSeq: 0), deliveredMessageStoredAt: nil))
                continue
            }
            let old = Watermarks(delivered: oldDelivered, read: oldRead)
            let new = context.invited.contains(key) ? old : old.applying(receipt.kind, upTo: receipt.upToSeq, lastSeq: lastSeq)
            outcomes.append(ReceiptOutcome(watermarks: new.response, deliveredMessageStoredAt: nil))
            let moved = new.moves(from: old)
            guard !moved.isEmpty else { continue }
            watermarks[key] = (new.delivered, new.read, lastSeq)
            changed.insert(key)
            if new.delivered != old.delivered { moves.append((outcomes.count - 1, key.conversationId, key.userId, new.delivered)) }
            for (movedKind, seq) in moved {
                if movedKind == .read {
                    events.webhooks.record(webhooks.receiptRead(conversationId: receipt.conversationId, userId: receipt.userId, upToSeq: seq, at: now))
                }
                let invited = context.invitedMembers[receipt.conversationId] ?? []
                let recipients = invited.isEmpty ? receipt.members : receipt.members.filter { !invited.contains($0) }
                let payload = try payloads.receipt(
                    ReceiptEvent(conversationId: receipt.conversationId, userId: receipt.userId, kind: movedKind, upToSeq: seq, at: now))
                events.append(type: "receipt", userIds: recipients, sharedPayload: payload, at: now, partition: partition(of: receipt.conversationId))
            }
        }
        let rows = changed.sorted { ($0.conversationId, $0.userId) < ($1.conversationId, $1.userId) }
        var write = BatchWrite(events: events, now: now)
        write.watermarks = WatermarkRows(
            conversationIds: rows.map(\.conversationId), userIds: rows.map(\.userId), delivered: rows.map { watermarks[$0]!.delivered },
            read: rows.map { watermarks[$0]!.read })
        return (outcomes, write, moves, watermarks.mapValues { ($0.delivered, $0.read) })
    }

    /// Most members whose watermarks a node keeps (the cache starts over when it would hold more).
    package static let watermarkCacheLimit = 100_000

    package func rememberWatermarks(_ watermarks: [WatermarkKey: (delivered: Int64, read: Int64)]) {
        watermarkCache.withLockedValue { cache in
            if cache.count + watermarks.count > Self.watermarkCacheLimit { cache.removeAll(keepingCapacity: true) }
            cache.merge(watermarks) { _, new in new }
        }
    }

    package func forgetWatermarks(_ keys: [WatermarkKey]) {
        watermarkCache.withLockedValue { cache in for key in keys { cache[key] = nil } }
    }

    /// For each delivered watermark that moved onto another member's message, that message's store time (for the
    /// stored → delivered latency); read after the commit, outside the receipts' transaction.
    package func recordDeliveredStoreTimes(_ moves: [DeliveredMove], in outcomes: inout [ReceiptOutcome]) async throws {
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

