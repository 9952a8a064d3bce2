import Foundation
import Logging
import NIOConcurrencyHelpers
import PigeonDomain
import PigeonProtocol
import PostgresNIO

/// The partitioned event log: reading a device's events, the tail's reads, pruning, and writing events.
extension PostgresMessageStore {
    // MARK: Events

    /// The partition of a conversation's events.
    package func partition(of conversationId: String) -> Int {
        EventPartitioning.partition(ofConversation: conversationId, partitions: eventPartitions)
    }

    package typealias EventTuple = (
        Int32, Int64, String, String, String?, String?, String?,
        String?, String?, String?, Int64?, String?, String?, String?, String?, Int64?, Int64?, Int64?, Int64?, Int64?, String?, String?, Int32?,
        Int64?, String?, String?
    )

    /// The columns of an event row with its payload (stored, or shared) and, for a `message.new` that refers to its
    /// message, the message's columns (``messageColumns``); `e` is the event.
    package static let eventColumns =
        "e.part, e.id, e.type, e.user_id, e.device_id, e.excluded_device_id, COALESCE(e.payload, p.payload), "
        + messageColumnNames.map { "m." + $0 }.joined(separator: ", ")

    package static let eventJoins = """
        LEFT JOIN messages m ON m.conversation_id = e.conversation_id AND m.seq = e.seq
            LEFT JOIN event_payloads p ON p.part = e.part AND p.id = e.payload_id
        """

    /// The events of `rows` (a row with neither a payload nor a message is left out): a `message.new` that refers to
    /// its message is rendered from it as of now, with its reactions as the event's user sees them and its reply
    /// preview (one statement each for all of them, ``decorate(_:readers:client:logger:)``).
    package static func storedEvents(_ rows: [EventTuple], client: PostgresClient, cipher: AtRestCipher, logger: Logger) async throws
        -> [StoredEvent]
    {
        var events: [StoredEvent] = []
        var rendered: [(index: Int, message: Message)] = []
        for t in rows {
            let event = StoredEvent(
                id: t.1, partition: Int(t.0), type: t.2, userId: t.3, deviceId: t.4, excludedDeviceId: t.5, payload: try cipher.open(t.6 ?? ""))
            if t.6 == nil {
                guard let serverId = t.7, let clientMessageId = t.8, let conversationId = t.9, let seq = t.10, let senderId = t.11,
                    let senderDeviceId = t.12, let type = t.13, let body = t.14, let clientTimestamp = t.15, let acceptedAt = t.16,
                    let storedAt = t.17
                else { continue }
                rendered.append(
                    (
                        events.count,
                        try message(
                            (
                                serverId, clientMessageId, conversationId, seq, senderId, senderDeviceId, type, body, clientTimestamp, acceptedAt,
                                storedAt, t.18, t.19, t.20, t.21, t.22 ?? 0, t.23, t.24, t.25
                            ), cipher: cipher)
                    ))
            }
            events.append(event)
        }
        guard !rendered.isEmpty else { return events }
        var messages = rendered.map(\.message)
        try await decorate(&messages, readers: rendered.map { events[$0.index].userId }, client: client, cipher: cipher, logger: logger)
        let payloads = EventPayload()
        for (entry, message) in zip(rendered, messages) { events[entry.index].payload = payloads.messageNew(message) }
        return events
    }

    package func checkLayout(_ position: EventPosition) throws {
        guard position.offsets.count == eventPartitions else {
            throw PigeonError.invalid("an event position of \(position.offsets.count) partitions for a log of \(eventPartitions)")
        }
    }

    public func events(for device: DeviceIdentity, after position: EventPosition, limit: Int) async throws -> [StoredEvent] {
        try checkLayout(position)
        let parts = (0..<eventPartitions).map { Int32($0) }
        var rows: [EventTuple] = []
        // In each partition the next `limit` of the device's events; of those, the first `limit` by (offset,
        // partition): a prefix of every partition, so the cursor after the last one skips nothing.
        for try await row in try await client.query(
            """
            SELECT \(unescaped: Self.eventColumns)
            FROM unnest(\(parts)::integer[], \(position.offsets)::bigint[]) AS t(part, after)
            CROSS JOIN LATERAL (
                SELECT * FROM events x
                WHERE x.user_id = \(device.userId) AND x.part = t.part AND x.id > t.after
                    AND (x.device_id IS NULL OR x.device_id = \(device.deviceId))
                    AND (x.excluded_device_id IS NULL OR x.excluded_device_id <> \(device.deviceId))
                ORDER BY x.id LIMIT \(limit)) e
            \(unescaped: Self.eventJoins)
            ORDER BY e.id, e.part LIMIT \(limit)
            """, logger: logger
        ).decode(EventTuple.self) {
            rows.append(row)
        }
        return try await Self.storedEvents(rows, client: client, cipher: cipher, logger: logger)
    }

    /// The events of `users` (`nil`: everyone's) in `partitions` after `after` (an offset per partition) and up to each
    /// partition's committed head, at most `pageSize` per partition, each partition's in offset order, and those heads
    /// (read first, so every event up to them was committed when the events were read; `after`'s offset for a partition
    /// not read): what the fan-out's tail reads.
    package static func readEvents(
        _ client: PostgresClient, after: [Int64], partitions: [Int], users: [String]?, pageSize: Int, cipher: AtRestCipher,
        logger: Logger
    ) async throws -> (events: [StoredEvent], heads: [Int64]) {
        let parts = partitions.filter { after.indices.contains($0) }.map { Int32($0) }
        var heads = after
        if parts.isEmpty { return ([], heads) }
        for try await (part, offset) in try await client.query(
            "SELECT part, last_offset FROM event_partitions WHERE part = ANY(\(parts))", logger: logger
        ).decode((Int32, Int64).self) {
            heads[Int(part)] = max(heads[Int(part)], offset)
        }
        if users?.isEmpty == true || heads == after { return ([], heads) }
        let afterRead = parts.map { after[Int($0)] }
        let headsRead = parts.map { heads[Int($0)] }
        var rows: [EventTuple] = []
        for try await row in try await client.query(
            """
            SELECT \(unescaped: Self.eventColumns)
            FROM unnest(\(parts)::integer[], \(afterRead)::bigint[], \(headsRead)::bigint[]) AS t(part, after, head)
            CROSS JOIN LATERAL (
                SELECT * FROM events x
                WHERE x.part = t.part AND x.id > t.after AND x.id <= t.head AND (\(users == nil) OR x.user_id = ANY(\(users ?? [])))
                ORDER BY x.id LIMIT \(pageSize)) e
            \(unescaped: Self.eventJoins)
            ORDER BY e.part, e.id
            """, logger: logger
        ).decode(EventTuple.self) {
            rows.append(row)
        }
        return (try await storedEvents(rows, client: client, cipher: cipher, logger: logger), heads)
    }

    public func headPosition() async throws -> EventPosition {
        try await position(in: "last_offset")
    }

    public func prunedThrough() async throws -> EventPosition {
        try await position(in: "pruned_through")
    }

    /// A position read from a column of the partitions' rows (committed values only).
    private func position(in column: String) async throws -> EventPosition {
        var position = EventPosition.start(partitions: eventPartitions)
        for try await (part, offset) in try await client.query(
            "SELECT part, \(unescaped: column) FROM event_partitions WHERE part < \(eventPartitions)", logger: logger
        ).decode((Int32, Int64).self) {
            position.offsets[Int(part)] = offset
        }
        return position
    }

    @discardableResult
    public func pruneEvents(olderThan cutoff: Int64) async throws -> Int {
        try await transaction { connection -> Int in
            // Offsets grow with time within a partition: the newest offset created before the cutoff bounds each.
            var parts: [Int32] = []
            var boundaries: [Int64] = []
            for try await (part, boundary) in try await connection.query(
                "SELECT part, MAX(id) FROM events WHERE created_at < \(cutoff) GROUP BY part", logger: logger
            ).decode((Int32, Int64).self) {
                parts.append(part)
                boundaries.append(boundary)
            }
            guard !parts.isEmpty else { return 0 }
            var deleted = 0
            for try await count in try await connection.query(
                """
                WITH d AS (
                    DELETE FROM events e USING unnest(\(parts)::integer[], \(boundaries)::bigint[]) AS b(part, id)
                    WHERE e.part = b.part AND e.id <= b.id RETURNING 1)
                SELECT COUNT(*) FROM d
                """, logger: logger
            ).decode(Int.self) {
                deleted = count
            }
            // A shared payload's id is its first event's id and its events are consecutive in their partition: it
            // goes with the last of them, so only the first event left in a partition can still point at one.
            try await connection.query(
                """
                DELETE FROM event_payloads p USING unnest(\(parts)::integer[], \(boundaries)::bigint[]) AS b(part, id)
                WHERE p.part = b.part AND p.id <= b.id
                    AND p.id IS DISTINCT FROM (SELECT e.payload_id FROM events e WHERE e.part = b.part AND e.id > b.id ORDER BY e.id LIMIT 1)
                """, logger: logger)
            try await connection.query(
                """
                UPDATE event_partitions x SET pruned_through = GREATEST(x.pruned_through, b.id)
                FROM unnest(\(parts)::integer[], \(boundaries)::bigint[]) AS b(part, id) WHERE x.part = b.part
                """, logger: logger)
            return deleted
        }
    }

    // MARK: Writing rows

    /// Inserts `events` with offsets taken from their partitions' rows (locked to the commit), payloads shared by
    /// several events once; answers them as the sink gets them.
    package func insert(_ events: EventRows, _ connection: PostgresConnection) async throws -> [StoredEvent] {
        try await write(BatchWrite(events: events), connection)
    }

    /// Writes a batch in one statement (one round trip): messages, dead letters, the conversations' last seqs (checked
    /// against `expectedLastSeqs` when given), members' watermarks, and the events with offsets taken from their
    /// partitions' rows (locked to the commit; ``pigeon_take_offsets`` locks them in partition order). Answers the
    /// events as the sink gets them.
    ///
    /// The uploads the messages carry are marked linked and linked to them (`message_attachments`), those that still
    /// exist only: their rows are locked (in id order, so that two batches cannot deadlock on them), so a sweep either removed an upload before (it is
    /// not linked, the message is stored all the same) or finds it linked once this commits (the sweep locks what it
    /// removes and looks again for links after the lock). A delete of a message stored before removes its links and
    /// erases its attachments column with its body.
    package func write(_ batch: BatchWrite, _ connection: PostgresConnection) async throws -> [StoredEvent] {
        let events = batch.events
        // Each event's rank within its partition, in batch order: its offset is the partition's first plus it.
        var counts: [Int32: Int64] = [:]
        var ranks: [Int64] = []
        ranks.reserveCapacity(events.count)
        for part in events.parts {
            ranks.append(counts[part, default: 0])
            counts[part, default: 0] += 1
        }
        let parts = counts.keys.sorted()
        let payloadRanks = events.payloadIndexes.map { $0 < 0 ? Int64(-1) : ranks[Int($0)] }
        let shared = events.sharedPayloads
        let (messages, dead, marks) = (batch.messages, batch.deadLetters, batch.watermarks)
        let conversationIds = batch.lastSeqs.keys.sorted()
        let expected = conversationIds.map { batch.expectedLastSeqs?[$0] ?? -1 }
        let expectedMarks = zip(marks.conversationIds, marks.userIds).map {
            batch.expectedWatermarks?[WatermarkKey(conversationId: $0, userId: $1)]
        }
        let reached = batch.reachedSeqs.keys.sorted()
        let links = messages.links
        let hooks = events.webhooks
        let hidden = batch.hidden
        let checkSenders = batch.consentCheck.map { $0[0] }
        let checkConversations = batch.consentCheck.map { $0[1] }
        var firstOffsets: [Int32: Int64] = [:]
        // The conversations' rows are updated (locked) and checked before the partitions' rows are taken: the
        // offsets' arguments depend on the check.
        for try await (part, first) in try await connection.query(
            """
            WITH seqs AS (
                UPDATE conversations c SET last_seq = u.seq, updated_at = GREATEST(c.updated_at, \(batch.now))
                FROM unnest(\(conversationIds)::text[], \(conversationIds.map { batch.lastSeqs[$0]! })::bigint[], \(expected)::bigint[])
                    AS u(id, seq, expected)
                WHERE c.id = u.id AND (u.expected < 0 OR c.last_seq = u.expected)
                RETURNING c.id),
            marks AS (
                UPDATE members m SET delivered_seq = u.d, read_seq = u.r
                FROM unnest(\(marks.conversationIds)::text[], \(marks.userIds)::text[], \(marks.delivered)::bigint[], \(marks.read)::bigint[],
                    \(expectedMarks.map { $0?.delivered ?? -1 })::bigint[], \(expectedMarks.map { $0?.read ?? -1 })::bigint[])
                    AS u(c, us, d, r, ed, er)
                WHERE m.conversation_id = u.c AND m.user_id = u.us AND (u.ed < 0 OR (m.delivered_seq = u.ed AND m.read_seq = u.er))
                RETURNING 1),
            offs AS MATERIALIZED (
                SELECT taken_part, first_offset FROM pigeon_take_offsets(
                    CASE WHEN pigeon_check(
                        (SELECT count(*) FROM seqs) = \(Int64(conversationIds.count))
                            AND (SELECT count(*) FROM marks) = \(Int64(marks.userIds.count))
                            AND (SELECT count(*) FROM conversations c
                                JOIN unnest(\(reached)::text[], \(reached.map { batch.reachedSeqs[$0]! })::bigint[]) AS q(id, s)
                                    ON c.id = q.id AND c.last_seq >= q.s) = \(Int64(reached.count))
                            AND NOT EXISTS (
                                SELECT 1 FROM unnest(\(checkSenders)::text[], \(checkConversations)::text[]) AS k(u, c)
                                JOIN blocks b ON b.blocked = k.u JOIN members mb ON mb.conversation_id = k.c AND mb.user_id = b.blocker)
                            AND NOT EXISTS (
                                SELECT 1 FROM members mb WHERE mb.conversation_id = ANY(\(checkConversations)::text[]) AND mb.membership = 'invited'),
                        'a conversation or a member is not where the batch was planned on') THEN \(parts)::integer[] END,
                    \(parts.map { counts[$0]! })::bigint[])),
            stored AS (
                INSERT INTO messages(server_id, client_message_id, conversation_id, seq, sender_id, sender_device_id, type, body,
                    client_timestamp, accepted_at, stored_at, target_id, edited_at, deleted_at, reply_to, thread_root, attachments)
                SELECT s.i, s.c, s.cv, s.q, s.u, s.d, s.t, s.b, s.ct, s.a, s.st, NULLIF(s.tg, ''), NULLIF(s.ed, 0), NULLIF(s.dl, 0),
                    NULLIF(s.rt, ''), NULLIF(s.tr, ''), NULLIF(s.at, '')
                FROM unnest(\(messages.serverIds)::text[], \(messages.clientMessageIds)::text[], \(messages.conversationIds)::text[],
                    \(messages.seqs)::bigint[], \(messages.senderIds)::text[], \(messages.senderDeviceIds)::text[], \(messages.types)::text[],
                    \(cipher.seal(all: messages.bodies))::text[], \(messages.clientTimestamps)::bigint[], \(messages.acceptedAt)::bigint[], \(messages.storedAt)::bigint[],
                    \(messages.targetIds)::text[], \(messages.editedAt)::bigint[], \(messages.deletedAt)::bigint[], \(messages.replyTos)::text[],
                    \(messages.threadRoots)::text[], \(messages.attachmentColumns)::text[])
                    AS s(i, c, cv, q, u, d, t, b, ct, a, st, tg, ed, dl, rt, tr, at)),
            hid AS (
                INSERT INTO hidden_messages(conversation_id, seq, user_id, sender_id)
                SELECT h.c, h.s, h.u, h.x FROM unnest(\(hidden.conversationIds)::text[], \(hidden.seqs)::bigint[], \(hidden.userIds)::text[],
                    \(hidden.senderIds)::text[]) AS h(c, s, u, x)
                ON CONFLICT DO NOTHING),
            carried AS (
                UPDATE attachments a SET linked = TRUE
                FROM (SELECT id FROM attachments WHERE id = ANY(\(messages.attachmentIds)::text[]) ORDER BY id FOR NO KEY UPDATE) AS h
                WHERE a.id = h.id RETURNING a.id),
            links AS (
                INSERT INTO message_attachments(attachment_id, conversation_id, seq)
                SELECT k.a, k.c, k.s FROM unnest(\(links.attachmentIds)::text[], \(links.conversationIds)::text[], \(links.seqs)::bigint[]) AS k(a, c, s)
                WHERE k.a IN (SELECT id FROM carried)
                ON CONFLICT DO NOTHING),
            changed AS (
                UPDATE messages m SET body = l.b,
                    edited_at = COALESCE(NULLIF(l.ed, 0), m.edited_at),
                    deleted_at = COALESCE(NULLIF(l.dl, 0), m.deleted_at),
                    attachments = CASE WHEN l.dl <> 0 THEN NULL ELSE m.attachments END
                FROM unnest(\(batch.lifecycle.targetIds)::text[], \(cipher.seal(all: batch.lifecycle.bodies))::text[],
                    \(batch.lifecycle.editedAt)::bigint[], \(batch.lifecycle.deletedAt)::bigint[]) AS l(id, b, ed, dl)
                WHERE m.server_id = l.id),
            unlinked AS (
                DELETE FROM message_attachments x USING messages m, unnest(\(batch.lifecycle.targetIds)::text[], \(batch.lifecycle.deletedAt)::bigint[]) AS l(id, dl)
                WHERE l.dl <> 0 AND m.server_id = l.id AND x.conversation_id = m.conversation_id AND x.seq = m.seq),
            unreacted AS (
                DELETE FROM reactions r USING messages m, unnest(\(batch.lifecycle.targetIds)::text[], \(batch.lifecycle.deletedAt)::bigint[]) AS l(id, dl)
                WHERE l.dl <> 0 AND m.server_id = l.id AND r.conversation_id = m.conversation_id AND r.seq = m.seq),
            erased AS (
                UPDATE messages m SET body = l.e
                FROM unnest(\(batch.lifecycle.targetIds)::text[], \(cipher.seal(all: batch.lifecycle.erasedEdits))::text[]) AS l(id, e)
                WHERE l.e <> '' AND m.target_id = l.id AND m.type = \(ServerMessageType.edit)),
            dead AS (
                INSERT INTO dead_letters(server_id, conversation_id, client_message_id, sender_id, sender_device_id, type, body,
                    client_timestamp, accepted_at, failed_at, error_code, error_message, reply_to, thread_root, attachments)
                SELECT d.i, d.cv, d.c, d.u, d.d, d.t, d.b, d.ct, d.a, d.f, d.ec, d.em, NULLIF(d.rt, ''), NULLIF(d.tr, ''), NULLIF(d.at, '')
                FROM unnest(\(dead.messages.map(\.serverId))::text[], \(dead.messages.map(\.conversationId))::text[],
                    \(dead.messages.map(\.clientMessageId))::text[], \(dead.messages.map(\.senderId))::text[],
                    \(dead.messages.map(\.senderDeviceId))::text[], \(dead.messages.map(\.type))::text[], \(cipher.seal(all: dead.messages.map(\.body)))::text[],
                    \(dead.messages.map(\.clientTimestamp))::bigint[], \(dead.messages.map(\.acceptedAt))::bigint[], \(dead.failedAt)::bigint[],
                    \(dead.codes)::text[], \(dead.errors)::text[], \(dead.messages.map { $0.replyTo ?? "" })::text[],
                    \(dead.messages.map { $0.threadRoot ?? "" })::text[], \(dead.messages.map { AttachmentColumn.encode($0.attachments) ?? "" })::text[])
                    AS d(i, cv, c, u, d, t, b, ct, a, f, ec, em, rt, tr, at)
                ON CONFLICT (server_id) DO UPDATE SET failed_at = excluded.failed_at, error_code = excluded.error_code,
                    error_message = excluded.error_message),
            shared AS (
                INSERT INTO event_payloads(part, id, payload)
                SELECT s.p, o.first_offset + s.r, s.pl
                FROM unnest(\(shared.map { events.parts[Int($0.firstIndex)] })::integer[], \(shared.map { ranks[Int($0.firstIndex)] })::bigint[],
                    \(cipher.seal(all: shared.map(\.payload)))::text[]) AS s(p, r, pl)
                JOIN offs o ON o.taken_part = s.p),
            written AS (
                INSERT INTO events(part, id, user_id, device_id, excluded_device_id, type, created_at, conversation_id, seq, payload, payload_id)
                SELECT e.p, o.first_offset + e.r, e.u, NULLIF(e.d, ''), NULLIF(e.x, ''), e.t, e.c, NULLIF(e.ci, ''), NULLIF(e.s, 0),
                    NULLIF(e.pl, ''), CASE WHEN e.pr < 0 THEN NULL ELSE o.first_offset + e.pr END
                FROM unnest(\(events.parts)::integer[], \(ranks)::bigint[], \(events.userIds)::text[], \(events.deviceIds)::text[],
                    \(events.excludedDeviceIds)::text[], \(events.types)::text[], \(events.createdAt)::bigint[], \(events.conversationIds)::text[],
                    \(events.seqs)::bigint[], \(cipher.seal(all: events.payloads))::text[], \(payloadRanks)::bigint[]) AS e(p, r, u, d, x, t, c, ci, s, pl, pr)
                JOIN offs o ON o.taken_part = e.p),
            hooks AS (
                INSERT INTO webhook_events(id, ordering_key, type, created_at, body, next_attempt_at, retry_from)
                SELECT h.i, h.k, h.t, h.c, h.b, h.c, h.c
                FROM unnest(\(hooks.ids)::text[], \(hooks.orderingKeys)::text[], \(hooks.types)::text[], \(hooks.createdAt)::bigint[],
                    \(cipher.seal(all: hooks.bodies))::text[]) WITH ORDINALITY AS h(i, k, t, c, b, n)
                    -- after the offsets (and so the checks and the locks they wait for): positions in commit order
                    CROSS JOIN (SELECT count(*) FROM offs) AS taken
                ORDER BY h.n)
            SELECT taken_part, first_offset FROM offs
            """, logger: logger
        ).decode((Int32, Int64).self) {
            firstOffsets[part] = first
        }
        var ids: [Int64] = []
        ids.reserveCapacity(events.count)
        for (part, rank) in zip(events.parts, ranks) {
            guard let first = firstOffsets[part] else { throw PigeonError(.internalError, "no offsets were taken in event partition \(part)") }
            ids.append(first + rank)
        }
        var committed: [StoredEvent] = []
        committed.reserveCapacity(events.count)
        for index in 0..<events.count {
            committed.append(
                StoredEvent(
                    id: ids[index], partition: Int(events.parts[index]), type: events.types[index], userId: events.userIds[index],
                    deviceId: events.deviceIds[index].isEmpty ? nil : events.deviceIds[index],
                    excludedDeviceId: events.excludedDeviceIds[index].isEmpty ? nil : events.excludedDeviceIds[index],
                    payload: events.rendered[index]))
        }
        // The sink gets each partition's events in offset order.
        committed.sort { ($0.partition, $0.id) < ($1.partition, $1.id) }
        return committed
    }
}

/// What one processing transaction writes, in one statement (``PostgresMessageStore/write(_:_:)``); its webhook events
/// ride in ``events`` (``EventRows/webhooks``).
package struct BatchWrite {
    package var messages = MessageRows()
    package var deadLetters = DeadLetterRows()
    /// The new last seq of each conversation that stored messages.
    package var lastSeqs: [String: Int64] = [:]
    /// The last seq each conversation must still have for the write to go through (nil: not checked, the batch holds
    /// the conversations' locks since it read them). The statement fails as a whole otherwise.
    package var expectedLastSeqs: [String: Int64]?
    /// The watermarks each member in `watermarks` must still have for the write to go through (nil: not checked).
    package var expectedWatermarks: [PostgresMessageStore.WatermarkKey: (delivered: Int64, read: Int64)]?
    /// A seq each conversation must have reached for the write to go through (receipts planned without clamping).
    package var reachedSeqs: [String: Int64] = [:]
    package var events = EventRows()
    /// Members' receipt watermarks to set.
    package var watermarks = WatermarkRows()
    /// Edits and deletes of messages stored before the batch.
    package var lifecycle = LifecycleRows()
    /// What the batch does to thread roots' summaries (``PostgresMessageStore/writeThreads(_:_:)``, after this write).
    package var threads = ThreadRows()
    /// The store time (a conversation's `updated_at` moves to it).
    package var now: Int64 = 0
    /// Messages the batch hides from members who block their senders (``BlockStore``).
    package var hidden = HiddenRows()
    /// What its edits and deletes do to the versions members keep of edited messages (after this write).
    package var views = ViewChanges()
    /// [sender, conversation] pairs of a batch planned as if no member blocked its sender or were invited (the
    /// one-statement path): the write fails unless that still holds. Empty: not checked.
    package var consentCheck: [[String]] = []
}

/// What a batch's edits and deletes do to `message_views`, in order: each change drops the kept versions of its
/// target but those of the members `keeping`, and gives those members the version before the edit unless they keep an
/// older one. Changes of distinct targets go in one round (one statement each for the drops and the inserts, which
/// touch distinct rows); a target changed again starts the next round.
package struct ViewChanges {
    package struct Target: Hashable {
        package var conversationId: String
        package var seq: Int64
    }

    package struct Change {
        package var target: Target
        package var keeping: [String]
        package var body: String
        package var editedAt: Int64?
    }

    package private(set) var rounds: [[Change]] = []

    package init() {}

    package mutating func change(conversationId: String, seq: Int64, keeping: [String], body: String, editedAt: Int64?) {
        let change = Change(target: Target(conversationId: conversationId, seq: seq), keeping: keeping, body: body, editedAt: editedAt)
        if let last = rounds.indices.last, !rounds[last].contains(where: { $0.target == change.target }) {
            rounds[last].append(change)
        } else {
            rounds.append([change])
        }
    }
}

/// Hidden messages to record, column by column.
package struct HiddenRows {
    package var conversationIds: [String] = []
    package var seqs: [Int64] = []
    package var userIds: [String] = []
    package var senderIds: [String] = []

    package mutating func append(conversationId: String, seq: Int64, userId: String, senderId: String) {
        conversationIds.append(conversationId)
        seqs.append(seq)
        userIds.append(userId)
        senderIds.append(senderId)
    }
}

extension BatchWrite {
    /// A message the batch names as it is at this point of the batch: stored earlier in the batch, or before it
    /// (`stored`, with what the batch did to it since); nil when it is not in `conversationId`.
    package func target(_ serverId: String, in conversationId: String, stored: [String: PostgresMessageStore.StoredTarget]) -> MessageTarget? {
        if let index = messages.index(of: serverId) {
            guard messages.conversationIds[index] == conversationId else { return nil }
            return MessageTarget(
                senderId: messages.senderIds[index], type: messages.types[index], deleted: messages.deletedAt[index] != 0, seq: messages.seqs[index],
                threadRoot: messages.threadRoots[index].isEmpty ? nil : messages.threadRoots[index])
        }
        guard let found = stored[serverId], found.conversationId == conversationId else { return nil }
        var target = found.target
        if let index = lifecycle.targetIds.firstIndex(of: serverId), lifecycle.isDeleted(index) { target.deleted = true }
        return target
    }

    /// The preview of the message `serverId` a reply quotes, as it is at this point of the batch; nil when it is not
    /// in `conversationId`.
    package func preview(of serverId: String, in conversationId: String, stored: [String: PostgresMessageStore.StoredTarget]) -> ReplyPreview? {
        guard let target = target(serverId, in: conversationId, stored: stored) else { return nil }
        let body: String
        if let index = messages.index(of: serverId) {
            body = messages.bodies[index]
        } else if let index = lifecycle.targetIds.firstIndex(of: serverId) {
            body = lifecycle.bodies[index]
        } else {
            body = stored[serverId]?.body ?? ""
        }
        return ReplyPreview(serverId: serverId, senderId: target.senderId, type: target.type, body: body, deleted: target.deleted)
    }

    /// Applies a stored edit (`newBody`) or delete (nil) to its target: in the batch's own rows when the target is
    /// one of them, else as an update of the stored row; a delete also erases the text of the batch's edits of it, and
    /// of a thread reply, has its root's summary recomputed.
    package mutating func apply(targetId: String, newBody: String?, at now: Int64, stored: [String: PostgresMessageStore.StoredTarget]) {
        if newBody == nil {
            let root = messages.index(of: targetId).map { messages.threadRoots[$0] } ?? stored[targetId]?.target.threadRoot ?? ""
            if !root.isEmpty { threads.replyDeleted(in: root) }
        }
        if let index = messages.index(of: targetId) {
            messages.bodies[index] = newBody ?? ""
            if newBody == nil { messages.deletedAt[index] = now } else { messages.editedAt[index] = now }
        } else {
            lifecycle.apply(targetId: targetId, newBody: newBody, at: now)
        }
        guard newBody == nil else { return }
        for index in messages.serverIds.indices where messages.targetIds[index] == targetId && messages.types[index] == ServerMessageType.edit {
            messages.bodies[index] = MessageLifecycle.editText(serverId: targetId, body: "")
        }
    }
}

/// Members' watermarks to set, column by column.
package struct WatermarkRows {
    package var conversationIds: [String] = []
    package var userIds: [String] = []
    package var delivered: [Int64] = []
    package var read: [Int64] = []
}

/// Events to insert, column by column (`""` and 0 stand for NULL).
package struct EventRows {
    package var parts: [Int32] = []
    package var userIds: [String] = []
    package var deviceIds: [String] = []
    package var excludedDeviceIds: [String] = []
    package var types: [String] = []
    package var createdAt: [Int64] = []
    package var conversationIds: [String] = []
    package var seqs: [Int64] = []
    package var payloads: [String] = []
    /// Each event's payload as the sink gets it (a `message.new`'s rendered from its message).
    package var rendered: [String] = []
    /// For each event, the index (among these events) of the first event of its shared payload, or -1.
    package var payloadIndexes: [Int64] = []
    /// Payloads stored once for several events, by the index of the first of them.
    package var sharedPayloads: [(firstIndex: Int64, payload: String)] = []
    /// The webhook events the same transaction records (``WebhookOutbox``), inserted by the same statement.
    package var webhooks = WebhookRows()

    package var count: Int { userIds.count }

    /// One event per user in `userIds`, all pointing at one stored copy of `payload`.
    package mutating func append(type: String, userIds users: [String], sharedPayload payload: String, at now: Int64, partition: Int) {
        guard !users.isEmpty else { return }
        let firstIndex = Int64(count)
        sharedPayloads.append((firstIndex, payload))
        for userId in users {
            append(type: type, userId: userId, payload: nil, at: now, partition: partition)
            payloadIndexes[payloadIndexes.count - 1] = firstIndex
            rendered[rendered.count - 1] = payload
        }
    }

    /// `payload` nil: a `message.new` that refers to its message (conversation and seq) instead of copying it;
    /// `message.rendered` is what the sink gets.
    package mutating func append(
        type: String, userId: String, deviceId: String? = nil, excludedDeviceId: String? = nil, payload: String?, at now: Int64,
        partition: Int, message: (conversationId: String, seq: Int64, rendered: String)? = nil
    ) {
        parts.append(Int32(partition))
        userIds.append(userId)
        deviceIds.append(deviceId ?? "")
        excludedDeviceIds.append(excludedDeviceId ?? "")
        types.append(type)
        createdAt.append(now)
        conversationIds.append(message?.conversationId ?? "")
        seqs.append(message?.seq ?? 0)
        payloads.append(payload ?? "")
        rendered.append(payload ?? message?.rendered ?? "")
        payloadIndexes.append(-1)
    }
}
